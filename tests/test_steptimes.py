"""Step times measured in a real run: the distribution, read from run folders, drawn by the
simulator (``--compute empirical``), and the measured network cost models per message pattern."""

import csv
import json
import math
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.backend import Simulator
from sim.cluster_profile import load_profile
from sim.compute import ComputeModel
from tests.programs import ping_pong
from twinsgd.calibration.costfit import PiecewiseCost
from twinsgd.calibration.steptimes import GRID, StepTimes, read_run_steps, step_times_from_run
from twinsgd.programs.ops import Allreduce, Recv, Send, SendRecv
from twinsgd.run.runlog import Charges

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "TWINSGD_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


# ---------------------------------------------------------------------------- the distribution
def test_quantiles_of_known_samples_and_interpolation():
    times = StepTimes.from_samples(np.arange(1, 102) * 1e-3, batch_size=32)  # 1 .. 101 ms
    assert times.quantiles_s[0] == 1e-3 and times.quantiles_s[-1] == pytest.approx(0.101)
    assert times.median_s == pytest.approx(0.051)
    assert times.seconds_at(0.505) == pytest.approx(0.0515)
    assert times.mean_s == pytest.approx(0.051)
    assert times.steps == 101 and times.batch_size == 32


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(1e-5, 1.0), min_size=1, max_size=300), st.integers(0, 2**31))
def test_draws_stay_within_the_measured_range(samples, seed):
    times = StepTimes.from_samples(samples, batch_size=1)
    rng = np.random.default_rng(seed)
    draws = [times.draw(rng) for _ in range(50)]
    assert min(samples) * (1 - 1e-12) <= min(draws) and max(draws) <= max(samples) * (1 + 1e-12)


def test_many_draws_have_the_samples_mean_and_quantiles():
    rng = np.random.default_rng(0)
    samples = rng.lognormal(np.log(2.5e-3), 0.2, 5000)
    times = StepTimes.from_samples(samples, batch_size=100)
    draws = np.array([times.draw(rng) for _ in range(20000)])
    assert draws.mean() == pytest.approx(samples.mean(), rel=0.01)
    for p in (0.05, 0.5, 0.95):
        assert np.quantile(draws, p) == pytest.approx(np.quantile(samples, p), rel=0.02)


def test_round_trip_through_a_profile_table():
    times = StepTimes.from_samples(
        [2e-3, 3e-3, 2.5e-3], batch_size=100, ranks=2, cores=2, model="mlp", source="here"
    )
    again = StepTimes.from_dict(times.to_dict(), "mlp")
    assert again.batch_size == 100 and (again.ranks, again.cores) == (2, 2)
    np.testing.assert_allclose(again.quantiles_s, times.quantiles_s, rtol=1e-5)


@pytest.mark.parametrize(
    ("document", "match"),
    [
        ({"batch_size": 1, "steps": 1}, "needs 'quantiles_s'"),
        ({"quantiles_s": [1.0] * 3, "batch_size": 1, "steps": 1}, "101 values"),
        ({"quantiles_s": [1.0] * 100 + [0.5], "batch_size": 1, "steps": 1}, "non-decreasing"),
        ({"quantiles_s": [math.nan] * 101, "batch_size": 1, "steps": 1}, "finite"),
        ({"quantiles_s": [1.0] * 101, "batch_size": 0, "steps": 1}, "batch_size"),
    ],
)
def test_a_bad_table_is_one_line_naming_the_table(document, match):
    with pytest.raises(ValueError, match=match):
        StepTimes.from_dict(document, "mlp")


@pytest.mark.parametrize(
    ("measured", "now", "slowdown"),
    [
        ((2, 2), (2, 2), 1.0),
        ((2, 2), (4, 2), 2.0),
        ((2, 2), (3, 2), 1.5),
        ((4, 2), (2, 2), 0.5),
        ((2, 0), (16, 2), 8.0),
        ((2, 2), (16, 0), 1.0),
    ],
)
def test_core_slowdown_is_relative_to_the_sharing_measured(measured, now, slowdown):
    times = StepTimes.from_samples([1e-3], batch_size=1, ranks=measured[0], cores=measured[1])
    assert times.core_slowdown(*now) == pytest.approx(slowdown)


