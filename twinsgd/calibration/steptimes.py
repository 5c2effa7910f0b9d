"""Compute seconds per training step as measured in the real program: an empirical distribution.

Why not one number timed in a hot loop: on an emulated cluster a training step of the MLP took
2.55 ms inside `real.train` (gradient 1.52 ms, the program's own code -- Adam, the batch, the
bookkeeping -- 1.0 ms) against 1.40 ms for the same gradient and update timed alone in a loop:
inside a run the weights and optimizer state are evicted by MPI's copies and the kernel's TCP
work, and the other rank competes for the memory system. And a synchronous step waits for the
slowest node, so the spread of step times, not only their median, sets the time per iteration.
So the simulator's ``--compute empirical`` draws each node's step from the distribution measured
in a real run of the same model and batch size (``real.calibrate`` records one; ``real.calibrate
--from-run RUN_DIR`` takes one from any run folder's steps.csv).

A distribution is stored as its quantile function on a fixed grid (`GRID` probabilities), which
keeps the profile small whatever the number of steps and makes a draw one interpolation.
"""

import csv
import dataclasses
import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

GRID = tuple(i / 100 for i in range(101))  # probabilities of the stored quantiles


def check_quantiles(q, name):
    """ValueError (naming ``name``) unless ``q`` is a quantile function on `GRID`: one value
    per probability, finite, > 0 and non-decreasing."""
    if len(q) != len(GRID):
        raise ValueError(f"{name} must hold {len(GRID)} values, got {len(q)}")
    falls = any(b < a for a, b in itertools.pairwise(q))
    if falls or not all(math.isfinite(x) and x > 0 for x in q):
        raise ValueError(f"{name} must be finite, > 0 and non-decreasing")


def quantile_at(q, p):
    """The quantile function ``q`` (on `GRID`) at probability ``p`` in [0, 1], linearly
    interpolated; plain Python, since the simulator draws per Compute and per message."""
    x = p * (len(GRID) - 1)
    i = min(int(x), len(GRID) - 2)
    return q[i] + (x - i) * (q[i + 1] - q[i])


def quantile_mean(q):
    """The mean of the distribution whose quantile function on `GRID` is ``q`` (the
    interpolated function's: trapezoids)."""
    q = np.asarray(q, dtype=np.float64)
    return float(np.mean((q[1:] + q[:-1]) / 2))


WARMUP_STEPS = 2  # each rank's first steps are dropped: one-off page faults and cold caches


