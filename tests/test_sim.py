"""The simulator held to the truth: alpha-beta formulas, contention, and the real run's weights."""

import csv
import dataclasses
import itertools
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sim.backend import LibraryCall, Simulator
from sim.cluster_profile import WireCost, load_profile
from sim.compute import ComputeModel
from sim.network import make_network
from tests.programs import ChargeLog, ping_pong
from twinsgd.programs.collectives import rabenseifner_allreduce
from twinsgd.programs.compression import make_codec
from twinsgd.programs.ops import Allgather, Allreduce, Compute, Exchange, Recv, Send
from twinsgd.run.runlog import Charges

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = str(Path(sys.executable).parent / "mpiexec")
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "TWINSGD_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
ALPHA, BETA = 5e-6, 1.25e9  # 5 us, 10 Gb/s


class _Log(Charges):
    """Collects what the simulator charges, per kind."""

    def __init__(self):
        self.seconds = {"compute": 0.0, "comm": 0.0, "wait": 0.0}
        self.sent = self.received = 0

    def charge(self, kind, seconds, bytes_sent=0, bytes_recv=0):
        self.seconds[kind] += seconds
        self.sent += bytes_sent
        self.received += bytes_recv


def simulate_programs(size, program):
    """Run ``program(rank)`` on ``size`` bare nodes; return the simulator and the logs."""
    nodes = [SimpleNamespace(rank=r, size=size, reporter=0) for r in range(size)]
    logs = [_Log() for _ in range(size)]
    sim = Simulator(nodes, logs, ALPHA, BETA, ComputeModel(seconds_per_sample=0.0))
    sim.run([program(r) for r in range(size)])
    return sim, logs


@pytest.mark.parametrize("size", [2, 3, 4, 8])
def test_ring_allreduce_takes_the_alpha_beta_time_and_sums(size):
    n = 1000 * size  # elements, divisible by size: T = 2(p-1)(alpha + n*4/(p*beta))
    results = {}

    def program(rank):
        buf = np.full(n, rank + 1.0, np.float32)
        results[rank] = yield Allreduce(buf, op="sum", algo="ring")

    sim, logs = simulate_programs(size, program)
    expected = 2 * (size - 1) * (ALPHA + 4 * n / (size * BETA))
    assert sim.env.now == pytest.approx(expected, rel=1e-12)
    for rank in range(size):
        np.testing.assert_array_equal(results[rank], size * (size + 1) / 2)
        assert logs[rank].sent == logs[rank].received == 2 * (size - 1) * 4 * n // size


@pytest.mark.parametrize(("size", "steps"), [(2, 1), (3, 2), (4, 2), (8, 3)])
def test_an_allgather_of_messages_takes_the_librarys_algorithm(size, steps):
    """Top-k messages (one size on every rank) gathered as MPICH gathers short blocks:
    recursive doubling on a power of two, Bruck's otherwise, log2 p steps moving (p - 1) m
    bytes: ``ceil(log2 p) alpha + (p - 1) m / beta``; each rank gets every rank's message."""
    codec = make_codec("topk:0.25")
    grads = [np.arange(1, 101, dtype=np.float32) * (r + 1) for r in range(size)]
    got = {}

    def program(rank):
        got[rank] = yield Allgather(codec.encode(grads[rank]))

    sim, logs = simulate_programs(size, program)
    m = codec.nbytes(100)
    assert sim.env.now == pytest.approx(steps * ALPHA + (size - 1) * m / BETA, rel=1e-12)
    for rank in range(size):
        assert [codec.decode(msg).tobytes() for msg in got[rank]] == [
            codec.decode(codec.encode(g)).tobytes() for g in grads
        ]
        assert logs[rank].sent == logs[rank].received == (size - 1) * m


def test_an_allgather_of_thresholded_messages_gathers_the_sizes_first():
    """Sizes that differ from rank to rank: an allgather of the 8-byte sizes (recursive
    doubling at 4 ranks: 2 steps), then the bytes around the ring (3 steps, a rank's step done
    when its own block has left and its left neighbour's has come); the bytes counted are the
    ring's (a rank forwards every block but its right neighbour's) and the sizes'."""
    codec = make_codec("threshold:0.5")
    grads = [np.where(np.arange(64) < 4 * (r + 1), 1.0, 0.0).astype(np.float32) for r in range(4)]
    got = {}

    def program(rank):
        got[rank] = yield Allgather(codec.encode(grads[rank]))

    sim, logs = simulate_programs(4, program)
    m = [codec.encode(g).nbytes for g in grads]  # 12 + 5 k, k = 4, 8, 12, 16
    done = [2 * ALPHA + 3 * 8 / BETA] * 4  # after the sizes' 2 steps (8, then 16 bytes)
    for s in range(3):  # ring step s: rank r sends block r - s right, gets block r - s - 1
        done = [
            max(
                done[r] + ALPHA + m[(r - s) % 4] / BETA,
                done[r - 1] + ALPHA + m[(r - 1 - s) % 4] / BETA,
            )
            for r in range(4)
        ]
    assert sim.env.now == pytest.approx(max(done), rel=1e-12)
    for rank in range(4):
        assert [msg.count for msg in got[rank]] == [4, 8, 12, 16]
        assert logs[rank].received == 3 * 8 + sum(m) - m[rank]
        assert logs[rank].sent == 3 * 8 + sum(m) - m[(rank + 1) % 4]


WIRE = WireCost(write_s=3e-6, write_s_per_byte=1e-9, read_s=7e-6)


def wire_seconds(size, program, wire_cost=WIRE):
    """The simulated seconds ``program`` takes with ``wire_cost`` of compressed messages,
    less the seconds it takes without them."""
    now = []
    for wire in (wire_cost, None):
        nodes = [SimpleNamespace(rank=r, size=size, reporter=0) for r in range(size)]
        logs = [_Log() for _ in range(size)]
        sim = Simulator(nodes, logs, ALPHA, BETA, ComputeModel(seconds_per_sample=0.0), wire=wire)
        sim.run([program(r) for r in range(size)])
        now.append(sim.env.now)
    return now[0] - now[1]


