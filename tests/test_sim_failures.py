"""--fail NODE@TIME: synchronous runs stop with exit 3 and say why; an async server goes on."""

import csv
import json
from types import SimpleNamespace

import pytest

from algorithms.ops import Recv
from sim import run
from sim.backend import ComputeModel, Simulator


def _run(tmp_path, argv, profile_s=1e-3):
    """sim.run in this process on the bundled subset, compute b * profile_s; (status, folder)."""
    profile = tmp_path / "profile.toml"
    profile.write_text(f"[compute]\nseconds_per_sample = {profile_s}\n")
    out = tmp_path / "run"
    status = run.main(["--dataset", "mnist-subset", "--no-progress", "--compute", "profile",
                       "--profile", str(profile), "--batch-size", "10", "--latency", "1us",
                       *argv, "--out", str(out)])
    return status, out


def _read(out):
    with open(out / "steps.csv") as fh:
        steps = list(csv.DictReader(fh))
    return (json.loads((out / "config.json").read_text()),
            json.loads((out / "summary.json").read_text()), steps)


@pytest.mark.parametrize("algorithm", [["--algorithm", "allreduce"],
                                       ["--algorithm", "ps"],
                                       ["--algorithm", "gossip", "--topology", "ring"]])
def test_a_failure_stops_a_synchronous_run_with_exit_3(tmp_path, capsys, algorithm):
    # A step computes 10 samples at 1 ms each, plus its communication: node 2 fails in step 3 or 4.
    status, out = _run(tmp_path, ["--nodes", "4", *algorithm, "--iterations", "20",
                                  "--fail", "2@35ms"])
    assert status == 3
    config, summary, steps = _read(out)
    assert config["status"] == summary["status"] == "failed: node 2 at 0.035s"
    mine = [row for row in steps if row["rank"] == "2"]
    assert 2 <= len(mine) <= 3 and float(mine[-1]["time_s"]) <= 0.035
    assert max(int(row["iteration"]) for row in steps) <= len(mine) + 1  # the others stop too
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "node 2 at 0.035s" in err[0]


def test_an_asynchronous_server_goes_on_without_a_failed_worker(tmp_path):
    iterations = 20
    status, out = _run(tmp_path, ["--nodes", "4", "--algorithm", "ps", "--mode", "async",
                                  "--iterations", str(iterations), "--fail", "2@35ms"])
    assert status == 0
    config, summary, steps = _read(out)
    assert config["status"] == summary["status"] == "done"
    assert config["failed"] == [{"node": 2, "time_s": 0.035}]
    pushes = {r: max(int(row["iteration"]) for row in steps if row["rank"] == str(r))
              for r in (1, 2, 3)}
    assert pushes == {1: iterations, 2: 3, 3: iterations}  # node 2's 4th push never came
    server_updates = max(int(row["iteration"]) for row in steps if row["rank"] == "0")
    assert server_updates == 2 * iterations + 3
    with open(out / "metrics.csv") as fh:
        last = list(csv.DictReader(fh))[-1]
    assert int(last["iteration"]) == server_updates and float(last["test_accuracy"]) > 0.1


def test_a_failure_after_the_end_changes_nothing(tmp_path):
    status, out = _run(tmp_path, ["--nodes", "3", "--algorithm", "allreduce", "--iterations",
                                  "5", "--fail", "1@10s"])
    assert status == 0 and _read(out)[0]["status"] == "done"


@pytest.mark.parametrize(("spec", "message"), [
    ("2", "--fail expects NODE@TIME"), ("x@1s", "--fail expects NODE@TIME"),
    ("9@1s", "only nodes 0..3"), ("1@soon", "--latency"),
])
def test_bad_fail_input_is_one_line_and_exit_2(tmp_path, capsys, spec, message):
    with pytest.raises(SystemExit) as stop:
        _run(tmp_path, ["--nodes", "4", "--algorithm", "allreduce", "--fail", spec])
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message.replace("--latency", "") in lines[0], lines


def test_a_program_that_waits_forever_without_a_failure_is_a_bug():
    nodes = [SimpleNamespace(rank=r, size=2, reporter=0) for r in range(2)]
    logs = [SimpleNamespace(charge=lambda *a, **k: None) for _ in range(2)]

    def program(rank):
        yield Recv(source=1 - rank, tag=0)  # both receive, nobody sends

    sim = Simulator(nodes, logs, 1e-6, 1e9, ComputeModel(seconds_per_sample=0.0))
    with pytest.raises(RuntimeError, match="wait forever"):
        sim.run([program(0), program(1)])
