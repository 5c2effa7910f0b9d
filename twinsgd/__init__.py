"""twinsgd: distributed SGD, measured under MPI and simulated in SimPy from one codebase.

The command-line entry points keep the project card's short names: ``python -m real.train`` and
``python -m sim.run`` (with ``real``, ``sim``, ``models`` and ``topologies`` beside this package).
Everything else lives here, under one name that cannot collide with a user's ``data.py``:

- `twinsgd.programs`: the node programs, the operations they yield, collectives, codecs, ghosts;
- `twinsgd.run`: run configuration (flags, TOML, units), run folders and their writers, faults,
  checkpoints, the set-up both front ends share;
- `twinsgd.calibration`: cost fits of measured messages and step times;
- `twinsgd.data`: data set readers, downloads (checksummed), the bundled subset;
- `twinsgd.analysis`: comparison, validation, plots, studies, recommendation.

Cluster profile presets are package data of ``sim`` (``sim/profiles``).
"""

import importlib.metadata as _metadata
from pathlib import Path as _Path


def _version():
    """The installed distribution's version, else (a source checkout run without installing,
    on PYTHONPATH) pyproject.toml's beside this package, else ``"unknown"``."""
    try:
        return _metadata.version("twinsgd")
    except _metadata.PackageNotFoundError:
        import tomllib

        try:
            with open(_Path(__file__).resolve().parent.parent / "pyproject.toml", "rb") as fh:
                return str(tomllib.load(fh)["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown"


__version__ = _version()


def source_commit():
    """The git commit this package runs from (12 hex digits, ``+dirty`` when tracked files
    changed), or None when it is not a git checkout (an installed wheel): what config.json
    records beside the version, so a run names the code that made it."""
    import subprocess

    root = _Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