# ---------------------------------------------------------------------------- from run folders
def _run_folder(path, per_rank, batch_size=50, model="mlp", machine_cores=2):
    """A run folder with steps.csv rows of the given compute seconds per rank."""
    path.mkdir(parents=True)
    config = {
        "config": {"batch_size": batch_size, "model": model, "algorithm": "allreduce"},
        "nodes": len(per_rank),
        "machine_cores": machine_cores,
    }
    (path / "config.json").write_text(json.dumps(config))
    with open(path / "steps.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["rank", "epoch", "iteration", "compute_s"])
        for rank, seconds in enumerate(per_rank):
            for i, s in enumerate(seconds, 1):
                writer.writerow([rank, 0, i, s])
    return path


def test_run_steps_drop_each_ranks_warm_up_and_idle_ranks(tmp_path):
    run = _run_folder(tmp_path / "run", [[9.0, 8.0, 1.0, 2.0], [7.0, 6.0, 3.0], [0, 0, 0, 0]])
    seconds, _ = read_run_steps(run)
    assert sorted(seconds) == [1.0, 2.0, 3.0]


def test_step_times_of_a_run_carry_its_batch_model_ranks_and_cores(tmp_path):
    run = _run_folder(tmp_path / "run", [[1, 1, 2e-3, 4e-3], [1, 1, 3e-3]], batch_size=64)
    times = step_times_from_run(run)
    assert (times.batch_size, times.model, times.ranks, times.cores) == (64, "mlp", 2, 2)
    assert times.median_s == pytest.approx(3e-3) and times.steps == 3


def test_a_folder_that_is_not_a_run_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="not a readable run folder"):
        read_run_steps(tmp_path)


# ---------------------------------------------------------------------------- in the simulator
def _profile(
    path,
    step_s,
    batch_size=100,
    ranks=2,
    cores=2,
    one_machine=True,
    costs=None,
    hot_loop=None,
    tick_s=None,
):
    """A profile holding constant step times ``step_s`` for the MLP (and cost models, and the
    hot loop's fit: (seconds per step, seconds per sample); and the scheduler's tick)."""
    times = StepTimes.from_samples(
        [step_s], batch_size=batch_size, ranks=ranks, cores=cores, model="mlp"
    )
    document = {
        "cluster": {"name": "test", "calibrated": True, "cores": cores, "one_machine": one_machine},
        "network": {
            "topology": "star",
            "latency": "5us",
            "bandwidth": "1GB/s",
            **{k: v.to_dict() for k, v in (costs or {}).items()},
        },
        "compute": {"steps": {"mlp": times.to_dict()}},
    }
    if tick_s is not None:
        document["cluster"]["time_slice_s"] = tick_s
    if hot_loop is not None:
        document["compute"]["seconds_per_step"] = {"mlp": hot_loop[0]}
        document["compute"]["seconds_per_sample"] = {"mlp": hot_loop[1]}
    path.write_text(tomli_w.dumps(document))
    return path


def _sim_run(tmp_path, *argv):
    out = tmp_path / "sim"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim.run",
            "--dataset",
            "synthetic",
            "--no-progress",
            "--out",
            str(out),
            *argv,
        ],
        cwd=ROOT,
        env=ENV,
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return json.loads((out / "summary.json").read_text()), out


def _empirical_step_s(tmp_path, profile, nodes, batch, collectives="message"):
    """Compute seconds per iteration of 10 allreduce steps simulated with ``--compute
    empirical`` on ``profile``."""
    summary, _ = _sim_run(
        tmp_path,
        *("--nodes", str(nodes), "--algorithm", "allreduce", "--iterations", "10"),
        *("--batch-size", str(batch), "--profile", str(profile), "--compute", "empirical"),
        *("--collectives", collectives),
    )
    return summary["compute_s"] / summary["iterations"]


@pytest.mark.parametrize(
    ("nodes", "collectives", "share"), [(2, "message", 1.0), (4, "closed-form", 0.5)]
)
def test_empirical_compute_charges_the_measured_step_scaled_by_batch_and_cores(
    tmp_path, nodes, collectives, share
):
    """Constant measured steps of 3 ms per 100 samples: a batch of 50 costs 1.5 ms on 2 nodes
    of 2 cores; where ranks do not take turns on the cores (the closed forms), twice that when
    4 nodes share the 2 cores."""
    profile = _profile(tmp_path / "p.toml", 3e-3)
    assert _empirical_step_s(tmp_path, profile, nodes, 50, collectives) == pytest.approx(
        1.5e-3 / share, rel=1e-9
    )


