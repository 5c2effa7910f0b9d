"""`python -m real.train` end to end: run folder, time accounting, bad input, accuracy, a kill."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from real.train import main

ROOT = Path(__file__).resolve().parents[1]
DATA = os.environ.get("TWINSGD_DATA")
needs_data = pytest.mark.skipif(
    not DATA or not Path(DATA, "mnist").is_dir(), reason="TWINSGD_DATA does not hold mnist/"
)


def _read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _read_json(path):
    return json.loads(Path(path).read_text())


def _cli(*argv, timeout=120, env=None):
    return subprocess.run(
        [sys.executable, "-m", "real.train", *argv],
        cwd=ROOT,
        timeout=timeout,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


def test_serial_run_writes_every_file_of_the_run_folder(tmp_path):
    out = tmp_path / "run"
    assert (
        main(
            [
                "--dataset",
                "synthetic",
                "--iterations",
                "30",
                "--eval-every",
                "10",
                "--batch-size",
                "50",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    config = _read_json(out / "config.json")
    assert (config["status"], config["clock"], config["dataset"]) == ("done", "wall", "synthetic")
    assert config["config"]["batch_size"] == 50

    steps = _read_csv(out / "steps.csv")
    assert [int(r["iteration"]) for r in steps] == list(range(1, 31))
    assert all(float(r["compute_s"]) > 0 for r in steps)
    assert {r["comm_s"] for r in steps} == {"0.0"} and {r["wait_s"] for r in steps} == {"0.0"}
    # Every second of training is charged to some step: the step times add up to the clock.
    total = sum(float(r["compute_s"]) + float(r["comm_s"]) + float(r["wait_s"]) for r in steps)
    assert total == pytest.approx(float(steps[-1]["time_s"]), rel=1e-9)

    metrics = _read_csv(out / "metrics.csv")
    assert [int(r["iteration"]) for r in metrics] == [10, 20, 30]
    train_loss = [float(r["train_loss"]) for r in metrics]
    step_loss = [float(r["loss"]) for r in steps]
    assert train_loss[1] == pytest.approx(np.mean(step_loss[10:20]), rel=1e-12)
    assert all(float(r["eval_s"]) > 0 for r in metrics)

    summary = _read_json(out / "summary.json")
    assert summary["iterations"] == 30 and summary["status"] == "done"
    assert summary["time_s"] == pytest.approx(float(steps[-1]["time_s"]))
    assert summary["final_test_accuracy"] == float(metrics[-1]["test_accuracy"])
    assert summary["iterations_per_s"] == pytest.approx(30 / summary["time_s"])
    with np.load(out / "model.npz") as npz:
        assert npz["dense1.W"].shape == (784, 200) and npz["dense3.b"].shape == (10,)


def test_same_seed_same_weights(tmp_path):
    args = ["--dataset", "synthetic", "--iterations", "5", "--no-progress", "--seed", "3"]
    main([*args, "--out", str(tmp_path / "a")])
    main([*args, "--out", str(tmp_path / "b")])
    with np.load(tmp_path / "a" / "model.npz") as a, np.load(tmp_path / "b" / "model.npz") as b:
        for name in a.files:
            np.testing.assert_array_equal(a[name], b[name])


def test_target_accuracy_time_is_the_first_crossing(tmp_path):
    out = tmp_path / "run"
    main(
        [
            "--dataset",
            "mnist-subset",
            "--iterations",
            "40",
            "--eval-every",
            "5",
            "--target-accuracy",
            "0.8",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    metrics = _read_csv(out / "metrics.csv")
    assert float(metrics[0]["test_accuracy"]) < 0.8
    first = next(r for r in metrics if float(r["test_accuracy"]) >= 0.8)
    assert _read_json(out / "summary.json")["time_to_target_s"] == float(first["time_s"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--algorithm", "gossipy"], "argument --algorithm: invalid choice: 'gossipy'"),
        (["--lr", "0"], "--lr must be a finite number > 0, got 0.0"),
        (["--dataset", "synthetic", "--batch-size", "1000000"], "--batch-size 1000000 is larger"),
        (["--data-dir", "/nonexistent/twinsgd"], "/nonexistent/twinsgd"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message):
    done = _cli(*argv, "--out", "/tmp/twinsgd-never-written", env={"TWINSGD_OFFLINE": "1"})
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert message in done.stderr.strip().splitlines()[-1]


def test_corrupt_data_file_is_named_and_exit_2(tmp_path):
    folder = tmp_path / "mnist"
    folder.mkdir()
    for name in (
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ):
        (folder / f"{name}.gz").write_bytes(b"\x1f\x8b\x08\x00 this is not gzip")
    done = _cli("--data-dir", str(tmp_path), "--out", str(tmp_path / "run"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert str(folder) in done.stderr


def test_offline_default_falls_back_to_the_bundled_subset(tmp_path):
    env = {"TWINSGD_OFFLINE": "1", "XDG_CACHE_HOME": str(tmp_path / "cache"), "TWINSGD_DATA": ""}
    done = _cli("--iterations", "20", "--out", str(tmp_path / "run"), "--no-progress", env=env)
    assert done.returncode == 0, done.stderr
    assert "subset" in done.stderr
    assert _read_json(tmp_path / "run" / "config.json")["dataset"] == "mnist-subset"
    assert _read_json(tmp_path / "run" / "summary.json")["dataset"] == "mnist-subset"


def test_sigkill_mid_run_leaves_parseable_files(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "real.train",
            "--dataset",
            "synthetic",
            "--epochs",
            "50",
            "--eval-every",
            "5",
            "--batch-size",
            "10",
            "--out",
            str(out),
            "--no-progress",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (out / "metrics.csv").exists() and len(_read_csv(out / "metrics.csv")) >= 3:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the run wrote no metrics within 60 s")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    deadline = time.monotonic() + 5  # the sentinel process says it died, in both files
    while any(_read_json(out / n)["status"] == "running" for n in ("config.json", "summary.json")):
        assert time.monotonic() < deadline, "the run folder still says running"
        time.sleep(0.1)
    for name in ("config.json", "summary.json"):
        assert _read_json(out / name)["status"].startswith("failed: rank 0 died at step ")
    for name in ("steps.csv", "metrics.csv"):
        rows = _read_csv(out / name)
        assert rows and all(None not in r.values() and None not in r for r in rows), name
    assert not (out / "model.npz").exists()


@needs_data
@pytest.mark.data
@pytest.mark.parametrize(("dataset", "floor"), [("mnist", 0.97), ("fashion-mnist", 0.85)])
def test_baseline_accuracy_mlp_adam_batch_100_two_epochs(tmp_path, dataset, floor):
    out = tmp_path / dataset
    main(
        [
            "--dataset",
            dataset,
            "--data-dir",
            DATA,
            "--epochs",
            "2",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    summary = _read_json(out / "summary.json")
    assert summary["dataset"] == dataset and summary["iterations"] == 1200
    assert summary["final_test_accuracy"] >= floor


def test_one_blas_thread_without_the_environment_saying_so(tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "real.train",
            "--dataset",
            "synthetic",
            "--iterations",
            "5",
            "--no-progress",
            "--out",
            str(tmp_path / "run"),
        ],
        cwd=ROOT,
        env=env,
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    pools = _read_json(tmp_path / "run" / "config.json")["blas_threads"]
    assert pools and all(pool["threads"] == 1 for pool in pools)


def test_the_report_line_gives_a_short_run_its_seconds_in_four_digits():
    """A 10-step run of 16 ms said "10 steps in 0.0 s"; four significant digits, as sim.run's."""
    from real.train import _report

    summary = {
        "dataset": "mnist-subset",
        "nodes": 2,
        "iterations": 10,
        "time_s": 0.016357,
        "seconds_per_epoch": 0.081821,
        "final_test_accuracy": 0.739,
    }
    assert _report(summary, "runs/x") == (
        "mnist-subset: 2 node(s), 10 steps in 0.01636 s (0.08182 s/epoch), test accuracy "
        "73.90%, run folder runs/x"
    )
