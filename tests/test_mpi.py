"""Real runs under mpiexec (a subprocess with a timeout): collectives, trajectories, bytes, faults.

Each test starts ``mpiexec`` from the virtual environment (the mpich wheel): no system MPI needed.
"""

import csv
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.programs import faults_file
from twinsgd.programs.collectives import chunk_bounds, ring_allreduce_bytes

pytestmark = pytest.mark.mpi
ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = str(Path(sys.executable).parent / "mpiexec")
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "TWINSGD_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
P_MLP = 167_560  # parameters of the 784-200-50-10 MLP
SMALL = ["--dataset", "synthetic", "--no-progress"]


def _mpiexec(n, python_argv, timeout):
    """Run ``python python_argv`` on n ranks; return the CompletedProcess."""
    cmd = [MPIEXEC, "-n", str(n), sys.executable, *python_argv]
    return subprocess.run(cmd, cwd=ROOT, env=ENV, timeout=timeout, capture_output=True, text=True)


def mpirun(n, *argv, timeout=120, module="real.train"):
    """Run ``python -m module argv`` on n ranks; return the CompletedProcess."""
    return _mpiexec(n, ["-m", module, *argv], timeout)


def run_script(n, name, *argv, timeout=120):
    """Run ``tests/mpi/NAME`` on n ranks; return the CompletedProcess."""
    return _mpiexec(n, [str(ROOT / "tests" / "mpi" / name), *argv], timeout)


def train(n, out, *argv):
    done = (
        mpirun(n, *SMALL, "--out", str(out), *argv)
        if n > 1
        else subprocess.run(
            [sys.executable, "-m", "real.train", *SMALL, "--out", str(out), *argv],
            cwd=ROOT,
            env=ENV,
            timeout=120,
            capture_output=True,
            text=True,
        )
    )
    assert done.returncode == 0, done.stderr
    return out


def weights(out):
    with np.load(Path(out) / "model.npz") as npz:
        return {name: npz[name] for name in npz.files}


def read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("n", range(1, 9))
def test_our_collectives_equal_mpis(n):
    done = run_script(n, "ring_vs_mpi.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok", str(n)]


SERIAL_STEPS = ["--iterations", "20", "--eval-every", "10"]


@pytest.fixture(scope="module")
def serial_runs(tmp_path_factory):
    """Serial SGD/momentum/Adam at batch 120: the trajectories the distributed runs must follow."""
    root = tmp_path_factory.mktemp("serial")
    return {
        opt: weights(
            train(
                1,
                root / opt,
                "--algorithm",
                "serial",
                "--batch-size",
                "120",
                "--optimizer",
                opt,
                *SERIAL_STEPS,
            )
        )
        for opt in ("sgd", "momentum", "adam")
    }


@pytest.mark.parametrize(
    ("n", "optimizer", "argv"),
    [
        (4, "sgd", ["--algorithm", "ps", "--batch-size", "40"]),
        (4, "adam", ["--algorithm", "ps", "--batch-size", "40"]),
        (3, "momentum", ["--algorithm", "ps", "--batch-size", "40", "--server-computes"]),
        (3, "sgd", ["--algorithm", "allreduce", "--allreduce", "ring", "--batch-size", "40"]),
        (4, "adam", ["--algorithm", "allreduce", "--allreduce", "ring", "--batch-size", "30"]),
        (3, "momentum", ["--algorithm", "allreduce", "--allreduce", "mpi", "--batch-size", "40"]),
        (3, "sgd", ["--algorithm", "allreduce", "--local-steps", "1", "--batch-size", "40"]),
    ],
)
def test_synchronous_runs_follow_the_serial_trajectory(tmp_path, serial_runs, n, optimizer, argv):
    """N shards of batch b each step = serial with batch N*b, same seed: same weights (1e-6).

    The sums differ only in float32 rounding order. SGD and momentum are linear in the gradient,
    so the weights agree to 1e-6. Adam divides by sqrt(v): on the few coordinates whose gradient is
    itself rounding noise, it turns noise into steps of up to lr, so there the bound is a few
    hundredths of a percent of the coordinates and 1e-4 at most (measured: 4 of 156,800, 5e-6).
    """
    ours = weights(train(n, tmp_path / "run", "--optimizer", optimizer, *argv, *SERIAL_STEPS))
    for name, serial in serial_runs[optimizer].items():
        if optimizer == "adam":
            diff = np.abs(ours[name] - serial)
            assert np.mean(diff > 1e-6) < 1e-3 and diff.max() < 1e-4, (name, diff.max())
        else:
            np.testing.assert_allclose(ours[name], serial, rtol=0, atol=1e-6, err_msg=name)