def test_a_compressed_message_pays_its_wire_bytes_written_and_read():
    """A Send of a message: written (3 us + 1 ns a byte) before it moves, read (7 us) on
    receipt; an Exchange: each peer's written, each received read; an Allgather of 4: written
    once, 3 read. A Send of an array pays nothing of it."""
    codec = make_codec("topk:0.25")
    msg = codec.encode(np.arange(1, 101, dtype=np.float32))
    m = msg.nbytes

    def send(rank):
        if rank == 0:
            yield Send(dest=1, payload=msg)
        else:
            yield Recv(source=0)

    def exchange(rank):
        peers = [p for p in range(3) if p != rank]
        yield Exchange(dict.fromkeys(peers, msg), dict.fromkeys(peers))

    def allgather(rank):
        yield Allgather(msg)

    def array(rank):
        yield from ping_pong(400)(rank)

    write, read = WIRE.write_s + WIRE.write_s_per_byte * m, WIRE.read_s
    assert wire_seconds(2, send) == pytest.approx(write + read, rel=1e-9)
    assert wire_seconds(3, exchange) == pytest.approx(2 * write + 2 * read, rel=1e-9)
    assert wire_seconds(4, allgather) == pytest.approx(write + 3 * read, rel=1e-9)
    assert wire_seconds(2, array) == 0
    # what MPI's Allgather took past its exchange in the measured program: once a call, and
    # only an allgather's
    extra = dataclasses.replace(WIRE, allgather_extra_s=50e-6)
    assert wire_seconds(4, allgather, extra) == pytest.approx(write + 3 * read + 50e-6, rel=1e-9)
    assert wire_seconds(3, exchange, extra) == pytest.approx(2 * write + 2 * read, rel=1e-9)
    assert wire_seconds(2, send, extra) == pytest.approx(write + read, rel=1e-9)


def test_ping_pong_takes_two_alpha_beta_messages():
    nbytes = 4 * 100_000
    sim, _ = simulate_programs(2, ping_pong(nbytes))
    assert sim.env.now == pytest.approx(2 * (ALPHA + nbytes / BETA), rel=1e-12)


def test_an_exchange_fills_the_buffers_it_names_as_mpi_does():
    """A ring of 3 exchanging with both neighbours: the reply is the buffers, filled with what
    each neighbour sent (then changed by the sender, which the copy must not see); without
    buffers, the messages themselves."""
    got = {}

    def program(rank):
        left, right = (rank - 1) % 3, (rank + 1) % 3
        x = np.full(5, float(rank), np.float32)
        bufs = {left: np.empty(5, np.float32), right: np.empty(5, np.float32)}
        reply = yield Exchange({left: x, right: x}, bufs, tag=1)
        x[:] = -1.0  # the neighbours keep what was sent
        mine = np.array([rank])  # with no buffers named: the messages (read-only copies)
        objects = yield Exchange({left: mine, right: mine}, dict.fromkeys((left, right)), tag=2)
        got[rank] = (reply, bufs, objects)

    simulate_programs(3, program)
    assert sorted(got) == [0, 1, 2]
    for reply, bufs, objects in got.values():
        assert reply.keys() == bufs.keys() and all(reply[p] is bufs[p] for p in bufs)
        for peer, buf in bufs.items():
            np.testing.assert_array_equal(buf, np.full(5, float(peer), np.float32))
        assert {peer: int(m[0]) for peer, m in objects.items()} == {peer: peer for peer in bufs}
        assert not any(m.flags.writeable for m in objects.values())


