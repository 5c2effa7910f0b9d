"""--fail NODE@TIME: synchronous runs stop with exit 3 and say why; an async server goes on."""

import csv
import json
from types import SimpleNamespace

import pytest

from sim import run
from sim.backend import Simulator
from sim.compute import ComputeModel
from tests.programs import faults_file
from twinsgd.programs.ops import Recv


def _run(tmp_path, argv, profile_s=1e-3):
    """sim.run in this process on the bundled subset, compute b * profile_s; (status, folder)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    profile = tmp_path / "profile.toml"
    profile.write_text(f"[compute]\nseconds_per_sample = {profile_s}\n")
    out = tmp_path / "run"
    status = run.main(
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
            "--latency",
            "1us",
            *argv,
            "--out",
            str(out),
        ]
    )
    return status, out


def _read(out):
    with open(out / "steps.csv") as fh:
        steps = list(csv.DictReader(fh))
    return (
        json.loads((out / "config.json").read_text()),
        json.loads((out / "summary.json").read_text()),
        steps,
    )


@pytest.mark.parametrize(
    "algorithm",
    [
        ["--algorithm", "allreduce"],
        ["--algorithm", "ps"],
        ["--algorithm", "gossip", "--topology", "ring"],
    ],
)
def test_a_failure_stops_a_synchronous_run_with_exit_3(tmp_path, capsys, algorithm):
    # A step computes 10 samples at 1 ms each, plus its communication: node 2 fails in step 3 or 4.
    status, out = _run(
        tmp_path, ["--nodes", "4", *algorithm, "--iterations", "20", "--fail", "2@35ms"]
    )
    assert status == 3
    config, summary, steps = _read(out)
    assert config["status"] == summary["status"] == "failed: rank 2 killed at 0.035 s"
    mine = [row for row in steps if row["rank"] == "2"]
    assert 2 <= len(mine) <= 3 and float(mine[-1]["time_s"]) <= 0.035
    assert max(int(row["iteration"]) for row in steps) <= len(mine) + 1  # the others stop too
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rank 2 killed at 0.035 s" in err[0]


def test_an_asynchronous_server_goes_on_without_a_failed_worker(tmp_path):
    iterations = 20
    status, out = _run(
        tmp_path,
        [
            "--nodes",
            "4",
            "--algorithm",
            "ps",
            "--mode",
            "async",
            "--iterations",
            str(iterations),
            "--fail",
            "2@35ms",
        ],
    )
    assert status == 0
    config, summary, steps = _read(out)
    assert config["status"] == summary["status"] == "done"
    assert config["failed"] == [{"rank": 2, "time_s": 0.035, "why": "rank 2 killed at 0.035 s"}]
    pushes = {
        r: max(int(row["iteration"]) for row in steps if row["rank"] == str(r)) for r in (1, 2, 3)
    }
    assert pushes == {1: iterations, 2: 3, 3: iterations}  # node 2's 4th push never came
    server_updates = max(int(row["iteration"]) for row in steps if row["rank"] == "0")
    assert server_updates == 2 * iterations + 3
    with open(out / "metrics.csv") as fh:
        last = list(csv.DictReader(fh))[-1]
    assert int(last["iteration"]) == server_updates and float(last["test_accuracy"]) > 0.1


def test_a_failure_after_the_end_changes_nothing(tmp_path):
    status, out = _run(
        tmp_path,
        ["--nodes", "3", "--algorithm", "allreduce", "--iterations", "5", "--fail", "1@10s"],
    )
    assert status == 0 and _read(out)[0]["status"] == "done"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("2", "--fail expects NODE@TIME"),
        ("x@1s", "--fail expects NODE@TIME"),
        ("9@1s", "--fail: fault of rank 9, but the run has ranks 0..3"),
        ("1@soon", "--fail 1@soon: time: cannot read 'soon'"),
    ],
)
def test_bad_fail_input_is_one_line_and_exit_2(tmp_path, capsys, spec, message):
    with pytest.raises(SystemExit) as stop:
        _run(tmp_path, ["--nodes", "4", "--algorithm", "allreduce", "--fail", spec])
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_a_program_that_waits_forever_without_a_failure_is_a_bug():
    nodes = [SimpleNamespace(rank=r, size=2, reporter=0) for r in range(2)]
    logs = [SimpleNamespace(charge=lambda *a, **k: None) for _ in range(2)]

    def program(rank):
        yield Recv(source=1 - rank, tag=0)  # both receive, nobody sends

    sim = Simulator(nodes, logs, 1e-6, 1e9, ComputeModel(seconds_per_sample=0.0))
    with pytest.raises(RuntimeError, match="wait forever"):
        sim.run([program(0), program(1)])


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        ("exception", "failed: rank 2 raised an injected exception at step 6"),
        ("kill", "failed: rank 2 killed at step 6"),
    ],
)
def test_the_real_runs_fault_schedule_stops_a_synchronous_run_the_same_way(
    tmp_path, capsys, kind, status
):
    """The schedule and the status of tests/test_mpi's fault test, simulated."""
    faults = faults_file(tmp_path, {"rank": 2, "step": 6, "kind": kind})
    code, out = _run(
        tmp_path,
        [
            "--nodes",
            "3",
            "--algorithm",
            "allreduce",
            "--iterations",
            "1000",
            "--faults",
            faults,
            "--eval-every",
            "2",
        ],
    )
    assert code == 3
    config, summary, steps = _read(out)
    assert config["status"] == summary["status"] == status
    assert max(int(r["iteration"]) for r in steps if r["rank"] == "2") == 5
    assert max(int(r["iteration"]) for r in steps) <= 6
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and status.removeprefix("failed: ") in err[0]


