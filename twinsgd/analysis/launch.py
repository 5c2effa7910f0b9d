"""How the harnesses start real runs: the venv's ``mpiexec`` by default, or the launcher a user
names (``--launcher "srun --mpi=pmi2"``, or ``TWINSGD_LAUNCHER`` for the notebooks' runners and
the benchmarks), so a validation table or a study can be measured on a real allocation. Every
launcher of MPI jobs in use takes the rank count as ``-n N`` (mpiexec, mpirun, srun)."""

import os
import shlex
import sys
from pathlib import Path

ENVIRONMENT = "TWINSGD_LAUNCHER"


def parse_launcher(text):
    """``--launcher CMD`` as an argv prefix; ValueError naming the flag when it does not parse
    or names no program (None or "": the default, the venv's mpiexec).

    >>> parse_launcher("srun --mpi=pmi2")
    ['srun', '--mpi=pmi2']
    >>> parse_launcher(None) is None
    True
    """
    if text is None or not text.strip():
        return None
    try:
        words = shlex.split(text)
    except ValueError as err:
        raise ValueError(f"--launcher {text!r}: {err}") from err
    return words


def default_launcher():
    """The launcher ``TWINSGD_LAUNCHER`` names, else None (the venv's mpiexec)."""
    return parse_launcher(os.environ.get(ENVIRONMENT))


def launch_command(n, command, launcher=None):
    """``command`` on ``n`` ranks through ``launcher`` (an argv prefix; None: the mpiexec beside
    this Python, else the one on PATH)."""
    if launcher is None:
        mpiexec = Path(sys.executable).parent / "mpiexec"
        launcher = [str(mpiexec) if mpiexec.exists() else "mpiexec"]
    return [*launcher, "-n", str(n), *command]