def test_four_ranks_on_two_cores_take_turns(tmp_path):
    """Message level, 4 ranks on the 2 cores of a one-machine profile: each computes its own
    1.5 ms a step (the scheduler's ticks 1 s apart: never preempted), and two cores do four
    steps' work, so an iteration lasts at least 3 ms; the turns waited for are in comm, as in
    a real rank's MPI call."""
    profile = _profile(tmp_path / "p.toml", 3e-3, tick_s=1.0)
    summary, out = _sim_run(
        tmp_path,
        *("--nodes", "4", "--algorithm", "allreduce", "--iterations", "10"),
        *("--batch-size", "50", "--profile", str(profile), "--compute", "empirical"),
    )
    per_iteration = {k: summary[k] / summary["iterations"] for k in ("compute_s", "comm_s")}
    assert per_iteration["compute_s"] == pytest.approx(1.5e-3, rel=1e-9)
    assert summary["time_s"] / summary["iterations"] >= 2 * 1.5e-3
    assert per_iteration["comm_s"] >= 1.5e-3 / 2  # half the ranks wait a step for a core
    cluster = json.loads((out / "config.json").read_text())["cluster"]
    assert cluster["shared_cores"] == [{"ranks": 4, "cores": 2}]


@pytest.mark.parametrize("batch", [25, 50, 200])
@pytest.mark.parametrize("in_run", [1.0, 2.0])
def test_empirical_step_times_move_to_another_batch_by_the_hot_loops_fit(tmp_path, batch, in_run):
    """A hot loop of 2 ms + 10 us a sample (3 ms at batch 100), and steps measured in the run at
    ``in_run`` times that: a batch of b costs in_run x (2 ms + b x 10 us), not b/100 of the
    measured step."""
    profile = _profile(tmp_path / "p.toml", in_run * 3e-3, hot_loop=(2e-3, 1e-5))
    expected = in_run * (2e-3 + batch * 1e-5)
    assert _empirical_step_s(tmp_path, profile, 2, batch) == pytest.approx(expected, rel=1e-9)


def test_empirical_compute_without_step_times_names_the_table(tmp_path):
    profile = tmp_path / "p.toml"
    profile.write_text('[cluster]\nname = "x"\n[compute]\nflops_per_s = 1e9\n')
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim.run",
            "--dataset",
            "synthetic",
            "--nodes",
            "2",
            "--algorithm",
            "allreduce",
            "--profile",
            str(profile),
            "--compute",
            "empirical",
            "--out",
            str(tmp_path / "o"),
        ],
        cwd=ROOT,
        env=ENV,
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "[compute.steps.mlp]" in done.stderr


# ---------------------------------------------------------------------------- measured costs
ONEWAY = PiecewiseCost(
    min_bytes=(0.0, 65536.0),
    max_bytes=(65536.0, math.inf),
    latency_s=(10e-6, 300e-6),
    bandwidth_Bps=(1e9, 125e6),
    latency_ci_s=((math.nan, math.nan),) * 2,
    bandwidth_ci_Bps=((math.nan, math.nan),) * 2,
    max_rel_residual=(math.nan, math.nan),
)
SENDRECV = PiecewiseCost.constant(20e-6, 119e6)


class _Log(Charges):
    def charge(self, kind, seconds, bytes_sent=0, bytes_recv=0):
        pass


def _simulate(size, program, costs):
    nodes = [SimpleNamespace(rank=r, size=size, reporter=0) for r in range(size)]
    sim = Simulator(
        nodes, [_Log() for _ in nodes], 5e-6, 1e9, ComputeModel(seconds_per_sample=0.0), costs=costs
    )
    sim.run([program(r) for r in range(size)])
    return sim.env.now


@pytest.mark.parametrize("nbytes", [8, 4096, 65536, 335_360, 4 * 2**20])
def test_a_ping_pong_takes_the_one_way_model_twice(nbytes):
    program = ping_pong(nbytes)
    costs = {"oneway": ONEWAY, "sendrecv": SENDRECV}
    assert _simulate(2, program, costs) == pytest.approx(2 * ONEWAY.seconds(nbytes), rel=1e-12)


