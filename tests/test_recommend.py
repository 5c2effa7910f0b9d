"""twinsgd.analysis.recommend: the ranking is the simulated runs' own times to the target, best
first."""

import json
import os
import subprocess
import sys
from pathlib import Path

from twinsgd.analysis.recommend import BASELINE, candidates, rank, report

ROOT = Path(__file__).resolve().parents[1]


def _summary(time_to_target, accuracy, time_s=1.0, comm_s=0.25, wait_s=0.0):
    return {
        "time_to_target_s": time_to_target,
        "final_test_accuracy": accuracy,
        "time_s": time_s,
        "comm_s": comm_s,
        "wait_s": wait_s,
        "iterations": 100,
    }


def test_rank_puts_reached_by_time_then_unreached_by_accuracy_then_failed():
    results = [
        ("a", [], _summary(None, 0.80), "done"),
        ("b", [], _summary(2.0, 0.95), "done"),
        ("c", [], None, "failed: x"),
        ("d", [], _summary(1.5, 0.91), "done"),
        ("e", [], _summary(None, 0.85), "done"),
    ]
    assert [r[0] for r in rank(results)] == ["d", "b", "e", "a", "c"]


def test_report_says_how_much_sooner_than_the_baseline():
    ranked = rank(
        [
            (BASELINE, ["--algorithm", "allreduce"], _summary(3.0, 0.9, comm_s=0.5), "done"),
            ("fast", ["--x"], _summary(1.5, 0.9, comm_s=0.1), "done"),
        ]
    )
    text = report(ranked, 0.9)
    assert (
        "Recommended: fast (--x): it reaches 90 % in 1.500 simulated s, 2.00x sooner than "
        f"{BASELINE}; communication and waiting are 10 % of its time against 50 % for "
        f"{BASELINE}." in text
    )


def test_candidates_cover_the_study_axes():
    names = [n for n, _ in candidates(8)]
    assert names[0] == BASELINE and len(names) == len(set(names)) == 11
    assert not any("gossip" in n for n, _ in candidates(2))  # two nodes: gossip is allreduce


def _recommend(*argv, timeout=600):
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "TWINSGD_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "twinsgd.analysis.recommend", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_recommendation_is_the_fastest_run_folder(tmp_path):
    done = _recommend(
        "--profile",
        "lomonosov-2-like",
        "--nodes",
        "4",
        "--dataset",
        "mnist-subset",
        "--target-accuracy",
        "0.7",
        "--out",
        str(tmp_path),
        "--workers",
        "2",
    )
    assert done.returncode == 0, done.stderr
    times = {}
    for folder in tmp_path.iterdir():
        summary = json.loads((folder / "summary.json").read_text())
        argv = json.loads((folder / "config.json").read_text())["command"][3:]  # python -m sim.run
        times[" ".join(argv[: argv.index("--nodes")])] = summary["time_to_target_s"]
    reached = {k: v for k, v in times.items() if v is not None}
    best = min(reached, key=reached.get)
    assert f"({best}): it reaches 70 % in {reached[best]:.3f} simulated s" in done.stdout


def test_bad_input_is_one_line():
    done = _recommend("--profile", "lomonosov-2-like", "--nodes", "1")
    assert done.returncode == 2 and "--nodes must be >= 2" in done.stderr
    assert "Traceback" not in done.stderr
