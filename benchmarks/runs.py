"""Running ``real.train`` from a benchmark script: one call, one run folder, its summary."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def train(n, argv, out):
    """``python -m real.train argv --out out`` on ``n`` ranks (mpiexec when n > 1); the summary."""
    cmd = [sys.executable, "-m", "real.train", "--no-progress", "--out", str(out), *argv]
    if n > 1:
        cmd = [str(Path(sys.executable).parent / "mpiexec"), "-n", str(n), *cmd]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads((Path(out) / "summary.json").read_text())
