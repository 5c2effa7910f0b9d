"""Checkpoints of a run, rank by rank, and resuming from the newest one every rank has.

``--checkpoint-every K`` makes each rank write ``RUN/checkpoint/rank<r>-step<k>.npz`` at the end
of every K-th step: its weights, optimizer state (step count and moment arrays), random
generator state, error-feedback residuals, its position in the data (the step; data order is a
function of the seed and the epoch) and its run log's totals and clock. Each file is written to
a temporary name, flushed to disk and renamed, so it lands whole or not at all; a rank keeps its
two newest. No collective is involved, so a rank killed mid-write costs nothing but that file:
``--resume RUN`` takes the newest step for which every rank has a file.

Arrays go in as arrays and everything else as one JSON document (a uint8 array named ``meta``):
loading never unpickles anything.

The state that lives in a node program between steps must be rebuildable from the node's at the
checkpoint step, so checkpoints are taken where it is: Local-SGD and gossip at synchronisation
steps (K a multiple of ``--local-steps``; the round counter of gossip is the step over the
period). An asynchronous or stale-synchronous parameter server has messages in flight at every
step end, and CHOCO gossip keeps per-edge copies in its program: those refuse
``--checkpoint-every`` (`check_checkpointable`).
"""

import json
import os
import re
from pathlib import Path

import numpy as np

FORMAT = 1
KEEP = 2  # checkpoints a rank keeps (the newest two: one may be torn by a kill mid-write)
_NAME = re.compile(r"^rank(\d+)-step(\d+)\.npz$")
RESUME_MAY_DIFFER = (
    "out",
    "overwrite",
    "resume",
    "faults",
    "watchdog",
    "progress",
    "checkpoint_every",
)  # a resumed run's options that change no arithmetic


def check_checkpointable(cfg):
    """Raise ValueError naming the flag when ``--checkpoint-every`` cannot be honoured."""
    every = cfg.checkpoint_every
    if every is None:
        return
    if every < 1:
        raise ValueError(f"--checkpoint-every must be >= 1, got {every}")
    if cfg.algorithm == "ps" and cfg.mode != "sync":
        raise ValueError(
            f"--checkpoint-every needs a synchronous run: --mode {cfg.mode} has "
            f"messages in flight at every step end"
        )
    if cfg.algorithm == "gossip" and cfg.compress != "none" and cfg.gossip == "weights":
        raise ValueError(
            "--checkpoint-every: CHOCO gossip (--compress with --gossip weights) "
            "keeps per-edge copies in its program; not checkpointed"
        )
    if every % cfg.local_steps:
        raise ValueError(
            f"--checkpoint-every {every} must be a multiple of --local-steps "
            f"{cfg.local_steps} (checkpoints are taken at synchronisation steps)"
        )


def checkpoint_path(run_dir, rank, iteration):
    """Where ``rank``'s checkpoint of step ``iteration`` lives in run folder ``run_dir``."""
    return Path(run_dir) / "checkpoint" / f"rank{rank}-step{iteration}.npz"


class Checkpointer:
    """Writes one rank's checkpoints every ``every`` steps (`Node.checkpoint`, which the backends
    call as each step is logged, calls `after`).

    ``log``: the rank's `run.runlog.RunLog` (its totals and clock go in too).
    """

    def __init__(self, folder, every, log):
        self.folder, self.every, self.log = Path(folder), every, log
        (self.folder / "checkpoint").mkdir(exist_ok=True)
        self._kept = None  # this rank's checkpoints on disk, oldest first (read once)

    def after(self, node, step):
        """Write ``node``'s checkpoint if ``step`` is a checkpoint step (not the last one), and
        remove this rank's older ones beyond `KEEP`."""
        if step.iteration % self.every or step.iteration == node.last_iteration:
            return
        if self._kept is None:  # a resumed run finds its earlier ones
            self._kept = [
                checkpoint_path(self.folder, node.rank, i)
                for i in sorted(_steps_on_disk(self.folder).get(node.rank, ()))
            ]
        self.log.steps.flush()  # the steps up to the checkpoint are on disk before it is
        path = checkpoint_path(self.folder, node.rank, step.iteration)
        save(path, node, step, self.log)
        self._kept.append(path)
        while len(self._kept) > KEEP:
            self._kept.pop(0).unlink(missing_ok=True)