def test_local_sgd_p1_is_allreduce_sgd_and_p4_differs(tmp_path):
    common = [
        "--algorithm",
        "allreduce",
        "--optimizer",
        "momentum",
        "--batch-size",
        "40",
        *SERIAL_STEPS,
    ]
    grads = weights(train(3, tmp_path / "grads", *common))
    p1 = weights(train(3, tmp_path / "p1", *common, "--local-steps", "1"))
    p4 = weights(train(3, tmp_path / "p4", *common, "--local-steps", "4"))
    for name in grads:
        np.testing.assert_allclose(p1[name], grads[name], rtol=0, atol=1e-6)
    assert max(np.abs(p4[n] - grads[n]).max() for n in grads) > 1e-4


def test_local_sgd_averages_every_p_steps(tmp_path):
    out = train(
        4,
        tmp_path / "run",
        "--algorithm",
        "allreduce",
        "--local-steps",
        "4",
        "--optimizer",
        "sgd",
        "--iterations",
        "12",
        "--eval-every",
        "6",
    )
    steps = read_csv(out / "steps.csv")
    sent = {int(r["iteration"]) for r in steps if int(r["bytes_sent"]) > 0}
    assert sent == {4, 8, 12}
    metrics = read_csv(out / "metrics.csv")
    assert float(metrics[0]["consensus_distance"]) > 0  # step 6: models apart since step 4
    assert float(metrics[1]["consensus_distance"]) == 0  # step 12: just averaged


