"""Download a data set's files from its mirrors, verifying checksums, writing atomically.

Each file is streamed into a temporary file in the destination folder (``.<name>.<random>.part``),
checked against its published checksum, and only then renamed to its final name with
:func:`os.replace`, which is atomic on POSIX. So a file under its final name is always complete and
verified: an interrupted, truncated or wrong download leaves at most a ``.part`` file, which no
reader looks at (it is removed on any error this process sees). Several processes fetching the same
file at once (ranks on one host) each write their own temporary file; the last rename wins, and all
are equal.

On any failure (connection refused, HTTP error, timeout, short body, checksum mismatch) the next
mirror is tried. ``timeout_s`` bounds each connect and each read, not the whole transfer.
"""

import http.client
import os
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from twinsgd.cli import progress_shown

from .errors import DataError
from .sources import SOURCES, verify

DEFAULT_TIMEOUT_S = 10.0
_CHUNK_NBYTES = 1 << 20


def fetch_dataset(name, folder, *, mirrors=None, timeout_s=DEFAULT_TIMEOUT_S):
    """Make ``folder`` hold every file of data set ``name``, verified, downloading what is missing.

    Parameters
    ----------
    name : {"mnist", "fashion-mnist", "cifar10", "cifar100"}
    folder : str or Path
        Destination, created if needed. Files go directly into it (``folder/<published name>``).
    mirrors : sequence of str, optional
        Base URLs to try in order (``http(s)://`` or ``file://``); default: the official mirrors.
    timeout_s : float
        Seconds allowed for each connect and each read.

    Returns
    -------
    files : list of (Path, bool)
        Each file and whether it was downloaded now (False: it was already there and verified).

    Raises
    ------
    ValueError
        Unknown ``name``.
    DataError
        A file could not be fetched from any mirror (the message gives each mirror's reason). Files
        fetched before the failure stay, verified.

    Notes
    -----
    A file already present under its final name is verified first; a corrupt one is downloaded again
    and replaced atomically.
    """
    if name not in SOURCES:
        raise ValueError(f"fetch_dataset: name must be one of {', '.join(SOURCES)}, got {name!r}")
    if timeout_s <= 0:
        raise ValueError(f"fetch_dataset: timeout_s must be > 0, got {timeout_s}")
    source = SOURCES[name]
    mirrors = source.mirrors if mirrors is None else tuple(mirrors)
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DataError(f"{folder}: cannot create folder: {err.strerror or err}") from err
    return [_ensure(spec, folder, mirrors, timeout_s) for spec in source.files]


def _ensure(spec, folder, mirrors, timeout_s):
    """Keep a present, valid file; otherwise fetch it. Returns (path, fetched)."""
    dest = folder / spec.name
    if dest.exists():
        try:
            return verify(dest, spec), False
        except DataError:
            pass  # corrupt: fetch it again and replace it
    return fetch_file(spec, [_join(m, spec.name) for m in mirrors], dest, timeout_s=timeout_s), True


def _join(mirror, file_name):
    return mirror.rstrip("/") + "/" + file_name


def fetch_file(spec, urls, dest, *, timeout_s=DEFAULT_TIMEOUT_S):
    """Download ``spec`` from the first of ``urls`` that gives a verified copy; return ``dest``.

    Raises DataError ``could not fetch <name> from any mirror: <url>: <reason>; ...`` if none does.
    """
    dest = Path(dest)
    reasons = []
    for url in urls:
        try:
            _fetch_one(url, spec, dest, timeout_s)
            return dest
        except (OSError, http.client.HTTPException, DataError, ValueError) as err:
            reasons.append(f"{url}: {_reason(err)}")
    if not reasons:
        reasons.append("no mirror given")
    raise DataError(f"could not fetch {spec.name} from any mirror: {'; '.join(reasons)}")


def _reason(err):
    """A short, one-line reason for a failed download."""
    if isinstance(err, urllib.error.URLError) and not isinstance(err, urllib.error.HTTPError):
        return str(err.reason)
    if isinstance(err, http.client.IncompleteRead):
        return f"body cut short ({len(err.partial)} bytes read, {err.expected} more expected)"
    return str(err) or type(err).__name__


def _fetch_one(url, spec, dest, timeout_s):
    """Stream ``url`` into a temporary file beside ``dest``, verify it, rename it into place."""
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with (
            os.fdopen(fd, "wb") as out,
            urllib.request.urlopen(url, timeout=timeout_s) as response,
            _progress(spec.name, response) as bar,
        ):
            while chunk := response.read(_CHUNK_NBYTES):
                out.write(chunk)
                bar.update(len(chunk))
        _check_length(response, tmp)
        try:
            verify(tmp, spec)
        except DataError as err:  # name the URL (done by the caller), not the temporary file
            raise DataError(str(err).removeprefix(f"{tmp}: ")) from err
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)  # after os.replace the name is gone: nothing to remove


def _progress(name, response):
    """A byte-count bar for one download on stderr (tqdm; off when stderr is not a terminal)."""
    from tqdm import tqdm

    length = response.headers.get("Content-Length") if response.headers else None
    return tqdm(
        total=int(length) if length and length.isdigit() else None,
        unit="B",
        unit_scale=True,
        desc=name,
        file=sys.stderr,
        disable=None if progress_shown() else True,
        leave=False,
    )


def _check_length(response, tmp):
    """A body shorter than its Content-Length header is a truncated download."""
    expected = response.headers.get("Content-Length") if response.headers else None
    if expected is not None and expected.isdigit() and int(expected) != tmp.stat().st_size:
        raise DataError(f"truncated download: {tmp.stat().st_size} of {expected} bytes")
