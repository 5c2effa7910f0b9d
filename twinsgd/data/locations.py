"""Where data sets are looked for on disk, and which files in a folder make up a data set.

Folders, in the order :func:`data.load_dataset` tries them:

1. an explicit data directory (``--data-dir`` or ``TWINSGD_DATA``): ``<dir>/<name>/`` or ``<dir>/``;
2. the user cache, ``${XDG_CACHE_HOME:-~/.cache}/twinsgd/<name>/`` (downloads go here);
3. system folders, ``/usr/share/datasets/<name>/`` (where Debian's ``dataset-fashion-mnist`` is).

In a folder, an IDX file may be gzip-compressed under its published name or uncompressed under the
name without ``.gz``; CIFAR may be the published tar.gz or its extracted ``cifar-*-bin*`` folder.
"""

import os
from pathlib import Path

from .cifar import LAYOUTS
from .sources import SOURCES

DATA_ENV = "TWINSGD_DATA"
# An extracted CIFAR-10 folder holding this file is `data.substitute`'s Fashion-MNIST in CIFAR-10's
# format: loaded under SUBSTITUTE_NAME, the file's first line its note
SUBSTITUTE_MARKER = "SUBSTITUTE"
SUBSTITUTE_NAME = "cifar10-substitute"
SYSTEM_DIRS = (Path("/usr/share/datasets"),)


def env_data_dir():
    """The folder named by ``TWINSGD_DATA``, or None when it is unset or empty."""
    value = os.environ.get(DATA_ENV, "")
    return Path(value) if value else None


def cache_root():
    """``${XDG_CACHE_HOME:-~/.cache}/twinsgd`` (a relative XDG_CACHE_HOME is ignored, per XDG)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "twinsgd"


def find_files(name, folder):
    """The files of data set ``name`` in ``folder``, or None if any is missing.

    Returns a list of (path, FileSpec) in the order of ``SOURCES[name].files``; for an extracted
    CIFAR folder, the one entry is (folder path, FileSpec of the tar.gz it came from).
    """
    found = []
    for spec in SOURCES[name].files:
        path = _find_one(name, spec, Path(folder))
        if path is None:
            return None
        found.append((path, spec))
    return found


def missing_file(name, folder):
    """The first file of ``name`` that ``folder`` lacks (for error messages), or None."""
    for spec in SOURCES[name].files:
        if _find_one(name, spec, Path(folder)) is None:
            return Path(folder) / spec.name
    return None


def _find_one(name, spec, folder):
    """A copy of ``spec`` in ``folder``: published name, uncompressed name, or extracted folder."""
    candidates = [folder / spec.name]
    if spec.raw_name:
        candidates.append(folder / spec.raw_name)
    for path in candidates:
        if path.is_file():
            return path
    if name in LAYOUTS:
        return _extracted_cifar(LAYOUTS[name], folder)
    return None


def _extracted_cifar(layout, folder):
    """The folder (``folder`` or its ``layout.folder``) holding every ``.bin`` of ``layout``."""
    for candidate in (folder / layout.folder, folder):
        if all((candidate / member).is_file() for member in layout.train + layout.test):
            return candidate
    return None


def substitute_note(path):
    """The note of the CIFAR-10 substitute at ``path`` (its marker file's first line), or None
    when ``path`` is not one (a tar.gz is the published archive, checked by MD5: never one)."""
    marker = Path(path) / SUBSTITUTE_MARKER
    if not Path(path).is_dir() or not marker.is_file():
        return None
    return marker.read_text().splitlines()[0] if marker.stat().st_size else SUBSTITUTE_NAME