@pytest.mark.parametrize("nbytes", [8, 335_360])
def test_a_sendrecv_takes_the_sendrecv_model_once(nbytes):
    def program(rank):
        buf = np.zeros(nbytes // 4, np.float32)
        yield SendRecv(payload=buf, dest=1 - rank, source=1 - rank, buf=np.empty_like(buf))

    costs = {"oneway": ONEWAY, "sendrecv": SENDRECV}
    assert _simulate(2, program, costs) == pytest.approx(SENDRECV.seconds(nbytes), rel=1e-12)


@pytest.mark.parametrize("senders", [1, 3])
def test_an_incast_queues_the_measured_one_way_messages(senders):
    """k senders into one: the last arrives at alpha(n) + k n / beta(n)."""
    nbytes = 1 << 20

    def program(rank):
        buf = np.zeros(nbytes // 4, np.float32)
        if rank == 0:
            for _ in range(senders):
                yield Recv(source=-1, buf=buf)
        else:
            yield Send(dest=0, payload=buf)

    expected = ONEWAY.alpha_s(nbytes) + senders * nbytes / ONEWAY.beta_Bps(nbytes)
    assert _simulate(senders + 1, program, {"oneway": ONEWAY}) == pytest.approx(expected, rel=1e-12)


def test_a_profile_brings_its_cost_models_and_flags_override_them(tmp_path):
    from sim.cluster import network_costs
    from sim.run import build_parser

    profile = load_profile(
        str(_profile(tmp_path / "p.toml", 1e-3, costs={"oneway": ONEWAY, "sendrecv": SENDRECV}))
    )
    assert set(profile.costs) == {"oneway", "sendrecv"}
    assert profile.costs["oneway"].seconds(1 << 20) == ONEWAY.seconds(1 << 20)
    parse = build_parser().parse_known_args
    assert network_costs(parse(["--nodes", "2"])[0], profile) == profile.costs
    assert network_costs(parse(["--latency", "1us"])[0], profile) == {}
    assert network_costs(parse(["--network", "ring"])[0], profile) == {}
    assert len(GRID) == 101


def test_a_parameter_server_has_its_own_code_timed_under_empirical_compute(tmp_path):
    """The server's update is in no measured step: it is timed in process (> 0), while each
    worker's step is the measured one, exactly (the scheduler's ticks 1 s apart: no turn ends
    within a step)."""
    profile = _profile(tmp_path / "p.toml", 3e-3, tick_s=1.0)
    _, out = _sim_run(
        tmp_path,
        "--nodes",
        "3",
        "--algorithm",
        "ps",
        "--iterations",
        "5",
        "--profile",
        str(profile),
        "--compute",
        "empirical",
    )
    with open(out / "steps.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    server = [float(r["compute_s"]) for r in rows if r["rank"] == "0"]
    workers = [float(r["compute_s"]) for r in rows if r["rank"] != "0"]
    assert len(server) == 5 and all(s > 0 for s in server)
    # 3 ranks on 2 cores take turns: each computes its own step, its waits for a core in comm
    assert workers == pytest.approx([3e-3] * 10, rel=1e-9)


def _timeline(path, per_rank):
    """A timeline.json with Compute events of the given seconds per rank (and own code)."""
    events = [
        {
            "name": name,
            "cat": "compute",
            "ph": "X",
            "pid": 0,
            "tid": rank,
            "ts": 0.0,
            "dur": seconds * 1e6,
        }
        for rank, durations in enumerate(per_rank)
        for s in durations
        for name, seconds in (("compute", s), ("local", s / 2))
    ]
    (path / "timeline.json").write_text(json.dumps({"traceEvents": events}))


def test_a_real_runs_timeline_gives_the_gradients_alone(tmp_path):
    run = _run_folder(tmp_path / "run", [[9, 9, 3e-3, 3e-3], [9, 9, 3e-3]])
    _timeline(run, [[5.0, 5.0, 1e-3, 2e-3], [5.0, 5.0, 3e-3]])
    times = step_times_from_run(run)
    assert not times.own_code and times.steps == 3
    assert times.median_s == pytest.approx(2e-3)
    assert StepTimes.from_dict(times.to_dict(), "mlp").own_code is False


def test_gradients_alone_leave_each_programs_own_code_to_be_timed(tmp_path):
    """Measured gradients of 3 ms: a step costs them plus the program's own code (the update),
    timed in process: more than 3 ms, less than 3 ms plus a generous 20 ms."""
    times = StepTimes.from_samples(
        [3e-3], batch_size=100, ranks=2, cores=2, model="mlp", own_code=False
    )
    path = tmp_path / "p.toml"
    path.write_text(
        tomli_w.dumps(
            {
                "cluster": {"name": "t", "cores": 2, "one_machine": True},
                "compute": {"steps": {"mlp": times.to_dict()}},
            }
        )
    )
    summary, _ = _sim_run(
        tmp_path,
        "--nodes",
        "2",
        "--algorithm",
        "allreduce",
        "--iterations",
        "10",
        "--profile",
        str(path),
        "--compute",
        "empirical",
    )
    per_step = summary["compute_s"] / summary["iterations"]
    assert 3e-3 < per_step < 23e-3


@pytest.mark.parametrize(
    ("nodes", "one_machine", "slowdown", "cores"),
    [
        (2, True, 1.0, None),
        (4, True, 2.0, None),
        (8, True, 4.0, None),
        (8, False, 1.0, None),
        (8, True, 1.0, 8),
        (8, True, 2.0, 4),
    ],
)
def test_measured_network_costs_slow_when_more_ranks_share_the_cores(
    tmp_path, nodes, one_machine, slowdown, cores
):
    """Calibrated with 2 ranks on 2 cores: 4 ranks on them get half a core each, for moving
    bytes as for computing (MPICH's blocking calls spin); ``--cores-per-host`` says how many
    cores this run's ranks have, as it does for their compute."""
    from sim.cluster import network_slowdown
    from sim.run import build_parser

    profile = load_profile(
        str(
            _profile(
                tmp_path / "p.toml",
                1e-3,
                one_machine=one_machine,
                costs={"oneway": ONEWAY, "sendrecv": SENDRECV},
            )
        )
    )
    argv = ["--nodes", str(nodes), *(["--cores-per-host", str(cores)] if cores else [])]
    cluster = build_parser().parse_known_args(argv)[0]
    assert network_slowdown(cluster, profile) == slowdown
    slowed = profile.slowed_costs(slowdown)["sendrecv"]
    assert slowed.alpha_s(8) == pytest.approx(SENDRECV.alpha_s(8) * slowdown)
    assert slowed.beta_Bps(8) == pytest.approx(SENDRECV.beta_Bps(8) / slowdown)


@pytest.mark.parametrize(
    ("one_machine", "flags", "expected"),
    [(True, [], 3), (False, [], None), (True, ["--latency", "5us"], None)],
)
def test_a_one_machines_memory_copies_bound_its_ranks_messages(
    tmp_path, one_machine, flags, expected
):
    """``[cluster] memory_copies = 2.6``: the ranks of one machine, charged its measured
    costs, move 3 copies at once; a profile of many machines, or costs given by flags, none."""
    from sim.cluster import build_cluster
    from sim.run import build_parser

    path = _profile(tmp_path / "p.toml", 1e-3, one_machine=one_machine, costs={"oneway": ONEWAY})
    path.write_text(path.read_text().replace("[cluster]\n", "[cluster]\nmemory_copies = 2.6\n"))
    profile = load_profile(str(path))
    assert profile.memory_copies == 2.6
    options = build_parser().parse_known_args(["--nodes", "4", *flags])[0]
    cluster = build_cluster(options, profile, None, "mlp")
    assert cluster.machine_copies == expected
    assert cluster.make_network().machine_copies == expected


def test_an_old_profiles_solo_own_code_is_not_read():
    """``own_solo_s``, measured a third too short before 2026-12-05, is not read as the own
    code alone; ``own_alone_s`` is, and goes back into a profile as it came."""
    times = StepTimes.from_samples([1e-3], batch_size=100, own_code=False, own_s=4.8e-4)
    old = {**times.to_dict(), "own_solo_s": 1.26e-4}
    assert StepTimes.from_dict(old, "mlp").own_alone_s == 0.0
    new = {**times.to_dict(), "own_alone_s": 3.77e-4}
    assert StepTimes.from_dict(new, "mlp").to_dict()["own_alone_s"] == 3.77e-4


def test_the_own_code_alone_is_per_step_of_its_own_run():
    """`real.calibrate`'s own code alone, a mean per step of the run that timed it: a run of
    12 steps and one of 36 give about the same (it was divided by the calibration's steps
    where a third of them ran: 36 steps over 108 read as a third of 12 over 12)."""
    from real.calibrate import _own_code_alone
    from twinsgd.data import load_dataset

    dataset = load_dataset("synthetic", None, allow_download=False)

    def alone(steps):
        argv = [
            *("--algorithm", "allreduce", "--model", "mlp", "--dataset", "synthetic"),
            *("--batch-size", "32", "--iterations", str(steps), "--eval-every", str(steps)),
            "--no-progress",
        ]
        return _own_code_alone(argv, dataset)

    short, long = alone(12), alone(36)
    assert short > 0 and long > 0
    assert 0.5 < long / short < 2.0


def test_bytes_moved_by_an_operation():
    from sim.backend import COLD_BYTES, _bytes_moved
    from twinsgd.programs.ops import Allreduce, Exchange

    big, small = np.zeros(2**15, np.float32), np.zeros(8, np.float32)
    assert _bytes_moved(Allreduce(buf=big, op="mean")) == big.nbytes >= COLD_BYTES
    assert _bytes_moved(Send(dest=1, payload=small)) == 32 < COLD_BYTES
    assert _bytes_moved(Recv(source=1, buf=big)) == big.nbytes
    assert _bytes_moved(Exchange({1: big, 2: big}, {1: None, 2: None})) == 2 * big.nbytes


@pytest.mark.parametrize("size", [2, 4, 5])
def test_closed_form_rings_honour_the_measured_sendrecv_model(size):
    """A calibrated profile's Sendrecv model prices the closed form's ring steps as it prices
    each message-level step: the two agree to 1e-9 (p divides n)."""
    n = 20_000 * size
    sendrecv = PiecewiseCost(
        min_bytes=(0.0, 65536.0),
        max_bytes=(65536.0, math.inf),
        latency_s=(15e-6, 200e-6),
        bandwidth_Bps=(800e6, 119e6),
        latency_ci_s=((math.nan, math.nan), (math.nan, math.nan)),
        bandwidth_ci_Bps=((math.nan, math.nan), (math.nan, math.nan)),
        max_rel_residual=(math.nan, math.nan),
    )
    costs = {"oneway": ONEWAY, "sendrecv": sendrecv}

    def program(rank):
        yield Allreduce(np.ones(n, np.float32), op="sum", algo="ring")

    times = {}
    for collectives in ("message", "closed-form"):
        nodes = [SimpleNamespace(rank=r, size=size, reporter=0) for r in range(size)]
        sim = Simulator(
            nodes,
            [_Log() for _ in nodes],
            5e-6,
            1e9,
            ComputeModel(seconds_per_sample=0.0),
            collectives,
            costs=costs,
        )
        sim.run([program(r) for r in range(size)])
        times[collectives] = sim.env.now
    chunk = 4 * n // size
    expected = 2 * (size - 1) * sendrecv.seconds(chunk)
    assert times["closed-form"] == pytest.approx(expected, rel=1e-9)
    assert times["message"] == pytest.approx(expected, rel=1e-9)


def test_closed_form_refuses_token_buckets_in_one_line(tmp_path):
    profile = _profile(tmp_path / "p.toml", 1e-3, costs={"oneway": ONEWAY, "sendrecv": SENDRECV})
    text = (
        profile.read_text()
        + "\n[network.shaper]\nrates_Bps = [1.25e8]\nbursts_bytes = [125000.0]\n"
    )
    profile.write_text(text)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim.run",
            "--profile",
            str(profile),
            "--dataset",
            "synthetic",
            "--collectives",
            "closed-form",
            "--out",
            str(tmp_path / "sim"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "token-bucket" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("timed_on", "key"), [([32, 32, 3], "input_shape"), ("cifar10", "dataset")]
)
def test_steps_timed_on_other_images_are_refused_in_one_line(tmp_path, timed_on, key):
    """A cnn's step on CIFAR's 32x32x3 is not its step on 28x28x1 (notebooks 2 and 3 once
    predicted CIFAR runs from steps timed on the bundled MNIST): a profile that says what it
    timed on (its shape, or a data set's name where an older profile has no shape) is refused
    for a run on images of another shape, and taken for one on the same."""
    profile = _profile(tmp_path / "p.toml", 3e-3)
    document = tomllib.loads(profile.read_text())
    document["compute"][key] = timed_on
    profile.write_text(tomli_w.dumps(document))
    argv = ["--nodes", "2", "--algorithm", "allreduce", "--iterations", "2", "--profile"]
    done = subprocess.run(
        [sys.executable, "-m", "sim.run", "--dataset", "synthetic", "--no-progress", *argv,
         str(profile), "--compute", "empirical", "--out", str(tmp_path / "o")],
        cwd=ROOT, env=ENV, timeout=60, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "timed mlp on 32x32x3 images, this run's are 28x28x1" in done.stderr
    document["compute"][key] = [28, 28, 1] if key == "input_shape" else "mnist-subset"
    profile.write_text(tomli_w.dumps(document))
    summary, _ = _sim_run(tmp_path, *argv, str(profile), "--compute", "empirical")
    assert summary["compute_s"] / summary["iterations"] == pytest.approx(3e-3, rel=1e-9)
