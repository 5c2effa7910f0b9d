"""The node programs under hypothesis, in process: the simulator with random clusters.

Each example runs `sim.run.simulate` on the bundled MNIST subset (the MLP, a few steps) on a
cluster hypothesis draws: node count, latency, bandwidth, per-node speeds, stragglers, message
level or closed form. Speeds and stragglers reorder every delivery, so these are the invariants
that must not depend on the order things happen in:

- a synchronous program's weights do not depend on the cluster at all (bit for bit);
- synchronous data-parallel SGD follows the serial trajectory with the global batch (to
  float32 rounding: the sums are taken in another order);
- a stale-synchronous server never applies a gradient more than S updates old;
- the bytes every node sent equal the algorithm's formula.

mpiexec stays for the twin tests (tests/test_mpi.py); these need no MPI.
"""

import csv
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.run import build_parser, simulate
from twinsgd.cli import CheckingParser
from twinsgd.run.config import parse_command

STEPS, BATCH = 6, 16
COMMON = [
    "--dataset",
    "mnist-subset",
    "--iterations",
    str(STEPS),
    "--batch-size",
    str(BATCH),
    "--no-progress",
    "--eval-every",
    str(STEPS),
]
SETTINGS = settings(
    max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def run(flags):
    """Simulate ``flags`` into a fresh folder; (summary, final weights, steps.csv rows)."""
    with tempfile.TemporaryDirectory(prefix="twinsgd-prop-") as folder:  # hypothesis: no tmp_path
        out = Path(folder) / "run"
        cfg, cluster = parse_command(
            [*COMMON, *flags, "--out", str(out)], build_parser(CheckingParser)
        )
        summary = simulate(cfg, cluster, say=lambda _: None)
        with np.load(out / "model.npz") as archive:
            weights = np.concatenate([archive[k].ravel() for k in sorted(archive.files)])
        with open(out / "steps.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
    return summary, weights, rows


NODES = st.sampled_from([2, 3, 4])


@st.composite
def clusters(draw, nodes=NODES):
    """sim.run's cluster flags: a node count and a random cluster for it."""
    n = draw(nodes)
    speeds = draw(
        st.lists(st.sampled_from(["0.25x", "0.5x", "1x", "2x", "3x"]), min_size=n, max_size=n)
    )
    flags = [
        "--nodes",
        str(n),
        "--latency",
        f"{draw(st.integers(0, 2000))}us",
        "--bandwidth",
        f"{draw(st.sampled_from([0.01, 0.1, 1, 10, 100]))}Gbps",
        "--speeds",
        ",".join(speeds),
    ]
    if draw(st.booleans()):
        flags += ["--stragglers", f"{draw(st.sampled_from([0.1, 0.5]))}:4x"]
    return n, flags


SYNCHRONOUS = {
    "allreduce ring": ["--algorithm", "allreduce", "--allreduce", "ring"],
    "allreduce mpi (MPICH's choice)": ["--algorithm", "allreduce", "--allreduce", "mpi"],
    "allreduce, top-k + error feedback": [
        "--algorithm",
        "allreduce",
        "--compress",
        "topk:0.05",
        "--error-feedback",
    ],
    "Local-SGD(3)": ["--algorithm", "allreduce", "--local-steps", "3"],
    "sync parameter server": ["--algorithm", "ps", "--mode", "sync", "--server-computes"],
    "gossip on a ring": ["--algorithm", "gossip", "--topology", "ring"],
}
_reference = {}


def reference(name, n):
    """The weights of program ``name`` on ``n`` nodes of the default cluster (cached)."""
    if (name, n) not in _reference:
        _reference[name, n] = run([*SYNCHRONOUS[name], "--nodes", str(n)])[1]
    return _reference[name, n]


@pytest.mark.parametrize("name", SYNCHRONOUS)
@SETTINGS
@given(cluster=clusters(), closed_form=st.booleans())
def test_a_synchronous_programs_weights_do_not_depend_on_the_cluster(name, cluster, closed_form):
    n, flags = cluster
    if closed_form and "compress" not in " ".join(SYNCHRONOUS[name]):
        flags = [*flags, "--collectives", "closed-form"]
    _, weights, _ = run([*SYNCHRONOUS[name], *flags])
    assert weights.tobytes() == reference(name, n).tobytes()


@SETTINGS
@given(cluster=clusters(nodes=st.sampled_from([2, 4])))
def test_synchronous_sgd_follows_the_serial_trajectory_with_the_global_batch(cluster):
    n, flags = cluster
    _, weights, _ = run(["--algorithm", "allreduce", "--optimizer", "sgd", *flags])
    serial = run(
        [
            "--algorithm",
            "serial",
            "--nodes",
            "1",
            "--optimizer",
            "sgd",
            "--batch-size",
            str(n * BATCH),
        ]
    )[1]
    np.testing.assert_allclose(weights, serial, rtol=1e-4, atol=1e-6)


@SETTINGS
@given(cluster=clusters(nodes=st.sampled_from([3, 4, 5])), bound=st.integers(0, 3))
def test_a_stale_synchronous_server_keeps_staleness_within_its_bound(cluster, bound):
    _, flags = cluster
    _, _, rows = run(["--algorithm", "ps", "--mode", "ssp", "--staleness", str(bound), *flags])
    applied = [int(r["staleness"]) for r in rows if r["rank"] == "0"]  # the server's updates
    assert applied and max(applied) <= bound


@SETTINGS
@given(cluster=clusters(nodes=st.integers(2, 6)), algorithm=st.sampled_from(["allreduce", "ps"]))
def test_the_bytes_sent_equal_the_formula(cluster, algorithm):
    """Ring allreduce: each of the 2(N-1) rounds moves every chunk once, 2(N-1) * 4n bytes a
    step over all nodes. Synchronous PS, one server: N-1 pushes and N-1 replies of 4n bytes."""
    n, flags = cluster
    argv = (
        ["--algorithm", "allreduce", "--allreduce", "ring"]
        if algorithm == "allreduce"
        else ["--algorithm", "ps", "--mode", "sync"]
    )
    summary, weights, rows = run([*argv, *flags])
    params = weights.size
    per_step = 2 * (n - 1) * 4 * params
    assert summary["bytes_sent"] == STEPS * per_step
    assert sum(int(r["bytes_sent"]) for r in rows) == STEPS * per_step
    assert sum(int(r["bytes_recv"]) for r in rows) == STEPS * per_step
