"""twinsgd.analysis.validate: the prediction-error table from run folders, the runner's order of
things (cluster up, calibrate, runs, cluster down), and one real end-to-end run on shared
memory."""

import csv
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from twinsgd.analysis import prediction_table, validate

ROOT = Path(__file__).resolve().parents[1]
ITERATIONS = 1000  # with seconds in quarters, every ms per iteration below is exact in binary


def _run_folder(path, compute_s, comm_s, wait_s, iterations=ITERATIONS):
    """A finished run folder holding only what the table reads."""
    path.mkdir(parents=True)
    summary = {
        "status": "done",
        "iterations": iterations,
        "time_s": compute_s + comm_s + wait_s,
        "compute_s": compute_s,
        "comm_s": comm_s,
        "wait_s": wait_s,
    }
    (path / "summary.json").write_text(json.dumps(summary))
    (path / "config.json").write_text(json.dumps({"status": "done", "clock": "wall"}))


def _cell(root, net, config, hosts, real_times, sim_time, status="ok"):
    """A cell whose runs are all compute: times per iteration in ms (= seconds, at 1000 its)."""
    cell = root / net / f"{config}-{hosts}"
    for k, seconds in enumerate(real_times, start=1):
        _run_folder(cell / f"real-{k}", seconds, 0.0, 0.0)
    _run_folder(cell / "sim", sim_time, 0.0, 0.0)
    (cell / "row.json").write_text(
        json.dumps({"network": net, "config": config, "hosts": hosts, "status": status})
    )
    return cell


def test_row_numbers_are_medians_spread_and_errors_per_iteration(tmp_path):
    reals = [tmp_path / f"real-{k}" for k in (1, 2, 3)]
    for path, parts in zip(
        reals, [(1.0, 0.5, 0.5), (1.0, 0.75, 0.75), (1.25, 0.5, 1.25)], strict=True
    ):
        _run_folder(path, *parts)  # 2.0, 2.5, 3.0 ms per iteration
    _run_folder(tmp_path / "sim", 1.5, 0.25, 1.0)  # 2.75 ms per iteration
    numbers = validate.row_numbers(reals, tmp_path / "sim")
    assert numbers == {
        "repeats": 3,
        "measured_ms": 2.5,
        "sim_ms": 2.75,
        "error_pct": 10.0,  # (2.75 - 2.5) / 2.5
        "spread_pct": 40.0,  # (3.0 - 2.0) / 2.5
        "measured_compute_ms": 1.0,
        "sim_compute_ms": 1.5,
        "compute_error_pct": 50.0,
        "measured_comm_ms": 0.5,
        "sim_comm_ms": 0.25,
        "comm_error_pct": -50.0,
        "measured_wait_ms": 0.75,
        "sim_wait_ms": 1.0,
        "wait_diff_ms": 0.25,
        "measured_p90_ms": None,  # no steps.csv in these folders
        "sim_p90_ms": None,
        "p90_error_pct": None,
    }  # ms, not %
    row = {"network": "shm", "config": "allreduce-ring", "hosts": 2, "status": "ok", **numbers}
    assert validate.table([row]).splitlines()[2] == (
        "| shm | allreduce-ring | 2 | 2.500 | 40.0 | 2.750 | +10.0 | +50.0 | -50.0 | +0.250 "
        "| - | - | - | - |  |"
    )
    phases = [{**row, "phase_held": True}, {**row, "phase_held": False}]
    held, moved = validate.table(phases).splitlines()[2:]
    assert held.endswith("| held |  |") and moved.endswith("| moved |  |")