def test_a_scheduled_exception_at_a_time_stops_the_run(tmp_path):
    faults = faults_file(tmp_path, {"rank": 1, "time": "35ms", "kind": "exception"})
    code, out = _run(
        tmp_path,
        ["--nodes", "3", "--algorithm", "allreduce", "--iterations", "20", "--faults", faults],
    )
    assert code == 3
    assert _read(out)[0]["status"] == "failed: rank 1 raised an injected exception at 0.035 s"


def test_a_slow_fault_shows_as_the_others_wait_by_the_formula(tmp_path):
    """Rank 1 computes F times as long for S steps: every step of a synchronous run waits for it,
    so the run takes S (F - 1) c longer (c: a step's compute, 10 samples at 1 ms), and that time
    is wait on each other node; less at most a latency (1 us) a step: the ring's first message
    to the slow node travels while it computes."""
    factor, slow_steps, c = 5.0, 3, 10 * 1e-3
    argv = ["--nodes", "4", "--algorithm", "allreduce", "--iterations", "10"]
    _, plain = _run(tmp_path / "plain", argv)
    faults = faults_file(
        tmp_path, {"rank": 1, "step": 4, "kind": "slow", "factor": factor, "steps": slow_steps}
    )
    code, slowed = _run(tmp_path / "slowed", [*argv, "--faults", faults])
    assert code == 0
    (_, before, _), (_, after, _) = _read(plain), _read(slowed)
    extra = slow_steps * (factor - 1) * c
    assert extra - slow_steps * 1e-6 <= after["time_s"] - before["time_s"] <= extra
    for rank in (0, 2, 3):  # each other node's time is the same, and nearly all of it is wait
        busy = [
            r["per_node"]["wait_s"][rank] + r["per_node"]["comm_s"][rank] for r in (before, after)
        ]
        assert extra - slow_steps * 2e-6 <= busy[1] - busy[0] <= extra + 1e-12  # 2 latencies
        wait = [r["per_node"]["wait_s"][rank] for r in (before, after)]
        assert wait[1] - wait[0] == pytest.approx(extra, rel=1e-3)
    own_wait = [r["per_node"]["wait_s"][1] for r in (before, after)]
    assert own_wait[1] - own_wait[0] < 1e-3 * extra  # the slow node itself hardly waits


