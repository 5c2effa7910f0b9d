"""How long compute takes in simulated time: the `ComputeModel` and how the cluster's flags and
profile make one (``--compute``, ``--speeds``, ``--stragglers``, cores shared by a host's ranks)."""

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from twinsgd.calibration.pace import Pace
from twinsgd.run.units import parse_factor

logger = logging.getLogger(__name__)


@dataclass
class ComputeModel:
    """How long compute takes in simulated time, node by node.

    Parameters
    ----------
    seconds_per_sample : float or None
        None (``--compute measured``): a Compute lasts what the real kernel took in this process,
        and a program's own code between operations what it took. A number (``--compute
        profile``): a Compute over b samples lasts ``seconds_per_step + b * seconds_per_sample``;
        the program's own code is taken as included.
    step_times : calibration.steptimes.StepTimes or None
        ``--compute empirical``: a Compute over b samples lasts one draw from the distribution
        of step times measured in a real run, times ``b / step_times.batch_size``; the program's
        own code is taken as included (it was in the measured steps). Wins over
        ``seconds_per_sample``.
    speeds : sequence of float
        Relative speed of node r, ``speeds[r % len(speeds)]``: 2.0 computes twice as fast.
    straggle_probability, slowdown : float
        Each Compute is, independently with that probability, ``slowdown`` times slower
        (``--stragglers P:SLOWDOWN``).
    seed : int
        Seed of the stragglers' draws (`straggle_factors`).
    seconds_per_step : float
        ``--compute profile``: the part of a training step that does not grow with its batch
        (the update of every weight, the calls' overhead), seconds; 0 for a FLOP rate.
    busy : dict or None
        What the busy cores of a host did to ``speeds`` (`_busy_factors`' record, for
        config.json), None where nothing.
    cold_own_s : float or None
        Seconds a program's own code (timed in this process) takes more right after an
        operation that moved a large message, as measured on the calibrated machine (a
        profile's ``[compute] cold_own_s``); None: nothing more.
    cold_own_code_s : float or None
        Seconds of the calibration's stand-in own code, warm, that took ``cold_own_s`` more:
        own code right after a large message pays that much more over its first this many
        seconds, in proportion (a profile's ``[compute] cold_own_code_s``; None: the first
        part after the message pays it whole).
    pace : callable or None
        Seconds timed in this process (own code; gradients with ``--compute measured``) are
        multiplied by ``pace()``: this machine's speed now put at the calibration's
        (`calibration.pace.Pace`, from a profile's ``[compute] reference_s``); None: as timed.
    """

    seconds_per_sample: float | None = None
    speeds: tuple = (1.0,)
    straggle_probability: float = 0.0
    slowdown: float = 1.0
    seed: int = 0
    step_times: object = None
    seconds_per_step: float = 0.0
    busy: dict | None = None
    cold_own_s: float | None = None
    pace: object = None
    cold_own_code_s: float | None = None

    @property
    def measured(self):
        """True when compute is timed in this process (no profile, no measured distribution)."""
        return self.seconds_per_sample is None and self.step_times is None

    @property
    def kind(self):
        """``measured``, ``profile`` or ``empirical``: what config.json calls the model."""
        return (
            "empirical"
            if self.step_times is not None
            else "measured"
            if self.seconds_per_sample is None
            else "profile"
        )

    def straggle_factors(self, count, n):
        """The straggler factor (1 or ``slowdown``) of the ``count``-th compute of each of ``n``
        nodes, shape (n,): one uniform per node from a generator seeded (seed, count), so the
        event engine (node by node) and the analytic one (all nodes at once) draw the same."""
        u = np.random.default_rng([self.seed, count, 1]).random(n)
        return np.where(u < self.straggle_probability, self.slowdown, 1.0)

    def node_speeds(self, n):
        """Relative speed of each of ``n`` nodes, shape (n,) (the list cycled over them)."""
        return np.resize(np.asarray(self.speeds, np.float64), n)


