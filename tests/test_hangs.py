"""Nothing hangs and nothing is lost: real runs under mpiexec that used to hang or overwrite.

Every rank decides together (rank 0 decides, the others hear it) whether to go on, so bad input
seen by one rank alone ends every rank with exit 2; run folders are claimed by rank 0 and never
shared by two runs; Ctrl-C leaves one line and a folder that says so.
"""

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.mpi
ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = str(Path(sys.executable).parent / "mpiexec")
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "TWINSGD_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
DATA = os.environ.get("TWINSGD_DATA")
TRAIN = [sys.executable, "-m", "real.train", "--no-progress"]
SMALL = [*TRAIN, "--dataset", "synthetic", "--algorithm", "allreduce", "--iterations", "20"]


def run(argv, cwd=ROOT, timeout=60, env=ENV):
    return subprocess.run(argv, cwd=cwd, env=env, timeout=timeout, capture_output=True, text=True)


def status(folder):
    return json.loads((Path(folder) / "config.json").read_text())["status"]


@pytest.mark.skipif(not DATA or not Path(DATA, "mnist").is_dir(), reason="needs real MNIST")
def test_ranks_that_find_different_data_all_exit_2(tmp_path):
    """Rank 1's node-local data folder holds a truncated file: it alone finds the problem."""
    broken = tmp_path / "broken" / "mnist"
    shutil.copytree(Path(DATA, "mnist"), broken)
    images = broken / "train-images-idx3-ubyte.gz"
    images.write_bytes(gzip.compress(gzip.decompress(images.read_bytes())[:100_000]))
    argv = [
        *TRAIN,
        "--dataset",
        "mnist",
        "--algorithm",
        "allreduce",
        "--out",
        str(tmp_path / "run"),
    ]
    done = run(
        [
            MPIEXEC,
            "-n",
            "1",
            "-env",
            "TWINSGD_DATA",
            DATA,
            *argv,
            ":",
            "-n",
            "1",
            "-env",
            "TWINSGD_DATA",
            str(broken.parent),
            *argv,
        ]
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith("(on rank 1)"), done.stderr
    assert "train-images-idx3-ubyte" in lines[0]
    assert not (tmp_path / "run").exists()  # no folder for a run that never started


@pytest.mark.skipif(not DATA or not Path(DATA, "mnist").is_dir(), reason="needs real MNIST")
def test_ranks_whose_data_differ_are_refused_together(tmp_path):
    """Rank 1 finds no MNIST and falls back to the bundled subset; rank 0 has the full set: the
    ranks compare what they found before anything else (rank 0 used to wait forever)."""
    argv = [
        *TRAIN,
        "--dataset",
        "mnist",
        "--algorithm",
        "allreduce",
        "--out",
        str(tmp_path / "run"),
    ]
    env = {**ENV, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = run(
        [
            MPIEXEC,
            "-n",
            "1",
            "-env",
            "TWINSGD_DATA",
            DATA,
            *argv,
            ":",
            "-n",
            "1",
            "-env",
            "TWINSGD_DATA",
            "",
            *argv,
        ],
        env=env,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [
        "python -m real.train: error: rank 1 found mnist-subset (10000 training "
        "images) where rank 0 found mnist (60000): give every node the same data "
        "(--data-dir on a shared folder, or python -m twinsgd.data.download mnist "
        "on each node)"
    ], done.stderr


def test_runs_without_out_never_share_a_folder(tmp_path):
    """Three runs started together without --out (each under mpiexec -n 2): three folders,
    each one run's. They used to share one, or hang when ranks straddled a second."""
    procs = [
        subprocess.Popen(
            [MPIEXEC, "-n", "2", *SMALL],
            cwd=tmp_path,
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    folders = sorted((tmp_path / "runs").iterdir())
    assert len(folders) == 3
    for folder in folders:
        assert status(folder) == "done"
        assert json.loads((folder / "config.json").read_text())["config"]["out"] == str(
            Path("runs") / folder.name
        )
        steps = (folder / "steps.csv").read_text().splitlines()
        assert len(steps) == 1 + 2 * 20  # header, 2 ranks x 20 steps: one run's rows


def test_a_folder_holding_a_run_is_kept_unless_overwrite(tmp_path):
    out = tmp_path / "run"
    assert run([*SMALL, "--out", str(out)]).returncode == 0
    (out / "timeline.json").write_text("{}")  # what the first run left
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    again = run([*SMALL, "--out", str(out), "--seed", "1"])
    assert again.returncode == 2
    assert again.stderr.strip() == (
        f"python -m real.train: error: --out {out} holds a run "
        f"(status 'done'); give --overwrite to replace it, or "
        f"another --out"
    )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    replaced = run([*SMALL, "--out", str(out), "--seed", "1", "--overwrite"])
    assert replaced.returncode == 0, replaced.stderr
    assert json.loads((out / "config.json").read_text())["config"]["seed"] == 1
    assert json.loads((out / "timeline.json").read_text()) != {}  # the new run's


@pytest.mark.parametrize("out", ["", " "])
def test_an_empty_out_is_refused(tmp_path, out):
    done = run([*SMALL, "--out", out], cwd=tmp_path)
    assert done.returncode == 2
    assert (
        done.stderr.strip() == f"python -m real.train: error: --out must name a folder, got {out!r}"
    )
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_under_mpiexec_is_one_line_exit_130_and_a_marked_folder(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [MPIEXEC, "-n", "2", *SMALL[:-1], "100000", "--eval-every", "20", "--out", str(out)],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while (
        not (out / "metrics.csv").exists()
        or len((out / "metrics.csv").read_text().splitlines()) < 3
    ):
        assert time.monotonic() < deadline, "no metrics within 60 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends mpiexec
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    ours = [line for line in err.splitlines() if "real.train" in line]
    assert len(ours) == 1 and "interrupted (SIGINT) at step" in ours[0], err
    assert status(out).startswith("failed: interrupted (SIGINT) at step ")


@pytest.mark.parametrize(
    "command",
    [
        ["sim.run", "--nodes", "8", "--dataset", "synthetic", "--iterations", "1000000"],
        [  # the analytic engine, by --engine auto
            *("sim.run", "--nodes", "1000000", "--ghost", "resnet50", "--algorithm"),
            *("allreduce", "--collectives", "closed-form", "--iterations", "100000"),
        ],
        ["sim.osu", "osu_alltoall", "--ranks", "512", "--sizes", "1:1GiB"],
    ],
    ids=["sim.run", "sim.run analytic", "sim.osu"],
)
def test_ctrl_c_in_the_simulator_is_one_line_exit_130(tmp_path, command):
    out = tmp_path / "run"
    argv = [*command, "--no-progress", "--out", str(out)] if command[0] == "sim.run" else command
    proc = subprocess.Popen(
        [sys.executable, "-m", *argv],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(4)  # set up and running (the run folder exists before the first step)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().endswith("interrupted (SIGINT)"), err
    if command[0] == "sim.run":
        assert status(out).startswith("failed: interrupted (SIGINT) at simulated ")