@pytest.mark.parametrize("workers", [1, 4, 15])
def test_pushes_into_one_nic_queue_behind_each_other(workers):
    """N workers push n bytes each to one server: the last arrives at alpha + N n / beta."""
    nbytes, arrivals = 4 * 50_000, []

    def program(rank):
        buf = np.zeros(nbytes // 4, np.float32)
        if rank == 0:
            for _ in range(workers):
                yield Recv(source=-1, buf=buf)
        else:
            yield Send(dest=0, payload=buf)

    sim, logs = simulate_programs(workers + 1, program)
    assert sim.env.now == pytest.approx(ALPHA + workers * nbytes / BETA, rel=1e-12)
    assert logs[0].received == workers * nbytes
    del arrivals


@pytest.mark.parametrize(("workers", "servers"), [(8, 1), (8, 2), (8, 4), (12, 3)])
def test_sharding_over_k_servers_divides_the_push_time_by_k(workers, servers):
    """N workers push their n-byte gradient as K slices, server 0 first (as ps_worker does):
    server 0's NIC takes N slices of n/K back to back while the later slices follow in a
    pipeline, so the last push is in at (N + K - 1) n / (K beta) + alpha: N n / beta + alpha for
    K = 1, about 1/K of it for N >> K."""
    nbytes = 4 * 60_000  # divisible by 4 * K for every K here

    def program(rank):
        if rank < servers:
            buf = np.zeros(nbytes // 4 // servers, np.float32)
            for _ in range(workers):
                yield Recv(source=-1, buf=buf)
        else:
            for server in range(servers):
                yield Send(dest=server, payload=np.zeros(nbytes // 4 // servers, np.float32))

    sim, logs = simulate_programs(servers + workers, program)
    expected = (workers + servers - 1) * nbytes / (servers * BETA) + ALPHA
    assert sim.env.now == pytest.approx(expected, rel=1e-12)
    assert all(log.received == workers * nbytes // servers for log in logs[:servers])


def _real(n, out, argv):
    cmd = [sys.executable, "-m", "real.train", *argv, "--out", str(out)]
    if n > 1:
        cmd = [MPIEXEC, "-n", str(n), *cmd]
    done = subprocess.run(cmd, cwd=ROOT, env=ENV, timeout=120, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _simulated(n, out, argv):
    nodes = [] if n is None else ["--nodes", str(n)]
    done = subprocess.run(
        [sys.executable, "-m", "sim.run", *nodes, *argv, "--out", str(out)],
        cwd=ROOT,
        env=ENV,
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.mpi
@pytest.mark.parametrize(
    ("n", "argv"),
    [
        (3, ["--algorithm", "ps"]),
        (4, ["--algorithm", "ps", "--servers", "2", "--optimizer", "momentum"]),
        (4, ["--algorithm", "ps", "--replicas", "2"]),
        (4, ["--algorithm", "allreduce", "--allreduce", "ring"]),
        (3, ["--algorithm", "allreduce", "--allreduce", "recursive-doubling"]),
        (4, ["--algorithm", "allreduce", "--allreduce", "rabenseifner"]),
        (3, ["--algorithm", "allreduce", "--allreduce", "rabenseifner", "--optimizer", "sgd"]),
        (3, ["--algorithm", "allreduce", "--local-steps", "4", "--optimizer", "sgd"]),
        (4, ["--algorithm", "gossip", "--topology", "ring"]),
        (3, ["--algorithm", "allreduce", "--compress", "topk:0.05", "--error-feedback"]),
        (3, ["--algorithm", "ps", "--compress", "qsgd:16"]),  # messages sent and received
        (4, ["--algorithm", "gossip", "--topology", "ring", "--compress", "threshold:0.001"]),
        (4, ["--algorithm", "allreduce", "--compress", "threshold:0.001"]),  # sizes gathered
        (3, ["--algorithm", "gossip", "--topology", "ring", "--compress", "sign"]),
    ],
)
def test_the_twin_ends_with_the_real_runs_weights_bit_for_bit(tmp_path, n, argv):
    common = [
        "--dataset",
        "mnist-subset",
        "--iterations",
        "12",
        "--eval-every",
        "6",
        "--no-progress",
        *argv,
    ]
    _real(n, tmp_path / "real", common)
    _simulated(n, tmp_path / "sim", common)
    with (
        np.load(tmp_path / "real" / "model.npz") as real,
        np.load(tmp_path / "sim" / "model.npz") as sim,
    ):
        assert real.files == sim.files
        for name in real.files:
            np.testing.assert_array_equal(sim[name], real[name], err_msg=name)

    def bytes_moved(run):
        with open(tmp_path / run / "steps.csv") as f:
            return sorted(
                (r["rank"], r["iteration"], r["bytes_sent"], r["bytes_recv"])
                for r in csv.DictReader(f)
            )

    assert bytes_moved("real") == bytes_moved("sim")
    real_metrics = (tmp_path / "real" / "metrics.csv").read_text().splitlines()
    sim_metrics = (tmp_path / "sim" / "metrics.csv").read_text().splitlines()
    for r, s in zip(real_metrics[1:], sim_metrics[1:], strict=True):  # same test loss, accuracy
        assert r.split(",")[4:6] == s.split(",")[4:6]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--latency", "5"], "--latency: '5' needs a unit"),
        (["--bandwidth", "fast"], "--bandwidth: cannot read 'fast'"),
        (["--latency", "1e400s"], "argument --latency: '1e400s' is not a finite number"),
        (["--bandwidth", "0Gbps"], "argument --bandwidth: '0Gbps' must be > 0"),
        (["--speeds", "1e400x"], "--speeds 1e400x: factor: '1e400x' is not a finite number"),
        (["--stragglers", "abc"], "argument --stragglers: expects P:SLOWDOWN with 0 <= P <= 1"),
        (["--stragglers", "0.1:0.5x"], "argument --stragglers: SLOWDOWN must be >= 1x"),
        (
            ["--algorithm", "allreduce", "--mode", "ssp"],
            "--mode ssp needs --algorithm ps, got --algorithm allreduce",
        ),
        (
            ["--ghost", "resnet50", "--compute", "measured"],
            "--compute measured needs the real kernel, which --ghost does not run",
        ),
        (
            ["--nodes", "1000000000"],
            "--nodes 1000000000: about 4.04e+06 GB of memory for the nodes",
        ),
        (["--nodes", "0"], "--nodes must be >= 1"),
        (["--algorithm", "ps", "--nodes", "1"], "--algorithm ps --servers 1 needs at least 2"),
    ],
)
def test_bad_cluster_input_is_one_line_and_exit_2(tmp_path, argv, message):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim.run",
            "--dataset",
            "mnist-subset",
            *argv,
            "--out",
            str(tmp_path / "run"),
        ],
        cwd=ROOT,
        env=ENV,
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr


FREE_NETWORK = ["--latency", "1ns", "--bandwidth", "1000000GB/s"]  # comm ~1e-8 s per step


def _profiled(tmp_path, n, argv, seconds_per_sample=1e-3):
    """A simulated run whose compute is b * seconds_per_sample; returns (summary, steps)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    profile = tmp_path / "profile.toml"
    profile.write_text(f"[compute]\nseconds_per_sample = {seconds_per_sample}\n")
    out = tmp_path / "run"
    _simulated(
        n,
        out,
        [
            "--dataset",
            "mnist-subset",
            "--no-progress",
            "--compute",
            "profile",
            "--profile",
            str(profile),
            "--batch-size",
            "10",
            *FREE_NETWORK,
            *argv,
        ],
    )
    import csv
    import json

    with open(out / "steps.csv") as fh:
        steps = list(csv.DictReader(fh))
    return json.loads((out / "summary.json").read_text()), steps


def test_a_synchronous_step_lasts_as_long_as_the_slowest_node(tmp_path):
    summary, _ = _profiled(
        tmp_path, 4, ["--algorithm", "allreduce", "--iterations", "5", "--speeds", "1x,1x,1x,0.5x"]
    )
    assert summary["time_s"] == pytest.approx(5 * 2 * 10 * 1e-3, rel=1e-5)  # 20 ms a step


def test_stragglers_slow_synchronous_steps_as_the_maximum_predicts(tmp_path):
    """Each of N nodes is S times slower with probability p: E[step] = t (1 + (S-1)(1-(1-p)^N)).

    1000 steps: the standard error of the mean is 1.8 % of it; the bound is 6 %. The run is
    seeded, so the figure is the same every time (measured: within 1 %).
    """
    n, p, slowdown, t = 4, 0.1, 3.0, 10 * 1e-3
    summary, steps = _profiled(
        tmp_path,
        n,
        [
            "--algorithm",
            "allreduce",
            "--iterations",
            "1000",
            "--stragglers",
            f"{p}:{slowdown}x",
            "--eval-every",
            "1000",
        ],
    )
    expected = t * (1 + (slowdown - 1) * (1 - (1 - p) ** n))
    assert summary["time_s"] / 1000 == pytest.approx(expected, rel=0.06)
    slowed = np.mean([float(r["compute_s"]) > 1.5 * t for r in steps])
    assert slowed == pytest.approx(p, abs=0.03)


def test_an_asynchronous_server_is_not_held_back_by_a_slow_worker(tmp_path):
    """Fast workers push at their own pace; a synchronous server would wait for the slow one."""
    argv = ["--algorithm", "ps", "--iterations", "20", "--speeds", "1x,1x,1x,0.25x"]
    _, steps = _profiled(tmp_path / "async", 4, [*argv, "--mode", "async"])
    finished = {r["rank"]: float(r["time_s"]) for r in steps if r["iteration"] == "20"}
    assert finished["1"] == pytest.approx(20 * 10e-3, rel=0.01)  # its own pace
    assert finished["3"] == pytest.approx(20 * 40e-3, rel=0.01)
    summary, _ = _profiled(tmp_path / "sync", 4, [*argv, "--mode", "sync"])
    assert summary["time_s"] == pytest.approx(20 * 40e-3, rel=0.01)  # everyone at the slow pace


@pytest.mark.parametrize("extra", [0, 3])
@pytest.mark.parametrize("size", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("algo", ["ring", "recursive-doubling"])
def test_closed_form_collectives_agree_with_message_level(algo, size, extra):
    """Same sums bit for bit, and on a contention-free network the same simulated time to 1e-9
    when the formula is exact (ring: p divides n; recursive doubling: p a power of two);
    otherwise the closed form is an upper bound (ring: costed on the largest chunk, within 1 %;
    recursive doubling: the message level overlaps the two folds' latencies, 2 alpha a call)."""
    n, out = 4 * 1000 * size + extra, {}

    def program(rank):
        buf = np.random.default_rng(rank).standard_normal(n).astype(np.float32)
        for _ in range(3):
            buf = yield Allreduce(buf, op="mean", algo=algo)
        out[rank] = buf

    results = {}
    for collectives in ("message", "closed-form"):
        nodes = [SimpleNamespace(rank=r, size=size, reporter=0) for r in range(size)]
        logs = [_Log() for _ in range(size)]
        sim = Simulator(
            nodes, logs, ALPHA, BETA, ComputeModel(seconds_per_sample=0.0), collectives=collectives
        )
        sim.run([program(r) for r in range(size)])
        results[collectives] = (sim.env.now, dict(out), [(g.sent, g.received) for g in logs])
    (t_msg, bufs_msg, bytes_msg), (t_cf, bufs_cf, bytes_cf) = results.values()
    exact = size & (size - 1) == 0 if algo == "recursive-doubling" else extra == 0 or size == 1
    if exact:
        assert t_cf == pytest.approx(t_msg, rel=1e-9, abs=1e-15)
    elif algo == "ring":
        assert t_msg * (1 - 1e-12) <= t_cf <= t_msg * 1.01
    else:
        assert t_msg * (1 - 1e-12) <= t_cf <= t_msg + 3 * 2 * ALPHA * (1 + 1e-9)  # 3 calls
    assert bytes_cf == bytes_msg
    for rank in range(size):
        np.testing.assert_array_equal(bufs_cf[rank], bufs_msg[rank])


def test_closed_form_training_ends_with_the_message_level_weights(tmp_path):
    common = [
        "--dataset",
        "mnist-subset",
        "--no-progress",
        "--algorithm",
        "allreduce",
        "--iterations",
        "6",
    ]
    _simulated(3, tmp_path / "message", common)
    _simulated(3, tmp_path / "closed", [*common, "--collectives", "closed-form"])
    with (
        np.load(tmp_path / "message" / "model.npz") as a,
        np.load(tmp_path / "closed" / "model.npz") as b,
    ):
        for name in a.files:
            np.testing.assert_array_equal(a[name], b[name])


def _ghost_allreduce(tmp_path, name, argv):
    """A ghost allreduce of 1,000,000 float32 on 8 nodes, 2 steps; its summary."""
    import json

    out = tmp_path / name
    _simulated(
        8,
        out,
        [
            "--algorithm",
            "allreduce",
            "--ghost",
            "1000000",
            "--iterations",
            "2",
            "--latency",
            "5us",
            "--bandwidth",
            "10Gbps",
            "--no-measure-wait",
            *argv,
        ],
    )
    return json.loads((out / "summary.json").read_text())


def test_a_ring_network_carries_the_ring_allreduce_as_the_star_does(tmp_path):
    """Ring neighbours are one hop apart on a ring network: alpha + n/beta per step, as on the
    star, at message level and in closed form; through a fat tree the ring's steps cross more
    switches (up to 5 alpha) but the bytes are the same."""
    star = _ghost_allreduce(tmp_path, "star", [])
    ring = _ghost_allreduce(tmp_path, "ring", ["--network", "ring"])
    closed = _ghost_allreduce(
        tmp_path, "closed", ["--network", "ring", "--collectives", "closed-form"]
    )
    tree = _ghost_allreduce(tmp_path, "tree", ["--network", "fat-tree:4"])
    expected = 2 * 2 * 7 * (ALPHA + 4 * 1_000_000 / 8 / BETA)
    for summary in (star, ring, closed):
        assert summary["time_s"] == pytest.approx(expected, rel=1e-9)
    assert tree["bytes_sent"] == star["bytes_sent"]
    assert star["time_s"] < tree["time_s"] <= expected + 2 * 2 * 7 * 4 * ALPHA * (1 + 1e-9)


def test_a_bad_network_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim.run",
            "--nodes",
            "20",
            "--algorithm",
            "allreduce",
            "--ghost",
            "1000",
            "--network",
            "fat-tree:4",
            "--out",
            str(tmp_path / "run"),
        ],
        cwd=ROOT,
        env=ENV,
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "fat-tree:4 holds 16 hosts" in lines[0], done.stderr
    assert not (tmp_path / "run").exists()


def test_the_same_seed_gives_the_same_run_folder_byte_for_byte(tmp_path):
    """Profile compute makes every time simulated: two runs differ only in when and with what
    they ran (config.json's started, host, versions)."""
    import json

    profile = tmp_path / "profile.toml"
    profile.write_text("[compute]\nseconds_per_sample = 1e-4\n")
    argv = [
        "--dataset",
        "mnist-subset",
        "--no-progress",
        "--algorithm",
        "gossip",
        "--topology",
        "ring",
        "--iterations",
        "8",
        "--eval-every",
        "4",
        "--stragglers",
        "0.3:3x",
        "--compute",
        "profile",
        "--profile",
        str(profile),
        "--network",
        "torus",
    ]
    for name in ("a", "b"):
        _simulated(4, tmp_path / name, argv)
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "b").iterdir())
    assert {"steps.csv", "metrics.csv", "summary.json", "model.npz"} <= set(files)
    for name in files:
        a, b = (tmp_path / "a" / name).read_bytes(), (tmp_path / "b" / name).read_bytes()
        if name == "config.json":
            a, b = json.loads(a), json.loads(b)
            for key in ("started", "host", "versions", "command"):
                a.pop(key), b.pop(key)
            a["config"].pop("out"), b["config"].pop("out")
        assert a == b, name


@pytest.mark.parametrize(
    "argv",
    [
        ["--algorithm", "allreduce"],
        ["--algorithm", "allreduce", "--allreduce", "recursive-doubling"],
        ["--algorithm", "ps"],
        ["--algorithm", "ps", "--mode", "async"],
        ["--algorithm", "ps", "--servers", "2"],
        ["--algorithm", "gossip", "--topology", "exponential"],
        ["--algorithm", "allreduce", "--compress", "topk:0.1"],
    ],
)
def test_every_simulated_second_is_charged_once(tmp_path, argv):
    """compute + comm + wait of each step add up to the time the step took, on every node
    (overlapping transfers of one operation are not counted twice)."""
    _, steps = _profiled(
        tmp_path,
        5,
        [
            *argv,
            "--iterations",
            "6",
            "--latency",
            "5us",
            "--bandwidth",
            "1GB/s",
            "--stragglers",
            "0.3:2x",
        ],
    )
    last = {}
    for row in steps:
        spent = sum(float(row[k]) for k in ("compute_s", "comm_s", "wait_s"))
        took = float(row["time_s"]) - last.get(row["rank"], 0.0)
        assert spent == pytest.approx(took, rel=1e-9, abs=1e-15), row
        last[row["rank"]] = float(row["time_s"])


def test_a_run_too_large_for_its_data_adapts_and_says_what_it_chose(tmp_path):
    """Like ``sim.run --nodes 210`` on the bundled images: 10,000 over 120 shards is 83 each."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim.run",
            "--dataset",
            "mnist-subset",
            "--nodes",
            "120",
            "--collectives",
            "closed-form",
            "--out",
            str(tmp_path / "run"),
        ],
        cwd=ROOT,
        env=ENV,
        timeout=300,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    import json

    notes = [line for line in done.stderr.splitlines() if line.startswith("python -m sim.run: ")]
    assert notes[0].endswith(
        "batch size 64 per node: the default 100 does not fit a node's "
        "shard of 83 images (set --batch-size)"
    )
    assert "20 steps (20 epochs)" in notes[1]
    config = json.loads((tmp_path / "run" / "config.json").read_text())["config"]
    assert (config["batch_size"], config["iterations"]) == (64, 20)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["iterations"] == 20


@pytest.mark.parametrize(
    ("cold_own_s", "code_ms", "share"),
    [(None, None, 0.0), (3e-4, None, 1.0), (3e-4, 4.0, 0.25), (3e-4, 1.0, 1.0), (3e-4, 0.5, 1.0)],
)
def test_own_code_right_after_a_large_message_pays_the_measured_refill(
    monkeypatch, cold_own_s, code_ms, share
):
    """Own code timed in process (here by a clock that moves 1 ms a reading: each piece 1 ms)
    takes a profile's ``cold_own_s`` more right after an operation that moved at least 64 KiB,
    and nothing more after a small one. With the stand-in's code seconds (``cold_own_code_s``)
    it pays in proportion over its first that many seconds: against a 4 ms stand-in a quarter,
    against 1 or 0.5 ms all of it; without them all of it; without ``cold_own_s`` nothing."""
    ticks = itertools.count()
    monkeypatch.setattr("sim.backend.perf_counter", lambda: next(ticks) * 1e-3)
    sizes = (20_000, 8, 20_000, 8)  # float32: 80 KB, 32 B, 80 KB, 32 B

    def program(rank):
        for n in sizes:  # own code before each; the second and fourth follow a large message
            if rank == 0:
                yield Send(dest=1, payload=np.zeros(n, np.float32))
            else:
                yield Recv(source=0, buf=np.zeros(n, np.float32))

    nodes = [SimpleNamespace(rank=r, size=2, reporter=0) for r in range(2)]
    logs = [_Log() for _ in range(2)]
    code_s = code_ms * 1e-3 if code_ms is not None else None
    model = ComputeModel(cold_own_s=cold_own_s, cold_own_code_s=code_s)
    Simulator(nodes, logs, ALPHA, BETA, model).run([program(r) for r in range(2)])
    refills = 2 * share * (cold_own_s or 0.0)
    for log in logs:
        assert log.seconds["compute"] == pytest.approx(len(sizes) * 1e-3 + refills, rel=1e-9)


# a machine's warm copy and its copy into bytes another rank has just read: 0.1 and 0.3 ns a
# byte, so a rewrite of n bytes costs 0.2 ns a byte
_REWRITE_COSTS = {
    "local_copy": SimpleNamespace(seconds=lambda n: 1e-10 * n),
    "copy_read_by_peer": SimpleNamespace(seconds=lambda n: 3e-10 * n),
}


def _run_on_one_machines_copies(program, size, model, costs=_REWRITE_COSTS, **options):
    """The logs of ``program(node)`` on ``size`` nodes with parameters of 1 MB, eager limit 4
    KiB, charged ``costs`` (`_REWRITE_COSTS`); ``options``: the Simulator's."""
    params = np.zeros(250_000, np.float32)
    nodes = [
        SimpleNamespace(rank=r, size=size, reporter=0, model=SimpleNamespace(params=params))
        for r in range(size)
    ]
    logs = [_Log() for _ in range(size)]
    Simulator(nodes, logs, ALPHA, BETA, model, eager_bytes=4096, **costs, **options).run(
        [program(n) for n in nodes]
    )
    return logs


@pytest.mark.parametrize(
    ("sends", "buffered", "rewrites"),
    [("params", False, 1), ("gradient", False, 0), ("params", True, 0)],
)
def test_an_update_that_writes_parameters_a_peer_read_pays_the_measured_rewrite(
    monkeypatch, sends, buffered, rewrites
):
    """Through one machine's shared memory, a rank that sent its parameters past the eager
    limit (its peer reads them from its memory) pays, right after its next large receive (the
    message its update is for), the profile's copy into bytes another rank has just read less
    its warm copy of as many bytes: once, however many receives follow. Not for a gradient it
    sent, nor a buffered send (the library's copy is read). Own code here is 1 ms a piece."""
    ticks = itertools.count()
    monkeypatch.setattr("sim.backend.perf_counter", lambda: next(ticks) * 1e-3)
    floats = 250_000  # 1 MB, as the nodes' parameters

    def program(node):
        for _ in range(2):  # weights out, a gradient in, twice
            if node.rank == 0:
                params = node.model.params
                payload = params if sends == "params" else np.zeros(floats, np.float32)
                yield Send(dest=1, payload=payload, buffered=buffered)
                yield Recv(source=1, buf=np.zeros(floats, np.float32))
                yield Recv(source=1, buf=np.zeros(floats, np.float32))
            else:
                yield Recv(source=0, buf=np.zeros(floats, np.float32))
                yield Send(dest=0, payload=np.zeros(floats, np.float32))
                yield Send(dest=0, payload=np.zeros(floats, np.float32))

    logs = _run_on_one_machines_copies(program, 2, ComputeModel())
    pieces = 6  # own code before each of a rank's six operations
    assert logs[0].seconds["compute"] == pytest.approx(
        pieces * 1e-3 + 2 * rewrites * 2e-10 * 4 * floats, rel=1e-9
    )
    assert logs[1].seconds["compute"] == pytest.approx(pieces * 1e-3, rel=1e-9)


@pytest.mark.parametrize(("pushes", "rewrites"), [(True, 1), (False, 0)])
def test_a_gradient_computed_into_bytes_the_server_read_pays_the_measured_rewrite(pushes, rewrites):
    """Through one machine's shared memory a worker that pushed its gradient past the eager
    limit (the server reads it from the worker's memory) computes the next one into those
    bytes: that Compute pays the profile's copy into bytes another rank has just read less its
    warm copy, once; one that pushed nothing, nothing. Compute is 1 ms a sample."""
    floats = 250_000  # 1 MB

    def program(node):
        for _ in range(2):
            if node.rank == 0:
                yield Compute(lambda: None, samples=1)
                if pushes:
                    yield Send(dest=1, payload=np.zeros(floats, np.float32))
            elif pushes:
                yield Recv(source=0, buf=np.zeros(floats, np.float32))

    logs = _run_on_one_machines_copies(program, 2, ComputeModel(seconds_per_sample=1e-3))
    assert logs[0].seconds["compute"] == pytest.approx(
        2e-3 + rewrites * 2e-10 * 4 * floats, rel=1e-9
    )


def test_a_collectives_own_sends_leave_no_rewrite_to_pay():
    """The rewrite is a program's own Send's (a push, a reply): 3 ranks fold into recursive
    doubling's 2 by a Send of the whole 1 MB vector inside the allreduce, whose aftermath the
    in-situ mean pass already holds; the Compute after it pays 1 ms a sample and no more."""
    floats = 250_000

    def program(node):
        yield Allreduce(np.ones(floats, np.float32), "sum", "recursive-doubling")
        yield Compute(lambda: None, samples=1)

    logs = _run_on_one_machines_copies(program, 3, ComputeModel(seconds_per_sample=1e-3))
    assert [log.seconds["compute"] for log in logs] == [pytest.approx(1e-3, rel=1e-9)] * 3


@pytest.mark.parametrize(("cores", "read"), [(None, 1.0), (1, 0.0)])
def test_a_buffered_send_copies_into_the_buffer_its_receiver_read_and_goes_on(
    monkeypatch, cores, read
):
    """Through one machine's shared memory a buffered Send past the eager limit is MPICH's
    Bsend: the sender copies the message into its attached buffer and goes on (its receiver,
    computing 10 ms first, takes it later). Its first copy is warm, 0.1 ns a byte; the next
    writes the bytes the receiver read from that buffer, 0.3 ns a byte, where each rank has a
    core; past the cores (both on one), warm again. (Own code takes no time here.)"""
    monkeypatch.setattr("sim.backend.perf_counter", lambda: 0.0)
    floats = 250_000  # 1 MB
    received = []

    def program(node):
        if node.rank == 0:
            for _ in range(2):
                yield Send(dest=1, payload=np.full(floats, 7.0, np.float32), buffered=True)
        else:
            yield Compute(lambda: None, samples=10)
            for _ in range(2):
                _, got = yield Recv(source=0, buf=np.zeros(floats, np.float32))
                received.append(float(got.sum()))

    network = make_network(None, "star", 2, ALPHA, BETA, machine_copies=2)
    groups = () if cores is None else [((0, 1), cores)]
    logs = _run_on_one_machines_copies(
        program, 2, ComputeModel(seconds_per_sample=1e-3), network=network, core_groups=groups
    )
    warm = 1e-10 * 4 * floats
    assert logs[0].seconds["comm"] == pytest.approx(warm + (1 - read) * warm + read * 3 * warm)
    assert received == [7.0 * floats] * 2


@pytest.mark.parametrize(
    ("algo", "size", "rewritten"),
    [("mpi", 2, 1 / 2), ("mpi", 4, 3 / 4), ("ring", 2, 0.0), ("ring", 4, 0.0), ("osu", 2, 0.0)],
)
def test_mpis_allgather_into_the_halves_it_sent_away_pays_the_measured_rewrite(
    monkeypatch, algo, size, rewritten
):
    """Through one machine's shared memory MPI's Allreduce (Rabenseifner's here) receives its
    allgather's blocks into the ones its reduce-scatter sent away, which their receivers read
    from its memory: each such step pays the copy into bytes another rank has just read less
    the warm copy, 0.2 ns a byte, 1/2 of the vector at 2 ranks and 1/4 + 1/2 at 4, on every
    rank alike. Our own ring's later steps are priced as measured in situ: nothing more; nor
    OSU's call of it, whose steps send what the library wrote, priced at the ``-written``
    costs, whose repetitions hold a rewrite each. (Own code takes no time here.)"""
    monkeypatch.setattr("sim.backend.perf_counter", lambda: 0.0)
    floats = 250_000

    def program(node):
        vector = np.ones(floats, np.float32)
        if algo == "osu":
            yield LibraryCall(rabenseifner_allreduce(vector, node.rank, node.size), "always")
        else:
            yield Allreduce(vector, "sum", algo)

    warm = {"local_copy": _REWRITE_COSTS["local_copy"]}
    model = ComputeModel()
    plain, read = (
        _run_on_one_machines_copies(program, size, model, costs) for costs in (warm, _REWRITE_COSTS)
    )
    for before, after in zip(plain, read, strict=True):
        assert after.seconds["comm"] - before.seconds["comm"] == pytest.approx(
            rewritten * 2e-10 * 4 * floats, rel=1e-9, abs=1e-15
        )


class _StepLog(_Log):
    """`_Log` that also keeps each closed step's (iteration, end time, compute seconds)."""

    def __init__(self):
        super().__init__()
        self.steps, self._closed = [], 0.0

    def end_step(self, rank, epoch, iteration, time_s, loss, staleness=0):
        self.steps.append((iteration, time_s, self.seconds["compute"] - self._closed))
        self._closed = self.seconds["compute"]


def _stepped_pair(monkeypatch, steps, floats, model):
    """Rank 0 sends rank 1 ``floats`` float32 a step, for ``steps`` steps, each closed right
    after its message; own code timed by a clock that moves 1 ms a reading. The `_StepLog`s."""
    ticks = itertools.count()
    monkeypatch.setattr("sim.backend.perf_counter", lambda: next(ticks) * 1e-3)

    def program(node):
        for iteration in range(1, steps + 1):
            if node.rank == 0:
                yield Send(dest=1, payload=np.zeros(floats, np.float32))
            else:
                yield Recv(source=0, buf=np.zeros(floats, np.float32))
            node.on_step_end(SimpleNamespace(epoch=0, iteration=iteration), 0.0, 0)

    nodes = [SimpleNamespace(rank=r, size=2, reporter=0) for r in range(2)]
    logs = [_StepLog() for _ in range(2)]
    Simulator(nodes, logs, ALPHA, BETA, model).run([program(n) for n in nodes])
    return logs


def test_own_code_before_a_step_closes_is_that_steps_and_the_rest_the_next(monkeypatch):
    """A program's own code runs on from its last operation through the step's close
    (``end_step``) into the next step's; timed in process (a clock that moves 1 ms a reading),
    the part before the close is charged to the closing step and ends it, the rest to the next.
    Readings: one as the own code begins (after each operation), one at each close, one at the
    next operation: 1 ms before every close and 1 ms after it. The last step's own code after
    its close is in no step (the program ends)."""
    logs = _stepped_pair(monkeypatch, 3, 2, ComputeModel())
    for log in logs:  # the own code before the first operation is step 1's too
        assert [(i, c) for i, _, c in log.steps] == [
            (1, pytest.approx(2e-3)),
            (2, pytest.approx(2e-3)),
            (3, pytest.approx(2e-3)),
        ]
        assert log.seconds["compute"] == pytest.approx(6e-3, rel=1e-9)
    # rank 1's first Recv ends as the message lands (1 ms of own code, then alpha + n / beta)
    # and its step 1 ms of own code later; each later step's own code takes 2 ms, and its
    # message, sent by a rank 0 that is ahead, has landed or lands within alpha + n / beta
    message = ALPHA + 8 / BETA
    ends = [t for _, t, _ in logs[1].steps]
    assert ends[0] == pytest.approx(2e-3 + message, rel=1e-9)
    for before, after in itertools.pairwise(ends):
        assert 2e-3 - 1e-12 <= after - before <= 2e-3 + message


def test_the_refill_goes_on_over_a_steps_close_until_the_stand_ins_code_is_run(monkeypatch):
    """A step closes 1 ms into the own code after a large message and 1 ms of own code follows
    before the next operation (a PS worker's pull, then its next batch): against a 4 ms
    stand-in, each ms pays a quarter of the refill, the closing step's share and the next's."""
    logs = _stepped_pair(
        monkeypatch, 2, 20_000, ComputeModel(cold_own_s=4e-4, cold_own_code_s=4e-3)
    )
    for log in logs:  # step 1: 1 ms before its Send or Recv, 1 ms after it (+1e-4 refill)
        assert [(i, c) for i, _, c in log.steps] == [
            (1, pytest.approx(2e-3 + 1e-4, rel=1e-9)),
            (2, pytest.approx(2e-3 + 2e-4, rel=1e-9)),
        ]


def test_a_profile_with_a_negative_cold_own_code_is_refused_naming_it(tmp_path):
    profile = tmp_path / "p.toml"
    profile.write_text("[compute]\ncold_own_s = -1e-5\n")
    with pytest.raises(ValueError, match=r"\[compute\] cold_own_s must be a finite number >= 0"):
        load_profile(str(profile))
    profile.write_text("[compute]\ncold_own_code_s = 0\n")
    with pytest.raises(
        ValueError, match=r"\[compute\] cold_own_code_s must be a finite number > 0"
    ):
        load_profile(str(profile))
    profile.write_text("[compute]\ncold_own_s = 7.4e-5\ncold_own_code_s = 2.6e-5\n")
    assert load_profile(str(profile)).cold_own_s == 7.4e-5
    assert load_profile(str(profile)).cold_own_code_s == 2.6e-5


def test_a_profile_with_an_impossible_number_is_refused_naming_it(tmp_path):
    profile = tmp_path / "p.toml"
    profile.write_text("[compute]\nseconds_per_sample = -1\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim.run",
            "--dataset",
            "mnist-subset",
            "--compute",
            "profile",
            "--profile",
            str(profile),
            "--out",
            str(tmp_path / "run"),
        ],
        cwd=ROOT,
        env=ENV,
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"python -m sim.run: error: --profile {profile}: [compute] "
        f"seconds_per_sample (*) must be a finite number >= 0, got -1"
    )
    assert not (tmp_path / "run").exists()


def test_a_config_file_sets_cluster_options_too_and_flags_win(tmp_path):
    import json

    toml = tmp_path / "run.toml"
    toml.write_text(
        'nodes = 3\nlatency = "7us"\nprogress = false\niterations = 2\nalgorithm = "allreduce"\n'
    )
    for extra, nodes in (([], 3), (["--nodes", "2"], 2)):
        out = tmp_path / f"run{nodes}"
        _simulated(None, out, ["--dataset", "mnist-subset", "--config", str(toml), *extra])
        config = json.loads((out / "config.json").read_text())
        assert (config["nodes"], config["cluster"]["latency_s"]) == (nodes, 7e-6)


def test_a_run_whose_every_node_failed_is_not_done(tmp_path):
    import json

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim.run",
            "--dataset",
            "mnist-subset",
            "--nodes",
            "2",
            "--iterations",
            "5",
            "--fail",
            "0@1ms,1@1ms",
            "--out",
            str(tmp_path / "run"),
        ],
        cwd=ROOT,
        env=ENV,
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 3
    status = json.loads((tmp_path / "run" / "summary.json").read_text())["status"]
    assert status == "failed: rank 0 killed at 0.001 s; rank 1 killed at 0.001 s"


