"""twinsgd.analysis.plot: every figure is written, and what it draws is what the run folders
hold."""

import csv
import json

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from sim.run import main as simulate
from twinsgd.analysis.plot import KINDS, Run, main, plot

SIM = [
    "--dataset",
    "synthetic",
    "--iterations",
    "30",
    "--eval-every",
    "5",
    "--no-progress",
    "--algorithm",
    "allreduce",
    "--latency",
    "5us",
    "--bandwidth",
    "10Gbps",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("plot")
    folders = []
    for nodes in (1, 2, 4):
        out = root / f"n{nodes}"
        assert simulate([*SIM, "--nodes", str(nodes), "--out", str(out)]) == 0
        folders.append(out)
    return folders


def _metrics(folder):
    with open(folder / "metrics.csv", newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_accuracy_draws_each_runs_metrics(runs, tmp_path, suffix):
    out = tmp_path / f"accuracy{suffix}"
    data = plot("accuracy", [Run(f) for f in runs], out)
    assert out.stat().st_size > 1000
    for folder in runs:
        rows = _metrics(folder)
        epochs, seconds, accuracy = data[folder.name]
        assert accuracy == [float(r["test_accuracy"]) for r in rows]
        assert seconds == [float(r["time_s"]) for r in rows]
        summary = json.loads((folder / "summary.json").read_text())
        per_epoch = summary["iterations"] / summary["epochs"]
        np.testing.assert_allclose(epochs, [int(r["iteration"]) / per_epoch for r in rows])


def test_breakdown_is_the_summary_per_iteration(runs, tmp_path):
    data = plot("breakdown", [Run(f) for f in runs], tmp_path / "b.png")
    for folder in runs:
        summary = json.loads((folder / "summary.json").read_text())
        for key in ("compute_s", "comm_s", "wait_s"):
            assert data[folder.name][key] == 1e3 * summary[key] / summary["iterations"]


def test_speedup_is_the_ratio_of_times_to_the_target(runs, tmp_path):
    target = min(max(float(r["test_accuracy"]) for r in _metrics(f)) for f in runs)
    nodes, speedups, rates = plot(
        "speedup", [Run(f) for f in reversed(runs)], tmp_path / "s.png", target=target
    )
    assert nodes == [1, 2, 4]

    def first_crossing(folder):
        return next(
            float(r["time_s"]) for r in _metrics(folder) if float(r["test_accuracy"]) >= target
        )

    assert speedups[0] == 1.0
    assert speedups[2] == first_crossing(runs[0]) / first_crossing(runs[2])
    summary = json.loads((runs[1] / "summary.json").read_text())
    assert rates[1] == summary["iterations"] / summary["time_s"]


def test_predicted_pairs_and_timeline(runs, tmp_path):
    data = plot("predicted", [(Run(runs[1]), Run(runs[2]))], tmp_path / "p.png")
    ((measured, simulated),) = data.values()
    assert simulated == Run(runs[2]).per_iteration_ms("time_s")
    assert measured == Run(runs[1]).per_iteration_ms("time_s")
    spans = plot("timeline", [Run(runs[2])], tmp_path / "t.png", steps=3)
    assert sorted(spans) == [0, 1, 2, 3] and all(len(s) == 3 * 3 for s in spans.values())
    with open(runs[2] / "steps.csv", newline="") as fh:
        first = next(r for r in csv.DictReader(fh) if r["rank"] == "1")
    start, width, part = spans[1][0]
    assert part == "compute" and width == float(first["compute_s"])
    assert start + width + float(first["comm_s"]) + float(first["wait_s"]) == pytest.approx(
        float(first["time_s"]), rel=1e-12
    )


def test_the_command_line_writes_every_kind(runs, tmp_path, capsys):
    for kind in KINDS:
        out = tmp_path / f"{kind}.svg"
        argv = [f"{runs[0]},{runs[1]}"] if kind == "predicted" else [str(f) for f in runs]
        extra = ["--target-accuracy", "0.1"] if kind == "speedup" else []
        assert main([kind, *argv, "--out", str(out), *extra]) == 0
        assert out.read_text().startswith("<?xml")
    assert capsys.readouterr().out.count("wrote") == len(KINDS)


def test_without_out_the_figure_goes_into_the_first_run_folder(runs, capsys):
    assert main(["breakdown", *[str(f) for f in runs]]) == 0
    figure = runs[0] / "breakdown.png"
    assert figure.read_bytes().startswith(b"\x89PNG")
    assert capsys.readouterr().out.strip() == f"wrote {figure}"
    figure.unlink()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["accuracy", "nowhere", "--out", "x.png"], "nowhere: not a run folder"),
        (["predicted", "a", "--out", "x.png"], "MEASURED,SIMULATED run-folder pairs"),
        (["accuracy", ".", "--out", "x.txt"], "--out must end in .png, .svg or .pdf"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_a_study_figure_names_its_runs_by_label(runs, tmp_path):
    from twinsgd.analysis.study import figure

    data = figure("breakdown", {"one node": runs[0], "four": runs[2]}, tmp_path / "f" / "b.png")
    assert list(data) == ["one node", "four"] and (tmp_path / "f" / "b.png").stat().st_size
    assert data["four"] == plot("breakdown", [Run(runs[2])], tmp_path / "b2.png")["n4"]
    pairs = figure("predicted", {"2 against 4": (runs[1], runs[2])}, tmp_path / "p.png")
    assert pairs == {
        "2 against 4": (
            Run(runs[1]).per_iteration_ms("time_s"),
            Run(runs[2]).per_iteration_ms("time_s"),
        )
    }
