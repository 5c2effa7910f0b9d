"""``python -m real.train``: train for real, in one process or under MPI, and write a run folder.

Examples
--------
One process, no MPI launcher needed::

    python -m real.train --algorithm serial --dataset mnist --data-dir ../shared/datasets --epochs 2

Sixteen ranks on the bundled subset::

    mpirun -n 16 python -m real.train --algorithm allreduce --allreduce ring
    mpirun -n 9 python -m real.train --algorithm ps --server-computes

Set ``TWINSGD_OFFLINE=1`` to never try a download (the bundled MNIST subset is then the fallback).

Exit status: 0 done; 2 bad input (one line on stderr from rank 0, every rank exits 2, no
traceback); 1 a bug (an exception on any rank aborts the whole job through MPI_Abort, so nobody
hangs, and the run folder says ``failed: ...``).
"""

import gc
import importlib.metadata
import logging
import os
import sys
import time
import traceback

from models import build_model
from models.threads import one_blas_thread
from real import sentinel
from real.backend import Driver
from real.cli import BadInput, CollectiveParser, agree
from real.mpi import LAUNCHER, MPI, library_version
from real.watchdog import Heartbeat, Watchdog
from twinsgd.data import DataError, load_dataset
from twinsgd.programs import node_program, updates_per_step
from twinsgd.run import prepare_nodes
from twinsgd.run.checkpoint import Checkpointer, keep_logs_until, load, restore, resume_point
from twinsgd.run.config import add_config_arguments, parse_config
from twinsgd.run.faults import InjectedFault
from twinsgd.run.runfolder import RunFolder, claim_run_folder
from twinsgd.run.runlog import RunLog, chrome_trace_json, failure_status, progress_bar, run_header

logger = logging.getLogger(__name__)

GRACE_S = 5.0  # a rank whose watchdog fired leaves the reporting to a lower one this long
FORWARD_S = 0.2  # mpiexec forwards a rank's stderr line in this time; MPI_Abort may drop it


def build_parser():
    parser = CollectiveParser(
        prog="python -m real.train",
        description="Train a model for real, in one process or under mpirun, and write a run "
        "folder: config.json, metrics.csv, steps.csv, summary.json, timeline.json, "
        "model.npz.",
    )
    return add_config_arguments(parser)


def main(argv=None):
    blas = one_blas_thread()  # ranks share the cores: one BLAS thread each, however launched
    comm = MPI.COMM_WORLD
    parser = build_parser()
    cfg, dataset, model, node = _prepare(argv, parser, comm)
    rank, size = comm.rank, comm.size
    folder = RunFolder(_claim_folder(cfg, comm, parser.prog))
    if dataset.note and rank == 0:
        logger.info(dataset.note)

    checkpoint = _resume_point(cfg, comm, parser.prog) if cfg.resume else None
    where = comm.allgather((MPI.Get_processor_name(), boot_id(), os.getpid()))
    header = _header(cfg, dataset, model, size, where, blas)
    if rank == 0:
        hosts = sorted({host for host, _, _ in where})
        placed = f"{size} rank(s) on {len(hosts)} host(s) ({', '.join(hosts[:4])})"
        logger.debug(f"{placed}; {header['mpi']}")
    reporter = rank == node.reporter
    ups = updates_per_step(cfg, size, node.reporter)
    per_epoch = node.steps_per_epoch * ups
    log = (
        RunLog(folder, header, cfg.target_accuracy, per_epoch, resumed=checkpoint is not None)
        if reporter
        else None
    )
    comm.Barrier()  # steps.csv exists before the other ranks open it for appending
    log = log or RunLog(folder, header, cfg.target_accuracy, per_epoch, reporter=False)
    if checkpoint is not None:
        restore(node, log, *checkpoint)
    if cfg.checkpoint_every:
        node.checkpointer = Checkpointer(folder.path, cfg.checkpoint_every, log)
    watchdog = Watchdog(
        Heartbeat(folder.path, rank),
        size,
        cfg.watchdog_seconds(),
        on_fire=lambda why, say: _stop(log, comm, why, say, status=3),
    )
    _start_sentinel(folder.path, where, comm)
    bar = progress_bar(node.total_steps * ups) if cfg.progress and reporter else None
    _freeze_setup()
    comm.Barrier()  # a common start for every rank's clock
    origin = _clock_origin(comm, where)
    driver = Driver(
        node,
        log,
        comm,
        cfg.measure_wait,
        on_step=bar and (lambda _: bar.update()),
        watchdog=watchdog,
        faults=cfg.fault_schedule(),
        clock_s=checkpoint[1]["time_s"] if checkpoint else 0.0,
        clock_origin=origin,
    )
    try:
        driver.run(node_program(cfg)(node))
    except InjectedFault as fault:
        watchdog.stop("failed")
        _stop(log, comm, str(fault), say=True, status=3)
    except KeyboardInterrupt:
        watchdog.stop("interrupted")
        _interrupted(log, folder, watchdog.heartbeat.step)
    except BaseException as err:
        watchdog.stop("failed")
        _abort(log, comm, rank, err)
        raise
    finally:
        if bar:
            bar.close()
    timeline = comm.gather(driver.timeline(), root=node.reporter)
    totals = comm.gather(log.node_totals(), root=node.reporter)
    if reporter:
        log.all_totals = totals
        log.finish(
            "done",
            model.named_arrays(),
            chrome_trace_json(dict(enumerate(timeline)), cfg.algorithm, "wall"),
        )
        print(_report(log.summary(), folder.path))
    else:
        log.finish("done")
    watchdog.stop("done")
    return 0