def compute_model(
    options,
    profile,
    seed,
    model_name,
    flops_per_sample=0,
    batch_size=None,
    ranks_per_host=1,
    turns=False,
):
    """The `ComputeModel` the cluster flags (``options``, sim.run's cluster group) describe, on
    hosts of ``ranks_per_host`` ranks; ValueError naming the flag. ``turns``: the ranks take
    turns on their hosts' cores in the simulator (`sim.cores`), which then slows compute, not
    this model.

    ``--compute profile`` (implied by ``--ghost``) takes a step's seconds per sample and fixed
    seconds from the profile (`sim.cluster_profile`). A ghost run without a profile computes for
    free. ``--compute empirical`` moves the measured step times to the run's ``batch_size``
    (`StepTimes.at_batch`, by the profile's fit of a step's seconds against its batch).
    """
    seconds_per_sample, seconds_per_step, step_times = None, 0.0, None
    if options.ghost and options.compute not in (None, "profile"):
        raise ValueError(
            f"--compute {options.compute} needs the real kernel, which --ghost does "
            f"not run: ghost compute is --profile's seconds per sample"
        )
    needs_profile = options.compute == "empirical" or (
        options.compute == "profile" and not options.ghost  # a ghost's default: free compute
    )
    if needs_profile and profile is None:
        raise ValueError(f"--compute {options.compute} needs --profile NAME|FILE.toml")
    if options.compute == "empirical" and not options.ghost:
        step_times = profile.compute_step_times(model_name)
        if batch_size and batch_size != step_times.batch_size:
            # gradients alone (own code timed in process) move by the gradient's own fit
            fit = profile.gradient_fit(model_name, whole_step=step_times.own_code)
            step_times = step_times.at_batch(batch_size, *fit)
    elif options.compute == "profile" or options.ghost:
        if profile is not None and (profile.has_compute or not options.ghost):
            seconds_per_sample = profile.compute_seconds_per_sample(model_name, flops_per_sample)
            seconds_per_step = profile.compute_seconds_per_step(model_name)
        else:
            seconds_per_sample = 0.0
            if profile is not None:  # an OSU table's profile: communication alone
                logger.info(
                    f"--profile {profile.path} times no compute (no rate or step times in "
                    f"[compute]): the ghost's compute is free (communication alone)"
                )
    speeds, probability, slowdown = _node_speeds(options, seed)
    share = _core_share(options, profile, ranks_per_host, step_times, turns)
    factors, busy = _busy_factors(options, profile, model_name, ranks_per_host, step_times, seed)
    if factors is not None:  # one speed per rank: each keeps its place on its host's cores
        speeds = tuple(speeds[r % len(speeds)] / f for r, f in enumerate(factors))
    return ComputeModel(
        seconds_per_sample,
        tuple(s * share for s in speeds),
        probability,
        slowdown,
        seed,
        step_times,
        seconds_per_step,
        busy,
        profile.cold_own_s if profile is not None else None,
        Pace(profile.reference_s) if profile is not None and profile.reference_s else None,
        profile.cold_own_code_s if profile is not None else None,
    )


def _busy_factors(options, profile, model_name, ranks_per_host, step_times, seed):
    """How much longer each rank's compute takes for the other ranks computing on its host's
    cores at once (`calibration.busycores`, the profile's ``[compute.busy.MODEL]``) than when
    its compute was measured: ``(factors, record)``, one factor per rank and, for config.json,
    ``{"busy": k now, "reference": k then, "mean": the mean factor}``; ``(None, None)`` where
    the profile measured none or both are one.

    Now: ``min(ranks on the host, cores)`` (a rank waiting in MPI spins on its core too, but
    takes little of the caches and memory that computing ranks share). Then: the step times'
    run on one machine, ``min(ranks, cores)`` of it; the hot loop (`--compute profile`) and a
    kernel timed in the simulator's own process computed alone, 1."""
    busy = profile.busy.get(model_name) if profile is not None else None
    cores = options.cores_per_host or (profile.cores if profile is not None else None)
    if busy is None or not cores:
        return None, None
    one_machine = profile.one_machine and ranks_per_host == 1
    per_host = options.nodes if one_machine else ranks_per_host
    then = min(step_times.ranks, step_times.cores) if step_times and step_times.cores else 1
    now = min(per_host, cores)
    if now == then == 1:
        return None, None
    reference, rng, factors = busy.mean_at(then), np.random.default_rng([seed, 3]), []
    for first in range(0, options.nodes, per_host):
        ranks = min(per_host, options.nodes - first)
        factors += [f / reference for f in busy.rank_factors(ranks, min(ranks, cores), rng)]
    return factors, {"busy": now, "reference": then, "mean": round(float(np.mean(factors)), 4)}


