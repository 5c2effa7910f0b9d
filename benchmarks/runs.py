"""Running ``real.train`` from a benchmark script: one call, one run folder, its summary."""

import json
import os
import subprocess
import sys
from pathlib import Path

from twinsgd.analysis.launch import default_launcher, launch_command

ROOT = Path(__file__).resolve().parents[1]


def train(n, argv, out):
    """``python -m real.train argv --out out`` on ``n`` ranks; the summary. More than one rank
    starts through ``TWINSGD_LAUNCHER`` (``srun --mpi=pmi2`` on an allocation), else the venv's
    mpiexec."""
    cmd = [sys.executable, "-m", "real.train", "--no-progress", "--out", str(out), *argv]
    if n > 1:
        cmd = launch_command(n, cmd, default_launcher())
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads((Path(out) / "summary.json").read_text())