def _prepare(argv, parser, comm):
    """The configuration, data set, model and node of this rank, or, if any rank finds bad
    input, one line from rank 0 and exit 2 on every rank. Collective: no rank leaves before
    all have said whether they can go on, so none is left waiting in a collective."""
    rank, size, prog = comm.rank, comm.size, parser.prog
    problem = cfg = dataset = None
    try:
        cfg = parse_config(argv, parser)
        cfg.check_size(size)
        cfg.fault_schedule().check_size(size)
    except (BadInput, ValueError) as err:
        problem = str(err)
    agree(comm, problem, prog)
    if rank == 0:  # rank 0 alone may download, into the cache the others then read
        dataset, problem = _load_data(cfg, os.environ.get("TWINSGD_OFFLINE") != "1")
    agree(comm, problem, prog)
    if rank != 0:
        dataset, problem = _load_data(cfg, allow_download=False)
    found = comm.allgather(
        None if dataset is None else (dataset.name, dataset.n_train, dataset.n_test)
    )
    problem = problem or _data_mismatch(found, cfg.dataset)
    model = node = None
    if problem is None:
        model = build_model(cfg.model, dataset.input_shape, dataset.n_classes, seed=cfg.seed)

        def say(note):  # what a default chose: once, from rank 0
            if rank == 0:
                logger.info(note)

        try:
            (node,) = prepare_nodes([rank], size, cfg, dataset, lambda _: model, say)
        except ValueError as err:
            problem = str(err)
    agree(comm, problem, prog)
    return cfg, dataset, model, node


def _load_data(cfg, allow_download):
    """(dataset, None) or (None, the problem in one line)."""
    try:
        return load_dataset(cfg.dataset, cfg.data_dir, allow_download=allow_download), None
    except (DataError, ValueError) as err:
        return None, str(err)


def _data_mismatch(found, name):
    """The problem when ranks found different data (a node-local --data-dir), else None."""
    for rank, theirs in enumerate(found):
        if theirs is not None and found[0] is not None and theirs != found[0]:
            return (
                f"rank {rank} found {theirs[0]} ({theirs[1]} training images) where rank 0 "
                f"found {found[0][0]} ({found[0][1]}): give every node the same data "
                f"(--data-dir on a shared folder, or python -m twinsgd.data.download {name} "
                f"on each node)"
            )
    return None


def _claim_folder(cfg, comm, prog):
    """Rank 0 claims the run folder (`claim_run_folder`); every rank gets its path, or exits 2
    with rank 0's line. The path goes into config.json as ``out``."""
    path = problem = None
    if comm.rank == 0:
        try:
            path = cfg.resume or str(claim_run_folder(cfg.out, cfg.run_name, cfg.overwrite))
        except ValueError as err:
            problem = str(err)
    agree(comm, problem, prog)
    cfg.out = comm.bcast(path, root=0)
    return cfg.out


def _resume_point(cfg, comm, prog):
    """This rank's checkpoint (arrays, meta) to resume from: rank 0 finds the newest step every
    rank has and keeps the logs up to it; every rank reads its own file. Collective: a problem
    on any rank is one line from rank 0 and exit 2 on all."""
    step = problem = checkpoint = None
    if comm.rank == 0:
        try:
            step = resume_point(cfg, comm.size)
        except ValueError as err:
            problem = str(err)
    agree(comm, problem, prog)
    step = comm.bcast(step, root=0)
    try:
        checkpoint = load(cfg.resume, comm.rank, step)
    except ValueError as err:
        problem = str(err)
    agree(comm, problem, prog)
    if comm.rank == 0:
        keep_logs_until(cfg.resume, step)
    return checkpoint


