"""Under mpiexec: gossip's consensus contraction on a quadratic problem against the spectral gap.

Every rank starts from its own random weights and takes no gradient steps (the gradient of the
quadratic 0.5 * ||x - x_i(0)||^2 ... is replaced by zero, so only mixing acts). The consensus
distance measured at each evaluation (every round) must shrink by |lambda_2| = 1 - gap per round.
Prints "measured predicted" on rank 0.
"""

import shutil
import sys
import tempfile

import numpy as np
from mpi4py import MPI

from models import make_optimizer
from real.backend import Driver
from twinsgd.data import load_dataset
from twinsgd.programs import make_node
from twinsgd.programs.gossip import gossip_sgd
from twinsgd.run.config import RunConfig
from twinsgd.run.runfolder import RunFolder
from twinsgd.run.runlog import RunLog

ROUNDS = 40
comm = MPI.COMM_WORLD
topology = sys.argv[1]


class Quadratic:
    """Weights (d,) float32 and a zero gradient: only the mixing moves them."""

    def __init__(self, d, seed):
        self.params = np.random.default_rng(seed).standard_normal(d).astype(np.float32)
        self.n_params = d

    def loss_and_gradient(self, X, y):
        return 0.0, np.zeros(self.n_params, np.float32)

    def evaluate(self, X, y):
        return 0.0, 0.0


out = comm.bcast(tempfile.mkdtemp() if comm.rank == 0 else None)
cfg = RunConfig(
    algorithm="gossip",
    topology=topology,
    dataset="mnist-subset",
    batch_size=1,
    iterations=ROUNDS,
    eval_every=1,
    optimizer="sgd",
    progress=False,
    out=out,
)
model = Quadratic(1000, seed=comm.rank)
node = make_node(
    comm.rank,
    comm.size,
    cfg,
    load_dataset("mnist-subset"),
    model,
    make_optimizer("sgd", model.n_params, lr=0.1),
)
folder = RunFolder(out)
log = RunLog(folder, {"config": cfg.as_dict()}) if comm.rank == 0 else None
comm.Barrier()
log = log or RunLog(folder, {"config": cfg.as_dict()}, reporter=False)
Driver(node, log, comm).run(gossip_sgd(node))
log.finish("done")
comm.Barrier()  # every rank's rows written before rank 0 reads them and removes the folder
if comm.rank == 0:
    import csv

    with open(f"{out}/metrics.csv") as fh:
        distance = np.array([float(r["consensus_distance"]) for r in csv.DictReader(fh)])
    # From round 5 (the faster modes have died out) while well above float32 rounding (1e-7).
    usable = distance[5:][distance[5:] > 1e-4 * distance[0]]
    ratios = usable[1:] / usable[:-1]
    measured = float(np.exp(np.mean(np.log(ratios))))
    print(measured, 1.0 - node.schedule.spectral_gap())
    shutil.rmtree(out)