@pytest.mark.parametrize("bound", [1, 3])
def test_ssp_goes_on_without_a_killed_worker_and_keeps_its_bound(tmp_path, bound):
    iterations = 15
    faults = faults_file(tmp_path, {"rank": 2, "step": 5, "kind": "kill"})
    code, out = _run(
        tmp_path,
        [
            "--nodes",
            "4",
            "--algorithm",
            "ps",
            "--mode",
            "ssp",
            "--staleness",
            str(bound),
            "--iterations",
            str(iterations),
            "--faults",
            faults,
        ],
    )
    assert code == 0
    config, summary, steps = _read(out)
    assert config["status"] == summary["status"] == "done"
    assert [f["why"] for f in config["failed"]] == ["rank 2 killed at step 5"]
    server = [r for r in steps if r["rank"] == "0"]
    assert [int(r["iteration"]) for r in server] == list(range(1, iterations + 1))
    assert max(int(r["staleness"]) for r in server) <= bound
    pushes = {w: sum(r["rank"] == str(w) for r in steps) for w in (1, 2, 3)}
    assert pushes == {1: iterations, 2: 4, 3: iterations}


def test_async_ps_goes_on_without_a_worker_killed_at_a_step(tmp_path):
    faults = faults_file(tmp_path, {"rank": 3, "step": 2, "kind": "kill"})
    code, out = _run(
        tmp_path,
        [
            "--nodes",
            "4",
            "--algorithm",
            "ps",
            "--mode",
            "async",
            "--iterations",
            "10",
            "--faults",
            faults,
        ],
    )
    assert code == 0
    config, _, steps = _read(out)
    assert config["failed"][0]["why"] == "rank 3 killed at step 2"
    assert sum(r["rank"] == "3" for r in steps) == 1
    assert max(int(r["iteration"]) for r in steps if r["rank"] == "0") == 2 * 10 + 1


def _weights(folder):
    import numpy as np

    with np.load(folder / "model.npz") as npz:
        return {k: npz[k] for k in npz.files}


@pytest.mark.parametrize(
    ("servers", "killed"),
    [
        (1, [{"rank": 0, "step": 5, "kind": "kill"}]),  # the primary, at a step
        (1, [{"rank": 1, "time": "33ms", "kind": "kill"}]),  # the replica, mid-step
        (2, [{"rank": 1, "step": 3, "kind": "kill"}, {"rank": 2, "step": 7, "kind": "kill"}]),
    ],
)
def test_replicated_servers_lose_no_update_when_one_is_killed(tmp_path, servers, killed):
    """--replicas 2: shard s on ranks s and s+K. Killing one replica of each shard leaves the
    weights of a plain synchronous PS (2 workers) bit for bit: no update was lost."""
    common = ["--algorithm", "ps", "--servers", str(servers), "--iterations", "12"]
    plain_status, plain = _run(tmp_path / "plain", ["--nodes", str(servers + 2), *common])
    assert plain_status == 0
    faults = faults_file(tmp_path, *killed)
    status, out = _run(
        tmp_path / "replicated",
        ["--nodes", str(2 * servers + 2), *common, "--replicas", "2", "--faults", faults],
    )
    assert status == 0
    config, summary, steps = _read(out)
    assert config["status"] == summary["status"] == "done"
    assert sorted(f["rank"] for f in config["failed"]) == sorted(k["rank"] for k in killed)
    a, b = _weights(plain), _weights(out)
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    workers = [str(r) for r in range(2 * servers, 2 * servers + 2)]
    assert all(sum(r["rank"] == w for r in steps) == 12 for w in workers)


def test_without_replicas_a_killed_server_stops_the_run(tmp_path):
    faults = faults_file(tmp_path, {"rank": 0, "step": 5, "kind": "kill"})
    status, out = _run(
        tmp_path, ["--nodes", "3", "--algorithm", "ps", "--iterations", "12", "--faults", faults]
    )
    assert status == 3 and _read(out)[0]["status"] == "failed: rank 0 killed at step 5"