def _start_sentinel(folder, where, comm):
    """The first rank on each machine starts `real.sentinel` for that machine's ranks and
    waits until it watches them (before the common start: its start-up takes no core from
    the training)."""
    mine = [
        (r, pid)
        for r, (host, boot, pid) in enumerate(where)
        if (host, boot) == where[comm.rank][:2]
    ]
    if mine[0][0] == comm.rank and not sentinel.start(folder, comm.size, dict(mine)):
        logger.warning(
            f"rank {comm.rank}: the sentinel did not start within {sentinel.READY_S:g} s; a "
            f"rank of this machine that dies may leave the run folder saying running"
        )


def _clock_origin(comm, where):
    """The run's common start on this rank's ``time.perf_counter`` clock: rank 0's reading as
    it left the starting barrier, where this rank is on rank 0's machine (one boot: one
    ``CLOCK_MONOTONIC`` for every process); else None (a clock of its own). Collective.

    Why: each rank's clock starts when it leaves the barrier, and ranks leave it apart; past
    the cores by a turn of the scheduler. Timelines on their own starts put a worker's receive
    of the server's weights up to 4.9 ms before the server began to send them (5 ranks on 2
    cores, 2026-12-01)."""
    origin = comm.bcast(time.perf_counter() if comm.rank == 0 else None, root=0)
    return origin if where[comm.rank][1] == where[0][1] else None


def _freeze_setup():
    """Keep what the set-up made (modules, data, model) out of the training's garbage
    collections: collected once now, then frozen (`gc.freeze`). Every full collection would
    otherwise scan it all: 14 ms every 330 ms or so of MNIST training (2 ranks, this machine,
    2026-11-27), the same steps on every rank, so their exchange stalls that long (half of a
    300-step run's communication)."""
    gc.collect()
    gc.freeze()


def _stop(log, comm, why, say, status):
    """Mark the run ``failed: why``, say it in one line (if ``say``), and end the job with
    ``status``: every rank, through MPI_Abort."""
    if not say:  # another rank says it and aborts the job; this one only if that one cannot
        time.sleep(GRACE_S)
    else:
        logger.error(f"run stopped: {why} (run folder {log.folder.path})")
    log.fail(why)
    if comm.size > 1:
        time.sleep(FORWARD_S)
        comm.Abort(status)
    sys.exit(status)


def _interrupted(log, folder, step):
    """Ctrl-C: the launcher passes SIGINT to every rank. The first rank to get here marks the
    run and says so in one line; every rank leaves with 130 (no MPI_Finalize: the ranks
    blocked in MPI calls never see the signal, and the launcher ends them).

    A rank that was not first waits (up to `GRACE_S`) until the first has said it: the
    launcher kills the job at the first rank's exit, and a loser that left at once took the
    first one's line and mark with it (CI, 2026-12-04: exit 130, stderr empty)."""
    why = f"interrupted (SIGINT) at step {step}"
    marker = folder.path / ".interrupted"
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        deadline = time.monotonic() + GRACE_S
        while marker.stat().st_size == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        os._exit(130)
    log.fail(why)
    logger.error(f"{why} (run folder {folder.path})")
    os.write(fd, b"said\n")  # the others may leave now
    os._exit(130)


def _abort(log, comm, rank, err):
    """Mark the run failed and, with other ranks waiting on this one, abort them all."""
    why = failure_status(err)
    log.fail(f"rank {rank}: {why}" if comm.size > 1 else why)
    if comm.size > 1:
        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(1)


def _header(cfg, dataset, model, size, where, blas):
    """The config.json document, with the MPI library that carried the run, each rank's host
    name, and ``machine_cores``: the cores of the one machine every rank ran on (emulated hosts
    included: they share its boot id), 0 when the ranks ran on several machines. ``where``:
    every rank's (host name, boot id, pid)."""
    one_machine = len({boot for _, boot, _ in where}) == 1
    return run_header(
        cfg,
        dataset,
        model,
        size,
        "wall",
        "real.train",
        mpi=library_version(),
        launcher=LAUNCHER.name if LAUNCHER is not None else "none (one process)",
        slurm_job_id=os.environ.get("SLURM_JOB_ID"),
        hosts=[host for host, _, _ in where],
        machine_cores=(os.cpu_count() or 1) if one_machine else 0,
        blas_threads=blas,
        versions={"mpi4py": importlib.metadata.version("mpi4py")},
    )


def boot_id():
    """What tells one machine from another: Linux's boot id (emulated hosts, namespaces on one
    machine, share it), else the host name."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return MPI.Get_processor_name()


def _report(summary, path):
    acc = summary["final_test_accuracy"]
    return (
        f"{summary['dataset']}: {summary['nodes']} node(s), {summary['iterations']} steps in "
        f"{summary['time_s']:.4g} s ({summary['seconds_per_epoch']:.4g} s/epoch), test "
        f"accuracy {100 * acc:.2f}%, run folder {path}"
    )


if __name__ == "__main__":
    sys.exit(main())
