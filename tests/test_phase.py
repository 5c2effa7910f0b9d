"""`real.phase`: the machine's phase probe under mpiexec."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _probe(ranks):
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [mpiexec, "-n", str(ranks), sys.executable, "-m", "real.phase"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("ranks", [2, 3])
def test_the_probe_prints_one_round_trip_in_microseconds(ranks):
    """One number from rank 0: a round trip of 2 x 512 KiB through shared memory, more than
    the bytes at 100 GB/s and less than a second; a third rank only waits."""
    done = _probe(ranks)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.split()
    assert 2 * 512 * 1024 / 100e9 * 1e6 < float(line) < 1e6


def test_one_rank_is_refused_in_one_line():
    done = _probe(1)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        "python -m real.phase: error: needs 2 MPI ranks, got 1: mpiexec -n 2 python -m real.phase"
    )
