"""A full disk mid-run: every writer leaves whole rows (a reader, the csv module or pandas, never
sees half a line or a row of the wrong width), and the run says ``failed: disk full`` in
config.json, simulated and real alike."""

import csv
import errno
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from twinsgd.run.runfolder import CsvLog, RunFolder

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "TWINSGD_OFFLINE": "1", "OPENBLAS_NUM_THREADS": "1"}


def whole_rows(path):
    """Every row of a CSV file, checked to have the header's width by csv and by pandas."""
    import pandas as pd

    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows and path.read_bytes().endswith(b"\n"), f"{path} ends in a torn line"
    assert {len(row) for row in rows} == {len(rows[0])}, f"{path}: rows of other widths"
    frame = pd.read_csv(path)
    assert len(frame) == len(rows) - 1 and list(frame.columns) == rows[0]
    return rows


def test_a_write_the_disk_cuts_short_is_taken_back_to_whole_lines(tmp_path, monkeypatch):
    log = CsvLog(tmp_path / "steps.csv", ["a", "b"])
    log.write_rows([{"a": 1, "b": 2}])
    real_write, calls = os.write, []

    def half_then_full(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(OSError, match="No space left") as caught:
        log.write_rows([{"a": 10, "b": 20}, {"a": 30, "b": 40}])
    assert caught.value.errno == errno.ENOSPC
    monkeypatch.setattr(os, "write", real_write)
    assert (tmp_path / "steps.csv").read_text() == "a,b\n1,2\n"


def test_a_full_disk_still_gets_the_last_word_into_config_json(tmp_path, monkeypatch):
    folder = RunFolder(tmp_path)
    folder.write_json("config.json", {"status": "running"})

    def no_room(name, write):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(folder, "_replace", no_room)
    folder.write_json("config.json", {"status": "failed: disk full"})
    assert folder.read_json("config.json") == {"status": "failed: disk full"}


def test_sim_run_against_a_file_size_limit_keeps_whole_rows_and_says_disk_full(tmp_path):
    out = tmp_path / "run"

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (30_000, 30_000))

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim.run",
            "--nodes",
            "4",
            "--dataset",
            "synthetic",
            "--iterations",
            "400",
            "--eval-every",
            "5",
            "--no-progress",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=ENV,
        preexec_fn=limit,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-800:]
    assert done.stderr.strip().splitlines()[-1].startswith("python -m sim.run: failed: disk full")
    status = json.loads((out / "config.json").read_text())["status"]
    assert status.startswith("failed: disk full: ") and "steps.csv" in status
    assert len(whole_rows(out / "steps.csv")) > 1
    whole_rows(out / "metrics.csv")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("mount"), reason="needs root to mount")
def test_real_train_on_a_disk_that_fills_keeps_whole_rows_and_says_disk_full(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs: {mounted.stderr.decode().strip()}")
    try:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "real.train",
                "--dataset",
                "synthetic",
                "--iterations",
                "3000",
                "--eval-every",
                "5",
                "--no-progress",
                "--out",
                str(disk / "run"),
            ],
            cwd=ROOT,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=300,
        )
        status = json.loads((disk / "run" / "config.json").read_text())["status"]
        assert status.startswith("failed: disk full: "), status
        assert len(whole_rows(disk / "run" / "steps.csv")) > 1
        whole_rows(disk / "run" / "metrics.csv")
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_the_atomic_writers_leave_the_old_file_whole_when_the_disk_refuses_the_new(tmp_path):
    """model.npz, timeline.json (and any JSON) go through a temporary file and a rename: past a
    file size limit the write fails, the earlier file stays as it was and no temporary stays."""
    script = f"""
import resource, numpy as np
from twinsgd.run.runfolder import RunFolder
folder = RunFolder({str(tmp_path)!r})
folder.save_arrays("model.npz", {{"w": np.zeros(10, np.float32)}})
folder.write_json("timeline.json", {{"traceEvents": []}}, indent=None)
resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
for write in (lambda: folder.save_arrays("model.npz", {{"w": np.zeros(100_000, np.float32)}}),
              lambda: folder.write_json("timeline.json", {{"traceEvents": [0] * 50_000}})):
    try:
        write()
    except OSError as err:
        print("refused", err.errno)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=ENV, capture_output=True, text=True
    )
    assert done.stdout.split() == ["refused", "27", "refused", "27"], done.stderr  # EFBIG
    import numpy as np

    with np.load(tmp_path / "model.npz") as weights:
        assert weights["w"].shape == (10,)
    assert json.loads((tmp_path / "timeline.json").read_text()) == {"traceEvents": []}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.npz", "timeline.json"]
