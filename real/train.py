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

import importlib.metadata
import os
import sys
import time
import traceback

from mpi4py import MPI

from algorithms import attach_optimizer, make_node, node_program, updates_per_step
from algorithms.config import add_config_arguments, parse_config
from algorithms.runfolder import RunFolder
from algorithms.runlog import RunLog, run_header
from data import DataError, load_dataset
from models import build_model
from real.backend import Driver
from real.cli import RankZeroParser


def build_parser():
    parser = RankZeroParser(
        prog="python -m real.train",
        description="Train a model for real, in one process or under mpirun, and write a run "
                    "folder: config.json, metrics.csv, steps.csv, summary.json, timeline.json, "
                    "model.npz.")
    return add_config_arguments(parser)


def main(argv=None):
    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    parser = build_parser()
    cfg = parse_config(argv, parser)
    try:
        cfg.check_size(size)
        dataset = _load_data(cfg, comm)
        folder = RunFolder(cfg.out)
    except (DataError, ValueError) as err:
        parser.error(str(err))
    if dataset.note and rank == 0:
        print(dataset.note, file=sys.stderr)

    model = build_model(cfg.model, dataset.input_shape, dataset.n_classes, seed=cfg.seed)
    try:
        node = make_node(rank, size, cfg, dataset, model)
    except ValueError as err:  # a topology that cannot be made or read
        parser.error(f"--topology {cfg.topology}: {err}")
    attach_optimizer(node)
    if node.steps_per_epoch < 1:
        parser.error(f"--batch-size {cfg.batch_size} is larger than a node's shard "
                     f"({dataset.n_train // node.shards} samples of {dataset.name} over "
                     f"{node.shards} shards)")

    header = _header(cfg, dataset, model, size, comm)
    reporter = rank == node.reporter
    ups = updates_per_step(cfg, size, node.reporter)
    per_epoch = node.steps_per_epoch * ups
    log = RunLog(folder, header, cfg.target_accuracy, per_epoch) if reporter else None
    comm.Barrier()  # steps.csv exists before the other ranks open it for appending
    log = log or RunLog(folder, header, cfg.target_accuracy, per_epoch, reporter=False)
    bar = _progress(node.total_steps * ups) if cfg.progress and reporter else None
    comm.Barrier()  # a common start for every rank's clock
    driver = Driver(node, log, comm, cfg.measure_wait, on_step=bar and (lambda _: bar.update()))
    _inject_fault(node, os.environ.get("TWINSGD_INJECT_FAULT"))
    _slow_down(node, os.environ.get("TWINSGD_SLOW_RANK"))
    try:
        driver.run(node_program(cfg)(node))
    except BaseException as err:
        _abort(log, comm, rank, err)
        raise
    finally:
        if bar:
            bar.close()
    timeline = comm.gather(driver.timeline(), root=node.reporter)
    totals = comm.gather(log.node_totals(), root=node.reporter)
    if reporter:
        log.all_totals = totals
        log.finish("done", model.named_arrays(), _trace(timeline, cfg))
        print(_report(log.summary(), folder.path))
    else:
        log.finish("done")
    return 0


def _load_data(cfg, comm):
    """Load the data set on every rank, rank 0 first: it alone downloads (into the cache the
    others then read), and a problem it finds stops every rank with the same message."""
    allow_download = os.environ.get("TWINSGD_OFFLINE") != "1"
    dataset = problem = None
    if comm.rank == 0:
        try:
            dataset = load_dataset(cfg.dataset, cfg.data_dir, allow_download=allow_download)
        except (DataError, ValueError) as err:
            problem = str(err)
    problem = comm.bcast(problem, root=0)
    if problem is not None:
        raise DataError(problem)
    dataset = dataset or load_dataset(cfg.dataset, cfg.data_dir, allow_download=False)
    found = comm.allgather((dataset.name, dataset.n_train, dataset.n_test))
    for rank, theirs in enumerate(found):
        if theirs != found[0]:
            raise DataError(f"rank {rank} found {theirs[0]} ({theirs[1]} training images) where "
                            f"rank 0 found {found[0][0]} ({found[0][1]}): give every node the "
                            f"same data (--data-dir on a shared folder, or python -m "
                            f"data.download {cfg.dataset} on each node)")
    return dataset


def _inject_fault(node, spec):
    """Test hook: ``TWINSGD_INJECT_FAULT=RANK@ITERATION`` raises on that rank after that step."""
    if not spec:
        return
    rank, iteration = (int(x) for x in spec.split("@"))
    if node.rank != rank:
        return
    end_step = node.on_step_end

    def failing_end_step(step, loss, staleness):
        end_step(step, loss, staleness)
        if step.iteration == iteration:
            raise RuntimeError(f"injected fault after step {iteration} (TWINSGD_INJECT_FAULT)")

    node.on_step_end = failing_end_step


def _slow_down(node, spec):
    """Test hook: ``TWINSGD_SLOW_RANK=RANK:SECONDS`` makes that rank a straggler, idle that long
    after each of its steps (as a slower or busier machine would be)."""
    if not spec:
        return
    rank, seconds = spec.split(":")
    if node.rank != int(rank):
        return
    end_step = node.on_step_end

    def slow_end_step(step, loss, staleness):
        end_step(step, loss, staleness)
        time.sleep(float(seconds))

    node.on_step_end = slow_end_step


def _abort(log, comm, rank, err):
    """Mark the run failed and, with other ranks waiting on this one, abort them all."""
    why = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    log.fail(f"rank {rank}: {why}" if comm.size > 1 else why)
    if comm.size > 1:
        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(1)


def _header(cfg, dataset, model, size, comm):
    """The config.json document, with the MPI library that carried the run, each rank's host
    name, and ``machine_cores``: the cores of the one machine every rank ran on (emulated hosts
    included: they share its boot id), 0 when the ranks ran on several machines. Collective."""
    where = comm.allgather((MPI.Get_processor_name(), boot_id()))
    one_machine = len({boot for _, boot in where}) == 1
    return run_header(cfg, dataset, model, size, "wall", "real.train",
                      mpi=MPI.Get_library_version().splitlines()[0].strip(),
                      hosts=[host for host, _ in where],
                      machine_cores=(os.cpu_count() or 1) if one_machine else 0,
                      versions={"mpi4py": importlib.metadata.version("mpi4py")})


def boot_id():
    """What tells one machine from another: Linux's boot id (emulated hosts, namespaces on one
    machine, share it), else the host name."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return MPI.Get_processor_name()


def _trace(per_rank, cfg):
    """timeline.json in Chrome trace format: one track (thread) per rank, times in microseconds."""
    names = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": rank,
              "args": {"name": f"rank {rank}"}} for rank in range(len(per_rank))]
    events = [event for rank_events in per_rank for event in rank_events]
    return {"traceEvents": names + events, "displayTimeUnit": "ms",
            "otherData": {"algorithm": cfg.algorithm, "clock": "wall"}}


def _progress(total):
    from tqdm import tqdm

    return tqdm(total=total, unit="step", dynamic_ncols=True, mininterval=0.5, file=sys.stderr)


def _report(summary, path):
    acc = summary["final_test_accuracy"]
    return (f"{summary['dataset']}: {summary['nodes']} node(s), {summary['iterations']} steps in "
            f"{summary['time_s']:.1f} s ({summary['seconds_per_epoch']:.2f} s/epoch), test "
            f"accuracy {100 * acc:.2f}%, run folder {path}")


if __name__ == "__main__":
    sys.exit(main())