def _core_share(options, profile, ranks_per_host, step_times=None, turns=False):
    """The share of a core each rank gets: ``min(1, cores / ranks)`` per host with
    ``--ranks-per-host R`` on hosts of ``--cores-per-host C`` cores (else the profile's
    ``[cluster] cores``). A time-sharing model: every rank on a host computes at once (as in a
    synchronous step), so R ranks on C < R cores each run C/R as fast.

    A profile of hosts emulated on one machine (``one_machine``) puts every node of the run on
    that machine's cores (R = --nodes) unless --ranks-per-host says otherwise. Step times
    measured in a real run already carry the sharing of that run: the share is relative to it
    (`StepTimes.core_slowdown`). With ``turns`` the simulator shares the cores: a step's
    own seconds are wanted, the measured ones without the sharing of their run."""
    if turns:
        return 1.0 / step_times.core_slowdown(1, 1) if step_times is not None else 1.0
    one_machine = profile is not None and profile.one_machine and ranks_per_host == 1
    ranks = options.nodes if one_machine else ranks_per_host
    cores = options.cores_per_host or (profile.cores if profile else None) or ranks
    if step_times is not None:
        return 1.0 / step_times.core_slowdown(
            ranks, cores if one_machine or ranks_per_host > 1 else 0
        )
    return min(1.0, cores / ranks)


def node_speeds(spec, nodes, seed):
    """Relative speeds of ``--speeds spec``: a list (cycled over the nodes), a file of one
    factor a line, or one draw per node of ``lognormal:SIGMA`` (median 1) or ``uniform:LO:HI``
    from a generator seeded by ``seed``. ValueError naming the flag."""
    kind, _, parameters = spec.partition(":")
    rng = np.random.default_rng([seed, 2])
    if kind in ("lognormal", "uniform"):
        try:
            values = [float(x) for x in parameters.split(":")]
        except ValueError:
            values = []
        if kind == "lognormal" and len(values) == 1 and values[0] >= 0:
            return tuple(float(x) for x in rng.lognormal(0.0, values[0], nodes))
        if kind == "uniform" and len(values) == 2 and 0 < values[0] <= values[1]:
            return tuple(float(x) for x in rng.uniform(*values, nodes))
        raise ValueError(
            f"--speeds expects lognormal:SIGMA (SIGMA >= 0) or uniform:LO:HI "
            f"(0 < LO <= HI), got {spec}"
        )
    if Path(spec).is_file():
        text = Path(spec).read_text().split()
        speeds = tuple(parse_factor(x if x[-1] == "x" else x + "x") for x in text)
    else:
        speeds = tuple(parse_factor(x) for x in spec.split(","))
    if not speeds or not all(x > 0 for x in speeds):
        raise ValueError(f"--speeds must be > 0, got {spec}")
    return speeds


def parse_stragglers(spec):
    """``--stragglers P:SLOWDOWN`` -> (P, SLOWDOWN): 0 <= P <= 1, SLOWDOWN >= 1 (a factor such
    as 4x); ValueError saying what is wrong.

    >>> parse_stragglers("0.05:4x")
    (0.05, 4.0)
    """
    p, colon, factor = spec.partition(":")
    try:
        probability = float(p)
    except ValueError:
        probability = math.nan
    if not colon or not 0.0 <= probability <= 1.0:
        raise ValueError(
            f"stragglers: expects P:SLOWDOWN with 0 <= P <= 1, e.g. 0.05:4x, got {spec!r}"
        )
    slowdown = parse_factor(factor)
    if slowdown < 1.0:
        raise ValueError(f"stragglers: SLOWDOWN must be >= 1x, got {spec!r}")
    return probability, slowdown


def _node_speeds(options, seed):
    """(speeds, straggle probability, slowdown) from --speeds and --stragglers."""
    try:
        speeds = node_speeds(options.speeds, options.nodes, seed)
    except ValueError as err:
        message = str(err)
        raise ValueError(
            message if message.startswith("--speeds") else f"--speeds {options.speeds}: {message}"
        ) from None
    probability, slowdown = options.stragglers or (0.0, 1.0)
    return speeds, probability, slowdown
