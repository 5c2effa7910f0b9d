"""Cost of the node-program machinery: allreduce SGD as a node program against a plain mpi4py loop.

Run ``python benchmarks/overhead.py`` (it starts ``mpiexec -n 2`` itself). Both sides train the MLP
at batch 100 on the bundled MNIST subset with MPI's Allreduce and the same data access; ours is the
real backend's driver running `allreduce_sgd` with all bookkeeping on (steps.csv rows, timeline
events, time accounting), with and without the barrier-timed wait measurement. The rounds alternate
so that machine noise falls on both sides; the table shows the median time per iteration.
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from time import perf_counter

import numpy as np

ITERATIONS, ROUNDS = 100, 15


def _setup(comm, measure_wait):
    from models import build_model, make_optimizer
    from twinsgd.data import load_dataset
    from twinsgd.programs import make_node
    from twinsgd.run.config import RunConfig

    cfg = RunConfig(
        algorithm="allreduce",
        allreduce="mpi",
        dataset="mnist-subset",
        iterations=ITERATIONS,
        eval_every=10**9,
        measure_wait=measure_wait,
        progress=False,
        out=comm.bcast(tempfile.mkdtemp(prefix="twinsgd-overhead-") if comm.rank == 0 else None),
    )
    dataset = load_dataset("mnist-subset")
    model = build_model("mlp", dataset.input_shape, dataset.n_classes, seed=0)
    optimizer = make_optimizer("adam", model.n_params, lr=cfg.lr)
    return cfg, make_node(comm.rank, comm.size, cfg, dataset, model, optimizer)


def plain_loop(comm):
    """The same training as a bare mpi4py loop: seconds per iteration."""
    from mpi4py import MPI

    _, node = _setup(comm, False)
    params, size = node.model.params, comm.size
    comm.Barrier()
    t0 = perf_counter()
    for step in node.steps():
        _, grad = node.model.loss_and_gradient(step.X, step.y)
        comm.Allreduce(MPI.IN_PLACE, grad, op=MPI.SUM)
        np.divide(grad, size, out=grad)
        node.optimizer.step(params, grad)
    return (perf_counter() - t0) / ITERATIONS


def node_program(comm, measure_wait):
    """allreduce_sgd on the real backend, run folder and all: training seconds per iteration."""
    from real.backend import Driver
    from twinsgd.programs.allreduce import allreduce_sgd
    from twinsgd.run.runfolder import RunFolder
    from twinsgd.run.runlog import RunLog

    cfg, node = _setup(comm, measure_wait)
    folder = RunFolder(cfg.out)
    log = RunLog(folder, {"config": cfg.as_dict()}, rank=0) if comm.rank == 0 else None
    comm.Barrier()
    log = log or RunLog(folder, {"config": cfg.as_dict()}, rank=comm.rank)
    comm.Barrier()
    driver = Driver(node, log, comm, measure_wait)
    driver.run(allreduce_sgd(node))
    log.steps.close()
    return log.time_s / ITERATIONS


class _NullModel:
    """A model whose step costs nothing: what remains is the machinery's own time."""

    params = np.zeros(1, np.float32)

    def loss_and_gradient(self, X, y):
        return 0.0, np.zeros(1, np.float32)

    def evaluate(self, X, y):
        return 0.0, 0.0


def machinery_only(comm, steps=20_000):
    """Seconds per step of driver, node program, schedule and bookkeeping around a free model."""
    from real.backend import Driver
    from twinsgd.programs.allreduce import allreduce_sgd
    from twinsgd.run.runfolder import RunFolder
    from twinsgd.run.runlog import RunLog

    cfg, node = _setup(comm.Split(comm.rank, 0), False)
    cfg.iterations, node.model = steps, _NullModel()
    node.optimizer.step = lambda params, grad: None
    node.dataset.train_batch = lambda indices: (None, indices)
    with tempfile.TemporaryDirectory() as folder:
        log = RunLog(RunFolder(folder), {"config": cfg.as_dict()}, rank=0)
        driver = Driver(node, log, comm.Split(comm.rank, 0), False)
        t0 = perf_counter()
        driver.run(allreduce_sgd(node))
        return (perf_counter() - t0) / steps


def measure():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    sides = {
        "plain mpi4py loop": lambda: plain_loop(comm),
        "node program, --no-measure-wait": lambda: node_program(comm, False),
        "node program, --measure-wait": lambda: node_program(comm, True),
    }
    times = {name: [] for name in sides}
    for _ in range(ROUNDS):
        for name, run in sides.items():
            times[name].append(comm.allreduce(run(), op=MPI.MAX))
    alone = machinery_only(comm)
    if comm.rank == 0:
        base = np.median(times["plain mpi4py loop"])
        print(
            f"MLP 784-200-50-10, batch 100, Adam, MPI Allreduce, {comm.size} ranks, "
            f"{ITERATIONS} iterations x {ROUNDS} alternating rounds (median)"
        )
        print(f"{'side':<34} {'ms/iteration':>13} {'vs plain':>9}")
        for name, values in times.items():
            median = np.median(values)
            print(f"{name:<34} {median * 1e3:13.3f} {median / base:9.3f}")
        print(
            f"machinery alone (a model that costs nothing): {alone * 1e6:.1f} us per step = "
            f"{alone / base:.1%} of a plain MLP step"
        )


def main():
    env = {
        **os.environ,
        "OPENBLAS_NUM_THREADS": "1",
        "TWINSGD_OVERHEAD_BENCH": "1",
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    mpiexec = Path(sys.executable).parent / "mpiexec"
    subprocess.run([str(mpiexec), "-n", "2", sys.executable, __file__], env=env, check=True)


if __name__ == "__main__":
    if os.environ.get("TWINSGD_OVERHEAD_BENCH"):
        measure()
    else:
        main()