def _steps_csv(path, step_ms):
    """steps.csv of two ranks whose steps take ``step_ms`` in turn (rank 1 half as long)."""
    rows, clock = [], {0: 0.0, 1: 0.0}
    for i, ms in enumerate(step_ms, start=1):
        for rank, scale in ((0, 1.0), (1, 0.5)):
            clock[rank] += ms * scale / 1e3
            rows.append({"rank": rank, "iteration": i, "time_s": clock[rank]})
    with open(path / "steps.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, ["rank", "iteration", "time_s"])
        writer.writeheader()
        writer.writerows(rows)


def test_the_p90_step_is_over_every_rank_past_the_warm_up(tmp_path):
    """Steps of 1..20 ms on rank 0 and half that on rank 1, the first 5 of each dropped: the
    30 steps left are 6..20 and 3..10 ms; their 90th percentile is numpy's."""
    real, sim = tmp_path / "real-1", tmp_path / "sim"
    _run_folder(real, 1.0, 0.0, 0.0)
    _run_folder(sim, 1.0, 0.0, 0.0)
    _steps_csv(real, range(1, 21))
    _steps_csv(sim, [2 * ms for ms in range(1, 21)])
    expected = float(np.percentile([*range(6, 21), *(ms / 2 for ms in range(6, 21))], 90))
    numbers = validate.row_numbers([real], sim)
    assert numbers["measured_p90_ms"] == pytest.approx(expected, rel=1e-9)
    assert numbers["sim_p90_ms"] == pytest.approx(2 * expected, rel=1e-9)
    assert numbers["p90_error_pct"] == pytest.approx(100.0, rel=1e-9)


def test_a_measured_zero_has_no_error_and_a_missing_run_fails_its_row(tmp_path):
    _run_folder(tmp_path / "real-1", 1.0, 0.0, 0.0)
    _run_folder(tmp_path / "sim", 1.0, 0.25, 0.0)
    numbers = validate.row_numbers([tmp_path / "real-1"], tmp_path / "sim")
    assert numbers["comm_error_pct"] is None and numbers["spread_pct"] == 0.0
    with pytest.raises(ValueError, match="not a run folder"):
        validate.row_numbers([tmp_path / "real-1"], tmp_path / "nowhere")
    cell = _cell(tmp_path, "shm", "ps-sync", 2, [1.0], 1.0)
    (cell / "sim" / "summary.json").unlink()
    row = validate.read_cell(cell)
    assert row["status"].startswith("failed: ") and "not a run folder" in row["status"]
    assert "| - | - |" in validate.table([row])


def _matrix_folder(root):
    """Two networks; |errors| in % at 2 hosts shm 6.25, 12.5, 0 (and a failed row), at 4 hosts
    25, 6.25; 1Gbit at 2 hosts 12.5, 25."""
    _cell(root, "shm", "allreduce-ring", 2, [3.5, 4.0, 4.5], 4.25)  # +6.25 %, spread 25 %
    _cell(root, "shm", "ps-sync", 2, [4.0, 4.0, 4.0], 3.5)  # -12.5 %, spread 0
    _cell(root, "shm", "gossip-ring", 2, [3.0, 4.0, 5.0], 4.0)  # 0 %, spread 50 %
    _cell(root, "shm", "ps-async", 2, [], 4.0, status="failed: sim: boom")
    _cell(root, "shm", "allreduce-ring", 4, [4.0], 5.0)  # +25 %
    _cell(root, "shm", "ps-sync", 4, [4.0], 3.75)  # -6.25 %
    _cell(root, "1Gbit", "allreduce-ring", 2, [3.0, 4.0, 5.0], 4.5)  # +12.5 %, spread 50 %
    _cell(root, "1Gbit", "ps-sync", 2, [3.5, 4.0, 4.5], 3.0)  # -25 %, spread 25 %


def test_summary_and_targets_equal_hand_computed_medians_and_worsts(tmp_path):
    _matrix_folder(tmp_path)
    rows = validate.read_rows(tmp_path)
    assert [(r["network"], r["config"], r["hosts"]) for r in rows] == [
        ("shm", "allreduce-ring", 2),
        ("shm", "allreduce-ring", 4),
        ("shm", "ps-sync", 2),
        ("shm", "ps-sync", 4),
        ("shm", "ps-async", 2),
        ("shm", "gossip-ring", 2),
        ("1Gbit", "allreduce-ring", 2),
        ("1Gbit", "ps-sync", 2),
    ]
    assert [r.get("error_pct") for r in rows] == [6.25, 25.0, -12.5, -6.25, None, 0.0, 12.5, -25.0]
    assert validate.summary(rows) == [
        "shm, 2 hosts (calibrated): median |error| 6.2 %, worst 12.5 % (ps-sync), 3 of 4 rows; "
        "median spread 25.0 %",  # median of 6.25, 12.5, 0; of spreads 25, 0, 50
        "shm, 4 hosts (extrapolated from 2): median |error| 15.6 %, worst 25.0 % "
        "(allreduce-ring), 2 of 2 rows; median spread 0.0 %",  # (25 + 6.25) / 2 = 15.625
        "1Gbit, 2 hosts (calibrated): median |error| 18.8 %, worst 25.0 % (ps-sync), 2 of 2 "
        "rows; median spread 37.5 %",
    ]  # (12.5 + 25) / 2 = 18.75; (50 + 25) / 2
    assert validate.targets(rows) == [
        "shm: median |error| <= 10 %: met (6.2 %)",
        "shm: extrapolation 2 -> 4 hosts, median |error| <= 10 %: missed (15.6 %)",
        "1Gbit: median |error| <= max(5 %, median spread 37.5 %) = 37.5 %: met (18.8 %)",
        "1Gbit: worst |error| <= 15 %: missed (25.0 %)",
    ]
    assert (
        "| shm | ps-async | 2 | - | - | - | - | - | - | - | - | - | - | - | failed: sim: boom |"
        in validate.table(rows).splitlines()
    )


def test_from_rebuilds_the_same_table_and_csv_from_the_folders(tmp_path, capsys):
    _matrix_folder(tmp_path)
    assert validate.main(["--from", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert printed == validate.render(validate.read_rows(tmp_path))
    assert printed == (tmp_path / "validation.md").read_text()
    with open(tmp_path / "validation.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["status"] for r in rows].count("ok") == 7 and len(rows) == 8
    assert (float(rows[0]["measured_ms"]), float(rows[0]["error_pct"])) == (4.0, 6.25)
    assert (rows[1]["extrapolated"], rows[0]["extrapolated"]) == ("True", "False")
    assert validate.main(["--from", str(tmp_path)]) == 0
    assert capsys.readouterr().out == printed  # re-rendered, the same
    own = (tmp_path / "own-code.md").read_text()  # a heading a cell that ran, no timelines here
    assert own.count("\n## ") == 7 and own.count("timeline.json: not a timeline") == 7


# -- the runner, with its subprocesses faked -----------------------------------------------------


class FakeCalls:
    """Stands in for `validate._call`: records each command but the machine's phase probes
    (`real.phase`, answered as failed: no probe); answers by a rule on the command."""

    def __init__(self, answer):
        self.commands, self.answer, self.probes = [], answer, 0

    def __call__(self, argv, timeout_s, log):
        assert timeout_s > 0
        if "real.phase" in argv:
            self.probes += 1
            return 1, "no probe here"
        self.commands.append(argv)
        return self.answer(argv)

    def modules(self):
        return [" ".join(a[a.index("-m") + 1 : a.index("-m") + 3]) for a in self.commands]


def test_an_emulated_network_goes_down_after_its_runs_even_when_interrupted(tmp_path, monkeypatch):
    def answer(argv):
        if "real.train" in argv:
            raise KeyboardInterrupt
        return 0, ""

    calls = FakeCalls(answer)
    monkeypatch.setattr(validate, "_call", calls)
    cells = validate.matrix(["allreduce-ring"], [2, 4], ["1Gbit"])
    with pytest.raises(KeyboardInterrupt):
        validate.run_matrix(cells, tmp_path, iterations=10, repeats=1)
    up, calibrate, train, down = calls.commands
    assert up[-5:] == ["up", "--hosts", "4", "--bandwidth", "1Gbit"]  # the largest count
    assert calibrate[2:7] == ["real.cluster", "run", "-n", "2", "--"]
    profile = str(tmp_path / "1Gbit" / "profile.toml")
    assert calibrate[-5:] == ["real.calibrate", "--models", "mlp", "--out", profile]
    assert train[2:7] == ["real.cluster", "run", "-n", "2", "--"]
    assert down[-2:] == ["real.cluster", "down"]


def test_the_machines_phase_is_probed_around_the_calibration_and_after_each_run(
    tmp_path, monkeypatch
):
    """Before and after the calibration, and after each real run; each row says whether the
    probes around its calibration and its runs held within 1.5x ("held") or not ("moved")."""
    probes = iter([135.0, 140.0, 138.0, 139.0, 136.0, 395.0])  # the last: after ring's 2nd run
    taken = []

    def phase(folder):
        taken.append(Path(folder).name)
        return next(probes)

    monkeypatch.setattr(validate, "probe_phase", phase)
    monkeypatch.setattr(validate, "_call", FakeCalls(lambda argv: (0, "")))
    monkeypatch.setattr(validate, "read_cell", lambda cell_dir: {"status": "ok"})
    monkeypatch.setattr(validate, "_progress", lambda row: "")
    cells = validate.matrix(["ps-sync", "allreduce-ring"], [2], ["shm"])
    validate.run_matrix(cells, tmp_path, iterations=10, repeats=2, say=lambda _: None)
    assert taken == ["shm", "shm", "allreduce-ring-2", "ps-sync-2", "allreduce-ring-2", "ps-sync-2"]
    assert json.loads((tmp_path / "shm" / "phase.json").read_text()) == {
        "calibration": [135.0, 140.0]
    }
    rows = {name: json.loads((tmp_path / "shm" / name / "row.json").read_text())["phase_us"]
            for name in ("allreduce-ring-2", "ps-sync-2")}  # fmt: skip
    assert rows == {"allreduce-ring-2": [138.0, 136.0], "ps-sync-2": [139.0, 395.0]}
    assert validate.phase_held([135.0, 140.0, 138.0, 136.0]) is True
    assert validate.phase_held([135.0, 140.0, 139.0, 395.0]) is False


def test_the_calibrations_phase_is_read_around_it_and_from_inside_its_profile(tmp_path):
    """A calibration whose probes around it held (135, 137 us) but whose own, taken on shared
    memory around its measurements of messages, met the other phase (402 us): moved."""
    (tmp_path / "phase.json").write_text(json.dumps({"calibration": [135.0, 137.0]}))
    (tmp_path / "profile.toml").write_text("[cluster]\nphase_us = [136.0, 402.0, 138.0]\n")
    probes = prediction_table._calibration_phase(tmp_path)
    assert probes == [135.0, 137.0, 136.0, 402.0, 138.0]
    assert prediction_table.phase_held([*probes, 136.0]) is False
    (tmp_path / "profile.toml").write_text("[cluster]\nname = 'no probes'\n")
    assert prediction_table._calibration_phase(tmp_path) == [135.0, 137.0]
    assert prediction_table._calibration_phase(tmp_path / "none") == []
    assert prediction_table.profile_phase(tmp_path / "profile.toml") == []
    (tmp_path / "profile.toml").write_text("[cluster]\nphase_us = [355.3, 358.8]\n")
    assert prediction_table.profile_phase(tmp_path / "profile.toml") == [355.3, 358.8]


def test_the_summary_sets_apart_the_rows_that_held_the_machines_phase():
    rows = [
        {"network": "1Gbit", "config": c, "hosts": 2, "status": "ok", "error_pct": e,
         "spread_pct": 1.0, "phase_held": h}
        for c, e, h in [("a", 2.0, True), ("b", -4.0, True), ("c", 30.0, False)]
    ]  # fmt: skip
    lines = validate.summary(rows)
    assert lines[0].startswith("1Gbit, 2 hosts (calibrated): median |error| 4.0 %, worst 30.0 %")
    assert lines[1].startswith(
        "1Gbit, 2 hosts (calibrated), rows that held the phase: median |error| 3.0 %, worst 4.0 %"
    )
    assert len(validate.summary([{**r, "phase_held": True} for r in rows])) == 1  # none moved


def test_a_refused_cluster_is_not_taken_down_and_fails_its_rows(tmp_path, monkeypatch):
    calls = FakeCalls(
        lambda argv: (2, "python -m real.cluster: error: a tsgd cluster is already up")
    )
    monkeypatch.setattr(validate, "_call", calls)
    rows = validate.run_matrix(validate.matrix(["ps-sync"], [2], ["100Mbit"]), tmp_path, 10, 1)
    assert calls.modules() == ["real.cluster up"]  # someone else's cluster: not ours to remove
    assert rows[0]["status"] == (
        "failed: cluster up: python -m real.cluster: error: a tsgd cluster is already up"
    )


def test_failed_and_refused_runs_say_so_in_their_rows_and_the_rest_goes_on(tmp_path, monkeypatch):
    def answer(argv):
        if "real.train" in argv and "gossip" in argv:
            return 1, "ZeroDivisionError: boom"
        if "sim.run" in argv:
            return 2, "python -m sim.run: error: --compute empirical needs [compute.steps.mlp]"
        return 0, ""

    calls = FakeCalls(answer)
    monkeypatch.setattr(validate, "_call", calls)
    cells = validate.matrix(["ps-sync", "gossip-ring"], [1, 2], ["shm"])
    rows = {
        (r["config"], r["hosts"]): r["status"]
        for r in validate.run_matrix(cells, tmp_path, 10, 2, say=lambda line: None)
    }
    assert rows[("ps-sync", 1)].startswith("not run: --algorithm ps --servers 1 needs at least 2")
    assert rows[("ps-sync", 2)] == (
        "failed: sim: python -m sim.run: error: --compute empirical needs [compute.steps.mlp]"
    )
    assert (
        rows[("gossip-ring", 1)]
        == rows[("gossip-ring", 2)]
        == "failed: real run 1: ZeroDivisionError: boom"
    )
    assert calls.modules()[0] == "real.calibrate --models"
    assert calls.commands[0][:3] == [str(Path(sys.executable).parent / "mpiexec"), "-n", "2"]
    sims = [a for a in calls.commands if "sim.run" in a]
    assert sims == [
        [
            sys.executable,
            "-m",
            "sim.run",
            "--nodes",
            "2",
            *validate.train_flags(cells[1], 10),
            "--profile",
            str(tmp_path / "shm/profile.toml"),
            "--compute",
            "empirical",
            "--out",
            str(tmp_path / "shm/ps-sync-2/sim"),
        ]
    ]
    assert json.loads((tmp_path / "shm/ps-sync-2/row.json").read_text())["commands"][2] == sims[0]


def test_the_repeats_run_in_passes_over_the_cells_then_the_simulations(tmp_path, monkeypatch):
    calls = FakeCalls(lambda argv: (0, ""))
    monkeypatch.setattr(validate, "_call", calls)
    cells = validate.matrix(["ps-sync", "gossip-ring"], [2], ["shm"])
    validate.run_matrix(cells, tmp_path, 10, 2, say=lambda line: None)
    runs = [
        (a[a.index("--out") + 1].split("/")[-2], a[a.index("--out") + 1].split("/")[-1])
        for a in calls.commands[1:]
    ]
    assert runs == [
        ("ps-sync-2", "real-1"),
        ("gossip-ring-2", "real-1"),
        ("ps-sync-2", "real-2"),
        ("gossip-ring-2", "real-2"),
        ("ps-sync-2", "sim"),
        ("gossip-ring-2", "sim"),
    ]


def test_a_calibration_that_fails_fails_every_row_of_its_network(tmp_path, monkeypatch):
    monkeypatch.setattr(validate, "_call", FakeCalls(lambda argv: (None, "timed out after 9 s")))
    rows = validate.run_matrix(
        validate.matrix(["ps-sync"], [2, 4], ["shm"]), tmp_path, 10, 1, say=lambda line: None
    )
    assert {r["status"] for r in rows} == {"failed: calibration: timed out after 9 s"}


def test_first_line_of_stderr_is_the_exception_of_a_traceback():
    text = (
        'Traceback (most recent call last):\n  File "x.py", line 1\n    1/0\n'
        "ZeroDivisionError: division by zero\nAbort(1) on node 0\n"
    )
    assert validate._first_line(text) == "ZeroDivisionError: division by zero"
    assert (
        validate._first_line("\npython -m real.train: error: --lr must be > 0\n")
        == "python -m real.train: error: --lr must be > 0"
    )


def test_a_run_past_its_timeout_is_stopped_and_its_stderr_goes_to_the_log(tmp_path):
    code, line = validate._call(
        [sys.executable, "-c", "print('out'); raise SystemExit('bad')"], 30, tmp_path / "a.log"
    )
    assert (code, line) == (1, "bad")
    assert (tmp_path / "a.log").read_text() == "out\nbad\n"
    code, line = validate._call(["sleep", "30"], 0.5, tmp_path / "b.log")
    assert (code, line) == (None, "timed out after 0.5 s")
    assert validate._call(["/nonexistent/tool"], 1, tmp_path / "c.log")[0] == 127


# -- command line --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--networks", "5Gbananas"], "--networks: '5Gbananas' is neither shm nor a rate"),
        (["--configs", "nope"], "--configs: unknown configuration 'nope'"),
        (["--hosts", "2,x"], "--hosts: 'x' is not a whole number"),
        (["--repeats", "0"], "--repeats must be >= 1, got 0"),
        (["--from", "/nonexistent/validate"], "no cells"),
        (["--launcher", "srun '--mpi"], '--launcher "srun \'--mpi": No closing quotation'),
        (["--launcher", "no-such-launcher -x"], "--launcher: 'no-such-launcher' is not a program"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(validate, "_call", None)  # nothing may run
    with pytest.raises(SystemExit) as stop:
        validate.main(argv)
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]


def test_without_root_emulated_networks_are_skipped_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(validate, "_cannot_emulate", lambda: "emulated networks need root")
    with pytest.raises(SystemExit) as stop:
        validate.main(["--networks", "1Gbit"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.mpi
@pytest.mark.slow
def test_quick_on_shared_memory_measures_simulates_and_tables(tmp_path):
    out = tmp_path / "v"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "twinsgd.analysis.validate",
            "--quick",
            "--networks",
            "shm",
            "--iterations",
            "20",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "TWINSGD_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == (out / "validation.md").read_text()
    own = (out / "own-code.md").read_text().split("\n## ")  # each cell's own code by role
    server = next(part for part in own if part.startswith("shm, ps-sync, 2 hosts"))
    assert "| after recv, rank 0: us a step" in server  # its update
    assert "| after recv, rank 1: us a step" in server  # its worker's next batch
    with open(out / "validation.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["network"], r["config"], r["hosts"], r["status"]) for r in rows] == [
        ("shm", name, "2", "ok") for name in ("allreduce-ring", "ps-sync", "gossip-ring")
    ]
    for row in rows:
        cell = out / "shm" / f"{row['config']}-2"
        reals = [json.loads((cell / "real-1" / "summary.json").read_text())]
        assert float(row["measured_ms"]) == statistics.median(
            1e3 * s["time_s"] / s["iterations"] for s in reals
        )
        sim = json.loads((cell / "sim" / "summary.json").read_text())
        assert float(row["sim_ms"]) == 1e3 * sim["time_s"] / sim["iterations"]
        assert sim["iterations"] == reals[0]["iterations"] == 20
    again = subprocess.run(
        [sys.executable, "-m", "twinsgd.analysis.validate", "--from", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0 and again.stdout == done.stdout


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (5.04, "missed (5.04 %)"),
        (4.96, "met (4.96 %)"),
        (5.0, "met (5.0 %)"),
        (7.23, "missed (7.2 %)"),
    ],
)
def test_a_target_missed_or_met_by_a_hair_shows_the_digit_that_decides(value, said):
    assert prediction_table._target("median |error| <= 5 %", 5.0, value).endswith(said)


def _gradients_timeline(run_dir, ms):
    """A timeline.json of one rank's gradients (``ms`` each), after two of warm-up."""
    events = [
        {"name": "compute", "ph": "X", "tid": 0, "ts": 0.0, "dur": 1e3 * m}
        for m in (50.0, 50.0, *ms)  # the warm-up, dropped
    ]
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "timeline.json").write_text(json.dumps({"traceEvents": events}))


def test_the_machines_speed_sets_the_calibrations_windows_beside_the_runs(tmp_path):
    """`prediction_table.machine_speed`: each window's median gradient in the calibration's
    order (steps1, steps2, then steps, the last) and the range of the runs' at 2 hosts; the
    4-host runs (cores shared) are left out. Each rank's first two gradients are dropped."""
    from twinsgd.analysis.prediction_table import machine_speed

    net = tmp_path / "shm"
    _gradients_timeline(net / "profile.steps1-mlp", [0.7, 0.8, 0.9])
    _gradients_timeline(net / "profile.steps2-mlp", [1.1, 1.2, 1.3])
    _gradients_timeline(net / "profile.steps-mlp", [0.85, 0.9, 0.95])
    _gradients_timeline(net / "allreduce-ring-2" / "real-1", [1.0, 1.05, 1.1])
    _gradients_timeline(net / "ps-sync-2" / "real-2", [1.15, 1.17, 1.2])
    _gradients_timeline(net / "ps-sync-4" / "real-1", [3.0, 3.0, 3.0])
    assert machine_speed(tmp_path) == [
        "shm: the calibration's windows 0.80, 1.20, 0.90; the 2 runs at 2 hosts 1.05-1.17"
    ]
    assert machine_speed(tmp_path / "shm") == []  # no network folders under it


def test_each_calibrated_row_says_how_much_slower_its_runs_gradient_was(tmp_path):
    """`gradient_vs_calibration_pct`: the median of the runs' median gradients against the
    median of all the calibration windows' gradients, at 2 hosts only (4 share the cores)."""
    net = tmp_path / "1Gbit"
    _gradients_timeline(net / "profile.steps1-mlp", [0.9, 1.0, 1.1])  # all six: median 1.0
    _gradients_timeline(net / "profile.steps-mlp", [0.95, 1.0, 1.05])
    for hosts in (2, 4):
        cell = _cell(tmp_path, "1Gbit", "ps-sync", hosts, [3.0, 3.0, 3.0], 2.0)
        for k, ms in enumerate(([1.2, 1.25, 1.3], [1.0, 1.5, 2.0], [1.1, 1.1, 1.3]), start=1):
            _gradients_timeline(cell / f"real-{k}", ms)  # medians 1.25, 1.5, 1.1: 1.25
    near, far = prediction_table.read_rows(tmp_path, validate._order)
    assert near["gradient_vs_calibration_pct"] == pytest.approx(25.0)
    assert "gradient_vs_calibration_pct" not in far
    assert prediction_table.table([near]).splitlines()[2].endswith("| +25.0 | - |  |")
    assert prediction_table.table([far]).splitlines()[2].endswith("| - |  |")
    (net / "profile.steps1-mlp" / "timeline.json").unlink()
    (net / "profile.steps-mlp" / "timeline.json").unlink()
    assert prediction_table.read_rows(net.parent)[0]["gradient_vs_calibration_pct"] is None


def test_summary_gives_each_extrapolated_host_count_its_own_line_beside_the_pooled_one():
    rows = [
        {"network": "shm", "config": c, "hosts": h, "status": "ok", "error_pct": e}
        | {"spread_pct": 2.0}
        for c, h, e in [
            ("ring", 2, 1.0),
            ("ring", 4, -10.0),
            ("ps", 4, 30.0),
            ("ring", 16, 5.0),
            ("ps", 16, -7.0),
        ]
    ]
    rows.append({"network": "shm", "config": "ps", "hosts": 8, "status": "failed: x"})
    assert validate.summary(rows)[1:] == [
        "shm, 4, 8, 16 hosts (extrapolated from 2): median |error| 8.5 %, worst 30.0 % (ps), "
        "4 of 5 rows; median spread 2.0 %",  # median of 10, 30, 5, 7
        "shm, 4 hosts: median |error| 20.0 %, worst 30.0 % (ps), 2 of 2 rows; median spread 2.0 %",
        "shm, 8 hosts: no rows measured (of 1)",
        "shm, 16 hosts: median |error| 6.0 %, worst 7.0 % (ps), 2 of 2 rows; median spread 2.0 %",
    ]