@dataclass(frozen=True)
class StepTimes:
    """The measured distribution of one rank's compute seconds per training step.

    Parameters
    ----------
    quantiles_s : tuple of float
        Seconds at the probabilities of `GRID` (non-decreasing, > 0), one step of ``batch_size``
        samples: the Compute of the gradient and the program's own code around it (optimizer,
        batch), as steps.csv's ``compute_s`` counts them.
    batch_size : int
        Samples per measured step.
    steps : int
        Steps the distribution was made from (all ranks, warm-up dropped).
    ranks : int
        Ranks of the measured run, and ``cores``: the cores they shared if they ran on one
        machine (0 if each had its own), so a prediction for another number of ranks on the
        same machine can rescale for the cores (`core_slowdown`).
    model, source : str
        The model measured, and where the numbers come from (a run folder, a calibration).
    own_code : bool
        True: the quantiles are whole steps, the program's own code included (what steps.csv
        counts). False: they are the gradient's Compute alone (what a real run's timeline.json
        records), and the simulator times each program's own code in process, so a program
        whose own code differs from the measured one (a codec, a server's update, gossip's
        mixing) is charged for what it does.
    own_s, own_alone_s : float
        Mean seconds per step of the program's own code in the measured run, and of the same
        program alone in one process, as the simulator times it (0: not measured), for the
        reader: the ring's update and next batch took 1.27 and 1.64 times as long in the run
        as alone in two calibrations (2026-12-05), a ratio the simulator does not use (it did
        not carry to other programs' own code: `sim.backend._OwnCode`). A profile's
        ``own_solo_s`` before 2026-12-05 was a third of the alone time (divided by three
        windows' steps where one window ran) and is not read.

    Examples
    --------
    >>> times = StepTimes.from_samples([1e-3, 2e-3, 3e-3, 4e-3, 5e-3], batch_size=100)
    >>> round(times.median_s * 1e3, 6), round(times.mean_s * 1e3, 6)
    (3.0, 3.0)
    >>> round(times.seconds_at(0.25) * 1e3, 6)  # the quantile function, interpolated
    2.0
    """

    quantiles_s: tuple
    batch_size: int
    steps: int
    ranks: int = 1
    cores: int = 0
    model: str = ""
    source: str = ""
    own_code: bool = True
    own_s: float = 0.0
    own_alone_s: float = 0.0

    def __post_init__(self):
        check_quantiles(self.quantiles_s, "quantiles_s")
        if self.batch_size < 1 or self.steps < 1:
            raise ValueError(
                f"batch_size and steps must be >= 1, got {self.batch_size} and {self.steps}"
            )

    @classmethod
    def from_samples(cls, seconds, batch_size, **about):
        """The distribution of the step times ``seconds`` (> 0, at least 1)."""
        s = np.asarray(seconds, dtype=np.float64)
        if s.ndim != 1 or len(s) < 1:
            raise ValueError(f"need at least one step time, got shape {s.shape}")
        return cls(tuple(float(x) for x in np.quantile(s, GRID)), int(batch_size), len(s), **about)

    @property
    def median_s(self):
        """Median seconds per step."""
        return self.quantiles_s[50]

    @property
    def mean_s(self):
        """Mean seconds per step (of the interpolated quantile function)."""
        return quantile_mean(self.quantiles_s)

    def seconds_at(self, p):
        """The quantile at probability ``p`` in [0, 1], linearly interpolated on `GRID`."""
        return quantile_at(self.quantiles_s, p)

    def at_batch(self, batch, per_step_s, per_sample_s):
        """These step times moved to steps of ``batch`` samples by a calibration's hot-loop fit
        ``t(b) = per_step_s + b per_sample_s``: each quantile times ``t(batch) / t(B)``. A step
        has a part no sample adds to (per-call overhead, the update of every weight), so the
        time does not shrink in proportion to the batch; the ratio keeps whatever the real run
        added to the hot loop (a cold cache, a busy memory bus) in proportion. Without a fit
        (``per_sample_s`` 0): times ``batch / B``.

        >>> times = StepTimes.from_samples([2e-3, 4e-3, 6e-3], batch_size=100)
        >>> round(times.at_batch(50, 1e-3, 1e-5).median_s * 1e3, 6)  # 4 ms x 1.5 / 2
        3.0
        """
        at_measured = per_step_s + per_sample_s * self.batch_size
        if per_sample_s > 0 and per_step_s >= 0:
            factor = (per_step_s + per_sample_s * batch) / at_measured
        else:
            factor = batch / self.batch_size
        return dataclasses.replace(
            self,
            quantiles_s=tuple(q * factor for q in self.quantiles_s),
            batch_size=int(batch),
            source=f"{self.source}, moved from batch {self.batch_size} to {batch}",
        )

    def draw(self, rng):
        """One step's seconds drawn from the distribution (inverse transform of a uniform).

        NOTE: plain Python per draw, since the simulator draws once per Compute."""
        return self.seconds_at(rng.random())

    def core_slowdown(self, ranks, cores):
        """How much slower a step is with ``ranks`` ranks sharing ``cores`` cores than it was
        when measured: ``max(1, ranks / cores) / max(1, measured ranks / measured cores)``.
        Ranks on machines of their own (``cores`` 0) are not slowed."""
        then = max(1.0, self.ranks / self.cores) if self.cores else 1.0
        now = max(1.0, ranks / cores) if cores else 1.0
        return now / then

    def to_dict(self):
        """Plain values for a TOML profile (``[compute.steps.MODEL]``)."""
        return {
            "batch_size": self.batch_size,
            "steps": self.steps,
            "ranks": self.ranks,
            "cores": self.cores,
            "source": self.source,
            "own_code": self.own_code,
            "own_s": float(f"{self.own_s:.6g}"),
            "own_alone_s": float(f"{self.own_alone_s:.6g}"),
            "median_s": float(f"{self.median_s:.6g}"),
            "quantiles_s": [float(f"{x:.6g}") for x in self.quantiles_s],
        }

    @classmethod
    def from_dict(cls, document, model=""):
        """The inverse of `to_dict`; ValueError naming the key that is missing or wrong."""
        try:
            return cls(
                tuple(float(x) for x in document["quantiles_s"]),
                int(document["batch_size"]),
                int(document["steps"]),
                int(document.get("ranks", 1)),
                int(document.get("cores", 0)),
                model,
                str(document.get("source", "")),
                bool(document.get("own_code", True)),
                float(document.get("own_s", 0.0)),
                float(document.get("own_alone_s", 0.0)),  # (own_solo_s: not read, see above)
            )
        except KeyError as err:
            raise ValueError(f"[compute.steps.{model}] needs {err.args[0]!r}") from None
        except (TypeError, ValueError) as err:
            raise ValueError(f"[compute.steps.{model}]: {err}") from err