@pytest.mark.parametrize("collectives", ["message", "closed-form"])
def test_a_simulated_run_writes_a_timeline_that_tiles_each_nodes_time(tmp_path, collectives):
    """timeline.json as real runs write it (Chrome trace): each drawn node's events follow one
    another without overlap and add up to the run's time, as every second is charged once (the
    program's own code after a step's last operation is charged, and drawn, with the next)."""
    import json

    _simulated(
        100,
        tmp_path / "run",
        [
            "--dataset",
            "mnist-subset",
            "--algorithm",
            "allreduce",
            "--iterations",
            "3",
            "--batch-size",
            "10",
            "--collectives",
            collectives,
            *FREE_NETWORK,
        ],
    )
    trace = json.loads((tmp_path / "run" / "timeline.json").read_text())
    with open(tmp_path / "run" / "steps.csv") as fh:
        ends = {int(r["rank"]): float(r["time_s"]) for r in csv.DictReader(fh)}  # last step's
    assert trace["otherData"] == {"algorithm": "allreduce", "clock": "simulated"}
    tracks = [e["tid"] for e in trace["traceEvents"] if e["ph"] == "M"]
    assert tracks == list(range(0, 100, 2))  # 100 nodes: every 2nd, at most 64 drawn
    for rank in tracks:
        events = sorted(
            (e["ts"], e["dur"], e["cat"])
            for e in trace["traceEvents"]
            if e["ph"] == "X" and e["tid"] == rank
        )
        assert {cat for _, _, cat in events} <= {"compute", "comm", "wait"}
        for (ts, dur, _), (next_ts, _, _) in itertools.pairwise(events):
            assert next_ts == pytest.approx(ts + dur, abs=2e-3)  # microseconds, each rounded
        end = ends[rank] * 1e6  # its last step's end, inside the own code that closes it
        drawn = [min(dur, end - ts) for ts, dur, _ in events if ts < end - 1e-3]
        # each start and duration is written to the nanosecond: one off at most apiece
        assert sum(drawn) == pytest.approx(end, abs=1e-3 * len(drawn) + 1e-9)


