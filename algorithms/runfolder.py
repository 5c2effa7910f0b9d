"""Writing a run folder so that a run killed at any moment leaves only valid files.

Two ways of writing keep every file parseable at every instant:
- whole files (config.json, summary.json, model.npz) go to a temporary file in the same folder
  and are renamed over the old one (``os.replace`` is atomic on POSIX), so a reader sees the old
  or the new version, never half of one;
- logs (metrics.csv, steps.csv) grow by whole lines, each batch of lines handed to the kernel in one
  ``write(2)`` on an ``O_APPEND`` descriptor, so a kill between calls leaves complete lines only.

The schema of the files is DESIGN.md's; the columns are `METRICS_COLUMNS` and `STEPS_COLUMNS`.
"""

import json
import math
import os
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

METRICS_COLUMNS = ("epoch", "iteration", "time_s", "train_loss", "test_loss", "test_accuracy",
                   "bytes", "eval_s", "consensus_distance")
STEPS_COLUMNS = ("rank", "epoch", "iteration", "time_s", "compute_s", "comm_s", "wait_s",
                 "bytes_sent", "bytes_recv", "staleness", "loss")


class RunFolder:
    """A run folder on disk; creates it (and its parents) if needed.

    Examples
    --------
    >>> import tempfile
    >>> run = RunFolder(tempfile.mkdtemp())
    >>> run.write_json("summary.json", {"time_s": 1.5})
    >>> json.loads((run.path / "summary.json").read_text())
    {'time_s': 1.5}
    """

    def __init__(self, path):
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            why = err.strerror
            raise ValueError(f"--out {path}: cannot create the run folder ({why})") from err

    def write_json(self, name, document):
        """Replace ``name`` with ``document`` as indented JSON, atomically."""
        text = json.dumps(_jsonable(document), indent=2, allow_nan=False) + "\n"
        self._replace(name, lambda fh: fh.write(text.encode()))

    def save_arrays(self, name, arrays):
        """Replace ``name`` (an .npz, as `numpy.savez` writes it) with the named arrays,
        atomically. The archive's entries carry a fixed date, so the same weights give the same
        bytes (np.savez stamps them with the clock)."""

        def write(fh):
            with zipfile.ZipFile(fh, "w") as archive:
                for key, array in arrays.items():
                    entry = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                    with archive.open(entry, "w", force_zip64=True) as member:
                        np.lib.format.write_array(member, np.asanyarray(array),
                                                  allow_pickle=False)

        self._replace(name, write)

    def log(self, name, columns, append=False, flush_s=0.0):
        """A `CsvLog` that starts ``name`` afresh with its header line, or appends to it."""
        return CsvLog(self.path / name, columns, append, flush_s)

    def _replace(self, name, write):
        fd, tmp = tempfile.mkstemp(dir=self.path, prefix=f".{name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                write(fh)
            os.replace(tmp, self.path / name)
        except BaseException:
            os.unlink(tmp)
            raise


class CsvLog:
    """An append-only CSV file grown by whole lines (one ``write(2)`` per flush).

    Several processes may append to one file (``append=True`` on all but its creator): on a local
    file system each ``O_APPEND`` write lands whole at the end, so lines never interleave. Lines are
    held back at most ``flush_s`` seconds (0: written at once), so a busy log costs one system call
    per interval rather than per row; a kill loses at most that interval, never half a line.
    """

    def __init__(self, path, columns, append=False, flush_s=0.0):
        self.columns, self.flush_s = tuple(columns), flush_s
        self._pending, self._flushed_at = [], time.monotonic()
        if append:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        else:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
            os.write(self._fd, (",".join(self.columns) + "\n").encode())

    def write_rows(self, rows):
        """Append rows (dicts keyed by column; a missing key writes an empty field)."""
        columns = self.columns
        self._pending.extend(",".join([_field(row.get(c)) for c in columns]) + "\n" for row in rows)
        if time.monotonic() - self._flushed_at >= self.flush_s:
            self.flush()

    def flush(self):
        """Write the lines held back, in one system call."""
        if self._pending:
            os.write(self._fd, "".join(self._pending).encode())
            self._pending.clear()
        self._flushed_at = time.monotonic()

    def close(self):
        if self._fd is not None:
            self.flush()
            os.close(self._fd)
            self._fd = None


def _field(value):
    """One CSV field: floats round-trip exactly (``str`` is the shortest repr), None and NaN are
    empty."""
    if value is None or value != value:
        return ""
    return str(value)


def _jsonable(value):
    """Make numpy scalars plain and NaN/inf null, so the JSON is strict and any tool reads it."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