def read_run_steps(run_dir, warmup_steps=WARMUP_STEPS):
    """The compute seconds per step of every computing rank of a run folder, and its config.

    Reads ``steps.csv`` and ``config.json``; drops each rank's first ``warmup_steps`` steps and
    the rows of ranks that computed nothing (an asynchronous parameter server's updates).
    Returns ``(seconds, config)``: a 1-d float array and the config.json document. ValueError
    (one line naming the file) if the folder is not a run folder or holds no steps.
    """
    import json

    run = Path(run_dir)
    try:
        config = json.loads((run / "config.json").read_text())
        with open(run / "steps.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, ValueError) as err:
        raise ValueError(f"--from-run {run_dir}: not a readable run folder ({err})") from None
    by_rank = {}
    for row in rows:
        try:
            by_rank.setdefault(row["rank"], []).append(float(row["compute_s"]))
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"--from-run {run_dir}: steps.csv has a row without a number in compute_s: {row}"
            ) from None
    seconds = [
        s for steps in by_rank.values() for s in steps[warmup_steps:] if sum(steps) > 0 and s > 0
    ]
    if not seconds:
        raise ValueError(
            f"--from-run {run_dir}: steps.csv holds no computing steps past the "
            f"first {warmup_steps} of each rank"
        )
    return np.array(seconds), config


def read_run_gradients(run_dir, warmup_steps=WARMUP_STEPS):
    """The seconds of every Compute operation (the gradient) of a real run, from its
    timeline.json (Chrome trace events named ``compute``), each rank's first ``warmup_steps``
    dropped; None when the folder has no timeline (a simulated run, a run still going)."""
    return read_run_events(run_dir, "compute", warmup_steps)


def read_run_events(run_dir, name, warmup_steps=WARMUP_STEPS):
    """The seconds of every timeline event named ``name`` of a real run (timeline.json's
    Chrome trace events), each rank's first ``warmup_steps`` dropped (one event a step);
    None when the folder has no timeline or no such event."""
    import json

    try:
        events = json.loads((Path(run_dir) / "timeline.json").read_text())["traceEvents"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    by_rank = {}
    for event in events:
        if event.get("ph") == "X" and event.get("name") == name:
            by_rank.setdefault(event.get("tid"), []).append(float(event["dur"]) * 1e-6)
    seconds = [s for durations in by_rank.values() for s in durations[warmup_steps:] if s > 0]
    return np.array(seconds) if seconds else None


def step_times_from_run(run_dir, warmup_steps=WARMUP_STEPS, own_alone_s=0.0):
    """The `StepTimes` of a run folder, with the cores its ranks shared on one machine from
    config.json's ``machine_cores`` (0: each had its own, or not known): of its gradients alone
    (`read_run_gradients`) when it has a timeline, with the mean own code per step beside them,
    else of its whole steps (`read_run_steps`). ``own_alone_s``: the own code per step of the
    same program alone in one process, if measured."""
    return step_times_from_runs([run_dir], warmup_steps, own_alone_s)


def step_times_from_runs(run_dirs, warmup_steps=WARMUP_STEPS, own_alone_s=0.0):
    """`step_times_from_run` of several runs of one program (the same model, batch and
    ranks) taken together: their samples pooled, as `real.calibrate` measures the program in
    windows spread over its measurements (a machine whose speed changes from second to second
    is then met at more of its speeds than by one window)."""
    runs = [(run_dir, *read_run_steps(run_dir, warmup_steps)) for run_dir in run_dirs]
    gradients = [read_run_gradients(run_dir, warmup_steps) for run_dir in run_dirs]
    run_dir, _, config = runs[0]
    seconds = np.concatenate([seconds for _, seconds, _ in runs])
    cores = int(config.get("machine_cores") or 0)
    cfg = config.get("config", config)
    try:
        batch_size, model = int(cfg["batch_size"]), str(cfg["model"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(
            f"--from-run {run_dir}: config.json does not name the batch size and model"
        ) from None
    ranks = int(config.get("nodes") or config.get("ranks") or 1)
    what = f"({cfg.get('algorithm', '?')}, {ranks} ranks)"
    where = ", ".join(str(run_dir) for run_dir, _, _ in runs)
    if all(g is not None for g in gradients):
        gradients = np.concatenate(gradients)
        own_s = max(0.0, float(np.mean(seconds) - np.mean(gradients)))  # per step
        return StepTimes.from_samples(
            gradients,
            batch_size,
            ranks=ranks,
            cores=cores,
            model=model,
            own_code=False,
            own_s=own_s,
            own_alone_s=own_alone_s,
            source=f"timeline.json of {where} {what}",
        )
    return StepTimes.from_samples(
        seconds,
        batch_size,
        ranks=ranks,
        cores=cores,
        model=model,
        source=f"steps.csv of {where} {what}",
    )