@pytest.mark.parametrize(
    ("n", "argv"),
    [
        (3, ["--algorithm", "ps"]),
        (3, ["--algorithm", "ps", "--server-computes"]),
        (4, ["--algorithm", "allreduce", "--allreduce", "ring"]),
        (3, ["--algorithm", "allreduce", "--allreduce", "ring"]),
    ],
)
def test_steps_csv_counts_the_bytes_of_the_formula(tmp_path, n, argv):
    out = train(n, tmp_path / "run", *argv, "--iterations", "6", "--eval-every", "3")
    steps = read_csv(out / "steps.csv")
    assert sorted((int(r["rank"]), int(r["iteration"])) for r in steps) == [
        (rank, i) for rank in range(n) for i in range(1, 7)
    ]
    for row in steps:
        rank, sent, received = int(row["rank"]), int(row["bytes_sent"]), int(row["bytes_recv"])
        if "ps" in argv:
            workers = n - 1
            expected = (4 * P_MLP * workers,) * 2 if rank == 0 else (4 * P_MLP,) * 2
        else:
            expected = ring_allreduce_bytes(P_MLP, 4, rank, n)
            if P_MLP % n == 0:
                assert expected == (2 * (n - 1) * 4 * P_MLP // n,) * 2
        assert (sent, received) == expected, row


def test_time_accounting_and_timeline(tmp_path):
    out = train(3, tmp_path / "run", "--algorithm", "ps", "--iterations", "10", "--eval-every", "5")
    steps = read_csv(out / "steps.csv")
    for rank in range(3):
        mine = [r for r in steps if int(r["rank"]) == rank]
        total = sum(float(r[k]) for r in mine for k in ("compute_s", "comm_s", "wait_s"))
        assert total == pytest.approx(float(mine[-1]["time_s"]), rel=1e-9)
        assert all(float(r["wait_s"]) > 0 for r in mine)  # every rank waits for someone
    trace = json.loads((out / "timeline.json").read_text())
    tracks = {e["tid"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert tracks == {0, 1, 2}
    kinds = {e["cat"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert {"compute", "comm", "wait", "eval"} <= kinds
    for rank in range(3):  # each track is a sequence of spans that never overlap
        spans = sorted(
            (e["ts"], e["ts"] + e["dur"])
            for e in trace["traceEvents"]
            if e["ph"] == "X" and e["tid"] == rank
        )
        assert all(end >= start for start, end in spans)
        assert all(nxt[0] >= prev[1] - 0.002 for prev, nxt in itertools.pairwise(spans))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["nodes"] == 3 and len(summary["per_node"]["compute_s"]) == 3
    config = json.loads((out / "config.json").read_text())
    assert config["mpi"].startswith("MPICH") and config["nodes"] == 3


@pytest.mark.parametrize(
    ("n", "argv", "message"),
    [
        (2, ["--algorithm", "nope"], "invalid choice: 'nope'"),
        (2, ["--algorithm", "allreduce", "--server-computes"], "--server-computes needs"),
        (2, ["--algorithm", "serial"], "--algorithm serial runs on one process, got 2 ranks"),
        (3, ["--algorithm", "allreduce", "--batch-size", "4000"], "--batch-size 4000 is larger"),
        (2, ["--algorithm", "ps", "--local-steps", "4"], "--local-steps 4 needs"),
        (3, ["--algorithm", "ps", "--servers", "3"], "--servers 3 needs at least 4 ranks"),
        (
            3,
            ["--algorithm", "ps", "--mode", "async", "--server-computes"],
            "--server-computes needs",
        ),
    ],
)
def test_bad_input_under_mpi_is_one_line_and_exit_2(tmp_path, n, argv, message):
    done = mpirun(n, *SMALL, "--out", str(tmp_path / "run"), *argv, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr  # rank 0 alone says it


@pytest.mark.parametrize(
    ("kind", "status", "returncode"),
    [
        ("exception", "failed: rank 2 raised an injected exception at step 6", 3),
        ("kill", "failed: rank 2 killed at step 6", signal.SIGKILL),  # mpiexec exits 9
    ],
)
def test_a_fault_on_one_rank_stops_every_rank_and_the_folder_says_why(
    tmp_path, kind, status, returncode
):
    out = tmp_path / "run"
    faults = faults_file(tmp_path, {"rank": 2, "step": 6, "kind": kind})
    t0 = time.monotonic()
    done = mpirun(
        3,
        *SMALL,
        "--algorithm",
        "allreduce",
        "--iterations",
        "1000",
        "--out",
        str(out),
        "--faults",
        faults,
        "--eval-every",
        "2",
        timeout=60,
    )
    took = time.monotonic() - t0
    assert done.returncode == returncode, done.stderr
    assert took < 10
    deadline = time.monotonic() + 5  # a kill: the sentinel writes the status after the job
    while json.loads((out / "summary.json").read_text())["status"] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    for name in ("config.json", "summary.json"):
        assert json.loads((out / name).read_text())["status"] == status
    steps = read_csv(out / "steps.csv")
    assert all(int(r["iteration"]) <= 5 for r in steps if r["rank"] == "2")


def test_a_run_killed_by_sigkill_and_resumed_ends_bit_for_bit_as_the_uninterrupted_one(tmp_path):
    """Rank 2 SIGKILLs itself as it starts step 13 (mpiexec ends the job); the checkpoint of
    step 10 every rank wrote carries the run on: same weights as a run never stopped."""
    flags = [
        "--algorithm",
        "allreduce",
        "--iterations",
        "20",
        "--optimizer",
        "adam",
        "--compress",
        "topk:0.1",
        "--error-feedback",
        "--eval-every",
        "4",
    ]
    assert mpirun(3, *SMALL, *flags, "--out", str(tmp_path / "whole")).returncode == 0
    cut = tmp_path / "cut"
    kill = faults_file(tmp_path, {"rank": 2, "step": 13, "kind": "kill"})
    done = mpirun(3, *SMALL, *flags, "--checkpoint-every", "5", "--faults", kill, "--out", str(cut))
    assert done.returncode == signal.SIGKILL, done.stderr
    done = mpirun(3, *SMALL, *flags, "--checkpoint-every", "5", "--resume", str(cut))
    assert done.returncode == 0, done.stderr
    with np.load(tmp_path / "whole" / "model.npz") as a, np.load(cut / "model.npz") as b:
        assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)
    steps = read_csv(cut / "steps.csv")
    assert sorted((r["rank"], int(r["iteration"])) for r in steps) == sorted(
        (str(r), i) for r in range(3) for i in range(1, 21)
    )  # each step once


def test_the_watchdog_names_the_rank_that_does_not_arrive(tmp_path):
    out = tmp_path / "run"
    faults = faults_file(tmp_path, {"rank": 1, "step": 8, "kind": "slow", "factor": 1e7})
    t0 = time.monotonic()
    done = mpirun(
        3,
        *SMALL,
        "--algorithm",
        "allreduce",
        "--iterations",
        "100",
        "--out",
        str(out),
        "--faults",
        faults,
        "--watchdog",
        "2s",
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    assert time.monotonic() - t0 < 20
    lines = [line for line in done.stderr.splitlines() if "real.train" in line]
    assert len(lines) == 1 and "did not arrive" in lines[0], done.stderr
    status = json.loads((out / "config.json").read_text())["status"]
    assert status.startswith("failed: watchdog: rank 0 waited"), status
    assert "at step 8; rank 1 (step 8, compute, last heard" in status, status


def test_sigkill_of_every_rank_mid_run_leaves_parseable_files(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [
            MPIEXEC,
            "-n",
            "2",
            sys.executable,
            "-m",
            "real.train",
            *SMALL,
            "--algorithm",
            "allreduce",
            "--epochs",
            "100",
            "--eval-every",
            "5",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not ((out / "metrics.csv").exists() and len(read_csv(out / "metrics.csv")) >= 3):
            assert time.monotonic() < deadline, "no metrics within 60 s"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    deadline = time.monotonic() + 5  # the sentinel, outside the killed group, says who died
    while json.loads((out / "config.json").read_text())["status"] == "running":
        assert time.monotonic() < deadline, "the run folder still says running"
        time.sleep(0.1)
    for name in ("config.json", "summary.json"):
        status = json.loads((out / name).read_text())["status"]
        assert status.startswith("failed: rank ") and " died at step " in status, status
    for name in ("steps.csv", "metrics.csv"):
        rows = read_csv(out / name)
        assert rows and all(None not in r and None not in r.values() for r in rows), name


def test_ssp_with_staleness_0_is_the_synchronous_trajectory(tmp_path):
    common = ["--algorithm", "ps", "--optimizer", "adam", "--batch-size", "40", *SERIAL_STEPS]
    sync = weights(train(4, tmp_path / "sync", *common, "--mode", "sync"))
    ssp = weights(train(4, tmp_path / "ssp", *common, "--mode", "ssp", "--staleness", "0"))
    for name in sync:
        np.testing.assert_array_equal(ssp[name], sync[name], err_msg=name)


@pytest.mark.parametrize("bound", [1, 3])
def test_ssp_never_exceeds_its_staleness_bound_and_reaches_it_with_a_straggler(tmp_path, bound):
    out = tmp_path / "run"
    slow = faults_file(
        tmp_path, {"rank": 1, "step": 1, "kind": "slow", "factor": 100.0, "steps": 15}
    )  # a straggler: about 50 ms a step
    done = mpirun(
        4,
        *SMALL,
        "--algorithm",
        "ps",
        "--mode",
        "ssp",
        "--staleness",
        str(bound),
        "--iterations",
        "15",
        "--out",
        str(out),
        "--faults",
        slow,
    )
    assert done.returncode == 0, done.stderr
    server = [r for r in read_csv(out / "steps.csv") if r["rank"] == "0"]
    assert [int(r["iteration"]) for r in server] == list(range(1, 16))
    staleness = [int(r["staleness"]) for r in server]
    assert max(staleness) == bound  # the fast workers run ahead as far as allowed, no further
    workers = [r for r in read_csv(out / "steps.csv") if r["rank"] != "0"]
    assert len(workers) == 3 * 15


def test_async_server_applies_every_push_and_records_staleness(tmp_path):
    out = train(
        4,
        tmp_path / "run",
        "--algorithm",
        "ps",
        "--mode",
        "async",
        "--iterations",
        "10",
        "--eval-every",
        "15",
    )
    steps = read_csv(out / "steps.csv")
    server = [r for r in steps if r["rank"] == "0"]
    assert [int(r["iteration"]) for r in server] == list(range(1, 31))  # an iteration is a push
    assert all(int(r["bytes_sent"]) == int(r["bytes_recv"]) == 4 * P_MLP for r in server)
    staleness = [int(r["staleness"]) for r in server]
    assert staleness[0] == 0 and max(staleness) >= 1 and max(staleness) <= 3 * 10
    metrics = read_csv(out / "metrics.csv")
    assert [int(r["iteration"]) for r in metrics] == [15, 30]
    assert json.loads((out / "summary.json").read_text())["nodes"] == 4


def test_sharded_servers_follow_the_single_server_trajectory(tmp_path):
    """Three workers, one server or two: each server steps its own slice of the same average."""
    common = ["--algorithm", "ps", "--optimizer", "adam", "--batch-size", "40", *SERIAL_STEPS]
    single = weights(train(4, tmp_path / "one", *common))
    sharded = weights(train(5, tmp_path / "two", *common, "--servers", "2"))
    for name in single:
        np.testing.assert_array_equal(sharded[name], single[name], err_msg=name)


@pytest.mark.parametrize(("mode", "servers"), [("sync", 2), ("sync", 3), ("async", 2), ("ssp", 3)])
def test_bytes_per_server_fall_as_one_over_k(tmp_path, mode, servers):
    workers, iterations = 2, 4
    bound = ["--staleness", "1"] if mode == "ssp" else []  # elsewhere refused as ignored
    out = train(
        servers + workers,
        tmp_path / "run",
        "--algorithm",
        "ps",
        "--mode",
        mode,
        "--servers",
        str(servers),
        "--iterations",
        str(iterations),
        *bound,
    )
    steps = read_csv(out / "steps.csv")
    bounds = chunk_bounds(P_MLP, servers)
    for server in range(servers):
        owned = bounds[server + 1] - bounds[server]
        assert abs(owned - P_MLP / servers) < 1
        rows = [r for r in steps if int(r["rank"]) == server]
        assert sum(int(r["bytes_recv"]) for r in rows) == iterations * workers * 4 * owned
        assert sum(int(r["bytes_sent"]) for r in rows) == iterations * workers * 4 * owned
    for worker in range(servers, servers + workers):
        rows = [r for r in steps if int(r["rank"]) == worker]
        assert all(int(r["bytes_sent"]) == int(r["bytes_recv"]) == 4 * P_MLP for r in rows)
    reported = [int(r["iteration"]) for r in read_csv(out / "metrics.csv")]
    assert reported[-1] == iterations  # the reporter evaluated the final weights


@pytest.mark.parametrize(
    ("n", "topology"), [(5, "ring"), (8, "hypercube"), (8, "exponential"), (9, "torus")]
)
def test_gossip_consensus_contracts_as_the_spectral_gap_predicts(n, topology):
    """Mixing alone, from different weights per rank: per-round contraction of the consensus
    distance within 10% of |lambda_2| = 1 - spectral gap (measured here within 1%)."""
    done = run_script(n, "gossip_consensus.py", topology)
    assert done.returncode == 0, done.stderr
    measured, predicted = map(float, done.stdout.split())
    assert measured == pytest.approx(predicted, rel=0.10)


@pytest.mark.parametrize("local_steps", ["1", "4"])
def test_gossip_on_the_complete_graph_is_allreduce_sgd(tmp_path, local_steps):
    """W = J/n averages everything: update-then-mix gossip = (Local-)SGD over allreduce."""
    common = [
        "--optimizer",
        "momentum",
        "--batch-size",
        "40",
        "--local-steps",
        local_steps,
        *SERIAL_STEPS,
    ]
    gossip = weights(
        train(3, tmp_path / "g", "--algorithm", "gossip", "--topology", "complete", *common)
    )
    allreduce = weights(train(3, tmp_path / "a", "--algorithm", "allreduce", *common))
    for name in gossip:
        np.testing.assert_allclose(gossip[name], allreduce[name], rtol=0, atol=1e-6)


def test_gossip_bytes_are_the_weights_to_each_neighbour(tmp_path):
    out = train(
        5,
        tmp_path / "run",
        "--algorithm",
        "gossip",
        "--topology",
        "ring",
        "--iterations",
        "4",
        "--local-steps",
        "2",
    )
    for row in read_csv(out / "steps.csv"):
        expected = 2 * 4 * P_MLP if int(row["iteration"]) % 2 == 0 else 0
        assert int(row["bytes_sent"]) == int(row["bytes_recv"]) == expected, row


@pytest.mark.parametrize(
    ("n", "topology", "message"),
    [
        (6, "hypercube", "hypercube needs a power of two"),
        (3, "nope.edges", "nope.edges"),
    ],
)
def test_a_topology_that_cannot_be_made_is_one_line_and_exit_2(tmp_path, n, topology, message):
    done = mpirun(
        n,
        *SMALL,
        "--algorithm",
        "gossip",
        "--topology",
        topology,
        "--out",
        str(tmp_path / "run"),
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr


K_TOPK = round(0.01 * P_MLP)  # entries a topk:0.01 message keeps of the MLP's gradient
TOPK_NBYTES = 12 + K_TOPK * (4 + 4)  # header + float32 values + uint32 indices (P > 65536)


@pytest.mark.parametrize(
    ("n", "argv", "sent", "received"),
    [
        (3, ["--algorithm", "allreduce"], 2 * TOPK_NBYTES, 2 * TOPK_NBYTES),  # allgather
        (3, ["--algorithm", "ps"], TOPK_NBYTES, 4 * P_MLP),  # a worker: compressed up, dense down
        (4, ["--algorithm", "gossip", "--topology", "ring"], 2 * TOPK_NBYTES, 2 * TOPK_NBYTES),
    ],
)
def test_compressed_bytes_on_the_wire_are_the_messages(tmp_path, n, argv, sent, received):
    out = train(n, tmp_path / "run", *argv, "--compress", "topk:0.01", "--iterations", "3")
    for row in read_csv(out / "steps.csv"):
        if "ps" in argv and row["rank"] == "0":
            continue
        assert (int(row["bytes_sent"]), int(row["bytes_recv"])) == (sent, received), row


@pytest.mark.parametrize("varies", [True, False])
def test_allgather_bytes_gives_each_rank_the_others_wire_bytes_and_counts_them(varies):
    """`real.backend.allgather_bytes` on 3 ranks: rank r's bytes are r + 5 of value r (or 7 of
    value r on every rank, one size); each rank gets the others' in rank order and counts (p - 1)
    m each way for one size m, else the 8-byte sizes to and from each other rank and the ring's
    bytes (every block but its right neighbour's out, every block but its own in)."""
    script = (
        "import json, numpy as np\n"
        "from mpi4py import MPI\n"
        "from real.backend import allgather_bytes\n"
        "comm = MPI.COMM_WORLD\n"
        f"varies = {varies}\n"
        "n = comm.rank + 5 if varies else 7\n"
        "blocks, sent, received = allgather_bytes(comm, np.full(n, comm.rank, np.uint8), varies)\n"
        "row = [comm.rank, [b if b is None else b.tolist() for b in blocks], sent, received]\n"
        "rows = comm.gather(row)\n"
        "if comm.rank == 0:\n"
        "    print(json.dumps(rows))\n"
    )
    cmd = [MPIEXEC, "-n", "3", sys.executable, "-c", script]
    done = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lengths = [5, 6, 7] if varies else [7, 7, 7]
    rows = json.loads(done.stdout)
    assert [row[0] for row in rows] == [0, 1, 2]
    for rank, blocks, sent, received in rows:
        assert blocks == [None if r == rank else [r] * lengths[r] for r in range(3)]
        if varies:
            assert sent == 2 * 8 + sum(lengths) - lengths[(rank + 1) % 3]
            assert received == 2 * 8 + sum(lengths) - lengths[rank]
        else:
            assert sent == received == 2 * 7


def test_choco_gossip_with_a_nearly_lossless_codec_is_plain_gossip(tmp_path):
    common = [
        "--algorithm",
        "gossip",
        "--topology",
        "rotating",
        "--optimizer",
        "sgd",
        *SERIAL_STEPS,
    ]
    plain = weights(train(4, tmp_path / "plain", *common))
    choco = weights(train(4, tmp_path / "fp16", *common, "--compress", "fp16"))
    for name in plain:
        np.testing.assert_allclose(choco[name], plain[name], rtol=0, atol=1e-3)


STUDY = {  # the Lomonosov-2 study's ten configurations, one command each
    **{
        f"local-sgd({p}) allreduce": ["--algorithm", "allreduce", "--local-steps", p]
        for p in ("1", "4", "16", "32")
    },
    **{
        f"local-sgd({p}) gossip": [
            "--algorithm",
            "gossip",
            "--topology",
            "rotating",
            "--local-steps",
            p,
        ]
        for p in ("1", "4", "16")
    },
    **{
        f"local-sgd({p}) gossip+threshold": [
            "--algorithm",
            "gossip",
            "--topology",
            "rotating",
            "--local-steps",
            p,
            "--compress",
            "threshold:0.01",
        ]
        for p in ("1", "4", "16")
    },
}


@pytest.mark.parametrize("name", sorted(STUDY))
def test_each_configuration_of_the_study_trains(tmp_path, name):
    out = tmp_path / "run"
    done = mpirun(
        4,
        "--dataset",
        "mnist-subset",
        "--no-progress",
        "--out",
        str(out),
        "--batch-size",
        "32",
        "--iterations",
        "64",
        *STUDY[name],
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["final_test_accuracy"] > 0.6, summary


@pytest.mark.parametrize(("mode", "evaluated_at"), [("sync", [33]), ("async", [99])])
def test_an_epoch_of_a_parameter_server_is_every_worker_over_its_shard(
    tmp_path, mode, evaluated_at
):
    """3 workers share 10,000 samples at batch 100: 33 steps each; an async server counts 99."""
    out = train(4, tmp_path / "run", "--algorithm", "ps", "--mode", mode, "--epochs", "1")
    assert [int(r["iteration"]) for r in read_csv(out / "metrics.csv")] == evaluated_at
    assert json.loads((out / "summary.json").read_text())["epochs"] == 1.0


def test_ranks_timelines_share_the_runs_start_though_one_rank_starts_late():
    """Rank 1 leaves the start 0.2 s after rank 0 and at once receives what rank 0 sends at
    once: on the common start its receive ends after the send began (0.2 s after rank 0's
    start), where on its own start it would end at about 0."""
    done = run_script(2, "late_clock.py", "0.2", timeout=60)
    assert done.returncode == 0, done.stderr
    sender, receiver = json.loads(done.stdout)
    (send,) = [e for e in sender if e[0] == "send to 1"]
    (recv,) = [e for e in receiver if e[0] == "recv from 0"]
    assert recv[3] >= send[2]  # (name, kind, start s, end s)
    assert recv[3] >= 0.2 > send[2]


def test_a_real_runs_every_receive_ends_after_its_send_began(tmp_path):
    """The synchronous server past this machine's cores (5 ranks): matched in order, each
    worker's n-th receive from the server ends after the server's n-th send to it began (on
    each rank's own start they were up to 4.9 ms the other way, 2026-12-01)."""
    out = train(5, tmp_path / "run", "--algorithm", "ps", "--iterations", "60")
    events = json.loads((out / "timeline.json").read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    for worker in range(1, 5):
        sends = sorted(e["ts"] for e in spans if e["tid"] == 0 and e["name"] == f"send to {worker}")
        ends = sorted(
            e["ts"] + e["dur"] for e in spans if e["tid"] == worker and e["name"] == "recv from 0"
        )
        assert len(sends) == len(ends) > 0
        assert all(end >= start for start, end in zip(sends, ends, strict=True))


@pytest.mark.parametrize("ranks", [2, 3])
def test_the_kernels_cpu_a_byte_is_each_sides_cores_compute_lost(ranks):
    """`real.stack_cpu` on this machine (one boot id: ranks 0 and 1 pinned to two cores), with
    stand-in compute windows, a process on each core, that lose a fifth of the first core's
    steps and 3/8 of the second's while bytes move: the sender's cost a byte is the first
    core's loss times the window's seconds over its bytes, the receiver's the second's; the
    busy time from /proc/stat is reported beside them; a third rank waits it out."""
    done = run_script(ranks, "stack_cpu.py", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["windows"] == 6  # quick: 3 pairs of windows, without and with the transfer
    assert result["lost"] == [0.2875, 0.2875, 0.2875]  # (0.2 + 0.375) / 2, the processes' mean
    per_byte = result["window_s"] / result["window_bytes"]
    assert result["send_s_per_byte"] == pytest.approx(0.2 * per_byte, rel=1e-12)
    assert result["recv_s_per_byte"] == pytest.approx(0.375 * per_byte, rel=1e-12)
    assert result["lost_by_core_s_per_byte"] == pytest.approx([0.2 * per_byte, 0.375 * per_byte])
    assert result["lost_s_per_byte"] == pytest.approx(0.575 * per_byte, rel=1e-12)
    assert result["busy_send_s_per_byte"] >= 0 and result["busy_recv_s_per_byte"] >= 0
    assert result["bytes"] % (4 * 2**20) == 0 and result["bytes"] >= 2 * 4 * 2**20
    assert result["window_bytes"] % (4 * 2**20) == 0 and result["seconds"] > 0