@pytest.mark.parametrize("entry_barrier", [False, True])
def test_an_exchange_after_its_tokens_is_all_comm_as_the_real_clock_counts_it(entry_barrier):
    """4 ranks on a star exchange n bytes with both ring neighbours; each rank's two messages
    leave one after the other through its NIC, so one neighbour's reaches it n/beta late.
    With the entry tokens (``--measure-wait``) the tokens' alpha is wait and the rest, 2 n/beta
    + alpha, comm, as the real backend times it; without, the late message's n/beta is wait."""
    alpha, beta, n = 5e-6, 1e9, 400_000

    def program(rank):
        peers = [(rank - 1) % 4, (rank + 1) % 4]  # each sends to its left neighbour first
        yield Exchange(
            payloads={p: np.ones(n // 4, np.float32) for p in peers},
            bufs={p: np.empty(n // 4, np.float32) for p in peers},
        )

    logs = [ChargeLog() for _ in range(4)]
    nodes = [SimpleNamespace(rank=r, size=4, reporter=0) for r in range(4)]
    simulator = Simulator(
        nodes, logs, alpha, beta, ComputeModel(seconds_per_sample=0.0), entry_barrier=entry_barrier
    )
    simulator.run([program(r) for r in range(4)])
    for log in logs:
        if entry_barrier:
            assert log.seconds["wait"] == pytest.approx(alpha, rel=1e-9)
            assert log.seconds["comm"] == pytest.approx(2 * n / beta + alpha, rel=1e-9)
        else:
            assert log.seconds["wait"] == pytest.approx(n / beta, rel=1e-9)
            assert log.seconds["comm"] == pytest.approx(n / beta + alpha, rel=1e-9)


def test_a_collectives_steps_after_its_barrier_are_all_comm():
    """A ring allreduce of 4 ranks where rank 0 computes 1 ms longer first: with the entry
    barrier each rank's wait is its barrier's (rank 0 last there: none; the others 1 ms and the
    one or two rounds of empty messages after it) and no step of the ring adds any, as the real
    clock has it; the ring's own time, 2(p - 1) steps of n/p bytes, is comm."""
    alpha, beta = 5e-6, 1e9

    def program(rank):
        yield Compute(lambda: None, (), samples=1 if rank == 0 else 0)
        yield Allreduce(np.ones(100_000, np.float32), op="sum", algo="ring")

    logs = [ChargeLog() for _ in range(4)]
    nodes = [SimpleNamespace(rank=r, size=4, reporter=0) for r in range(4)]
    simulator = Simulator(
        nodes, logs, alpha, beta, ComputeModel(seconds_per_sample=1e-3), entry_barrier=True
    )
    simulator.run([program(r) for r in range(4)])
    waits = [log.seconds["wait"] for log in logs]
    assert waits == pytest.approx([0.0, 1e-3 + alpha, 1e-3 + alpha, 1e-3 + 2 * alpha], abs=1e-12)
    for log in logs:
        assert log.seconds["comm"] >= 2 * 3 * 100_000 / beta  # 2(p - 1) chunks of 100 KB


def test_a_rendezvous_sends_bytes_once_its_receiver_has_posted():
    """Past the eager limit MPI moves a message only once the receive is posted (a request to
    send, answered): rank 1 computes 1 ms before its Recv, so the 400 KB leave then, and the
    receiver's copy is its comm (as the real clock, after its probe, has it), not a message
    that had landed long before."""
    alpha, beta, n = 5e-6, 1e9, 100_000

    def program(rank):
        if rank == 0:
            yield Send(dest=1, payload=np.ones(n, np.float32))
        else:
            yield Compute(lambda: None, (), samples=1)
            yield Recv(source=0, buf=np.empty(n, np.float32))

    logs = [ChargeLog() for _ in range(2)]
    nodes = [SimpleNamespace(rank=r, size=2, reporter=0) for r in range(2)]
    simulator = Simulator(
        nodes, logs, alpha, beta, ComputeModel(seconds_per_sample=1e-3), eager_bytes=4096
    )
    simulator.run([program(r) for r in range(2)])
    copy_s = alpha + 4 * n / beta
    assert simulator.env.now == pytest.approx(1e-3 + copy_s, rel=1e-12)
    assert logs[1].seconds == pytest.approx({"compute": 1e-3, "wait": 0.0, "comm": copy_s})
    assert logs[0].seconds["comm"] == pytest.approx(1e-3 + copy_s, rel=1e-12)


def test_an_eager_send_keeps_its_sender_for_the_in_situ_cost_of_its_size():
    """With a program's measured eager Send (``send_cost``: 10 us + 1 ns a byte) in place of
    the hot o, a Send of 4,000 bytes keeps its sender 14 us, charged as comm; its bytes are on
    their way meanwhile, so the receiver has them at the one-way time as before."""
    from twinsgd.calibration.costfit import PiecewiseCost

    n, alpha, beta = 1000, 5e-6, 1e9  # float32: 4,000 bytes

    def program(rank):
        if rank == 0:
            yield Send(dest=1, payload=np.ones(n, np.float32))
        else:
            yield Recv(source=0, buf=np.empty(n, np.float32))

    ends = {}
    for send_cost in (None, PiecewiseCost.constant(10e-6, 1e9)):
        logs = [ChargeLog() for _ in range(2)]
        nodes = [SimpleNamespace(rank=r, size=2, reporter=0) for r in range(2)]
        simulator = Simulator(
            nodes, logs, alpha, beta, ComputeModel(seconds_per_sample=0.0), eager_bytes=4096,
            send_overhead_s=1e-6, send_cost=send_cost,
        )  # fmt: skip
        simulator.run([program(r) for r in range(2)])
        ends[send_cost is None] = (logs[0].seconds["comm"], logs[1].seconds)
    assert ends[True][0] == pytest.approx(1e-6, rel=1e-12)  # the hot o
    assert ends[False][0] == pytest.approx(10e-6 + 4000 / 1e9, rel=1e-12)
    assert ends[False][1] == ends[True][1]  # the receiver's time: the same


@pytest.mark.parametrize("ranks_per_host", [1, 2])
def test_a_buffered_send_through_shared_memory_waits_for_its_own_half_of_the_copy(
    ranks_per_host,
):
    """A Bsend past the eager limit returns at once between hosts (a NIC moves its bytes); two
    ranks of one host copy a message through their memory with their own CPUs, so there the
    sender goes on once its bytes have left: n / (the memory's bandwidth) later, as comm."""
    from sim.network import MemoryPath, make_network

    memory, n = MemoryPath(1e-6, 4e9, 2), 100_000

    def program(rank):
        if rank == 0:
            yield Send(dest=1, payload=np.ones(n, np.float32), buffered=True)
        else:
            yield Recv(source=0, buf=np.empty(n, np.float32))

    network = make_network(None, "star", 2, 5e-6, 1e9, ranks_per_host=ranks_per_host, memory=memory)
    logs = [ChargeLog() for _ in range(2)]
    nodes = [SimpleNamespace(rank=r, size=2, reporter=0) for r in range(2)]
    simulator = Simulator(
        nodes, logs, 5e-6, 1e9, ComputeModel(seconds_per_sample=0.0), network=network,
        eager_bytes=4096, send_overhead_s=1e-6,
    )  # fmt: skip
    simulator.run([program(r) for r in range(2)])
    own_half_s = 4 * n / memory.bandwidth_Bps if ranks_per_host == 2 else 1e-6  # else LogP's o
    assert logs[0].seconds["comm"] == pytest.approx(own_half_s, rel=1e-12)