def save(path, node, step, log):
    """Write ``node``'s state after ``step`` to ``path`` atomically (temp file, fsync, rename)."""
    optimizer = node.optimizer.state_dict()
    arrays = {"params": node.model.params, "losses": np.asarray(node.pending_losses, np.float64)}
    scalars = {}
    for key, value in optimizer.items():
        if isinstance(value, np.ndarray):
            arrays[f"optimizer.{key}"] = value
        else:
            scalars[key] = value
    for i, stream in enumerate(node.streams):
        if stream.residual is not None:
            arrays[f"residual.{i}"] = stream.residual
    meta = {
        "format": FORMAT,
        "rank": node.rank,
        "iteration": step.iteration,
        "epoch": step.epoch,
        "time_s": log.time_s,
        "totals": log.totals,
        "optimizer": scalars,
        "rng": node.rng.bit_generator.state,
        "config": node.cfg.as_dict(),
    }
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def newest_complete(run_dir, size):
    """The newest step every rank ``0 .. size-1`` has a checkpoint of in ``run_dir``, or None."""
    by_rank = _steps_on_disk(run_dir)
    complete = set.intersection(*(by_rank.get(rank, set()) for rank in range(size)))
    return max(complete, default=None)


def _steps_on_disk(run_dir):
    """{rank: set of steps} of the checkpoints in ``run_dir``."""
    folder, found = Path(run_dir) / "checkpoint", {}
    for path in folder.iterdir() if folder.is_dir() else ():
        if match := _NAME.match(path.name):
            found.setdefault(int(match[1]), set()).add(int(match[2]))
    return found


def load(run_dir, rank, iteration):
    """(arrays dict, meta dict) of ``rank``'s checkpoint at ``iteration``; ValueError naming the
    file if it does not read."""
    path = checkpoint_path(run_dir, rank, iteration)
    try:
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
        meta = json.loads(arrays.pop("meta").tobytes())
    except (OSError, ValueError, KeyError, EOFError) as err:
        raise ValueError(f"--resume: {path}: does not read ({type(err).__name__}: {err})") from None
    if meta.get("format") != FORMAT:
        raise ValueError(f"--resume: {path}: format {meta.get('format')!r}, expected {FORMAT}")
    return arrays, meta


def restore(node, log, arrays, meta):
    """Put a checkpoint back: weights, optimizer, generator, residuals, data position, log."""
    node.model.params[:] = arrays["params"]
    optimizer = node.optimizer
    optimizer.t = meta["optimizer"]["t"]
    for key, value in arrays.items():
        if key.startswith("optimizer."):
            getattr(optimizer, key.removeprefix("optimizer."))[:] = value
    node.rng.bit_generator.state = meta["rng"]
    node.restored_residuals = {
        int(k.split(".")[1]): v for k, v in arrays.items() if k.startswith("residual.")
    }
    node.start_iteration = meta["iteration"]
    node.pending_losses[:] = arrays["losses"].tolist()
    log.totals.update(meta["totals"])
    log.iterations, log.time_s = meta["iteration"], meta["time_s"]


def resume_point(cfg, size):
    """The step ``--resume RUN`` goes on from: the newest every one of ``size`` ranks has a
    checkpoint of, in a run folder whose options are ``cfg``'s. ValueError naming the flag."""
    run_dir = Path(cfg.resume)
    try:
        header = json.loads((run_dir / "config.json").read_text())
        saved = header["config"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(
            f"--resume {run_dir}: not a run folder ({type(err).__name__}: {err})"
        ) from None
    if header.get("nodes") != size:
        raise ValueError(
            f"--resume {run_dir}: the run had {header.get('nodes')} ranks, this one {size}"
        )
    check_same_run(cfg, saved)
    step = newest_complete(run_dir, size)
    if step is None:
        raise ValueError(
            f"--resume {run_dir}: no checkpoint that every rank has (was it run "
            f"with --checkpoint-every?)"
        )
    return step


def keep_logs_until(run_dir, iteration):
    """Drop the rows after ``iteration`` from the run's steps.csv and metrics.csv (the steps a
    resumed run takes again), each file rewritten atomically."""
    for name in ("steps.csv", "metrics.csv"):
        path = Path(run_dir) / name
        if not path.exists():
            continue
        lines = path.read_text().splitlines(keepends=True)
        column = lines[0].rstrip("\n").split(",").index("iteration") if lines else 0
        kept = lines[:1] + [
            line
            for line in lines[1:]
            if line.endswith("\n") and int(line.split(",")[column]) <= iteration
        ]
        tmp = path.with_name(f".{name}.resume.tmp")
        tmp.write_text("".join(kept))
        os.replace(tmp, path)


def check_same_run(cfg, saved):
    """Raise ValueError naming the first option of ``cfg`` that differs from the checkpointed
    run's ``saved`` config (those of `RESUME_MAY_DIFFER` aside)."""
    mine = cfg.as_dict()
    for key, value in saved.items():
        if key not in RESUME_MAY_DIFFER and mine.get(key) != value:
            flag = "--" + key.replace("_", "-")
            raise ValueError(
                f"--resume: {flag} is {mine.get(key)!r} here but {value!r} in the "
                f"run resumed: give the run's own options"
            )
