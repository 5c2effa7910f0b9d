"""Writing a run folder so that a run killed at any moment leaves only valid files.

Two ways of writing keep every file parseable at every instant:
- whole files (config.json, summary.json, model.npz) go to a temporary file in the same folder
  and are renamed over the old one (``os.replace`` is atomic on POSIX), so a reader sees the old
  or the new version, never half of one;
- logs (metrics.csv, steps.csv) grow by whole lines, each batch of lines handed to the kernel in one
  ``write(2)`` on an ``O_APPEND`` descriptor, so a kill between calls leaves complete lines only.

The schema of the files is DESIGN.md's; the columns are `METRICS_COLUMNS` and `STEPS_COLUMNS`.
"""

import contextlib
import datetime
import errno
import json
import math
import os
import re
import tempfile
import time
import zipfile
from itertools import chain
from pathlib import Path

import numpy as np
import orjson

METRICS_COLUMNS = (
    "epoch",
    "iteration",
    "time_s",
    "train_loss",
    "test_loss",
    "test_accuracy",
    "bytes",
    "eval_s",
    "consensus_distance",
)
STEPS_COLUMNS = (
    "rank",
    "epoch",
    "iteration",
    "time_s",
    "compute_s",
    "comm_s",
    "wait_s",
    "bytes_sent",
    "bytes_recv",
    "staleness",
    "loss",
)
RUN_FILES = (
    "config.json",
    "summary.json",
    "metrics.csv",
    "steps.csv",
    "model.npz",
    "timeline.json",
)
# a run's own markers (real.train's heartbeat for the watchdog, the first interrupted rank's
# claim): an earlier run's would speak for the next one in the same folder
RUN_MARKERS = (".heartbeat", ".interrupted")


def claim_run_folder(out, name, overwrite=False, runs="runs"):
    """The folder a new run writes into, created now; ValueError naming ``--out`` if it cannot be.

    ``out`` None: ``runs/<date>-<time>-<name>``, and if a run started in the same second holds
    that, ``...-2``, ``-3``, ...: the name is taken by ``mkdir``, which succeeds for one caller
    only, so concurrent runs never share a folder. A given ``out`` that holds a run (any of
    `RUN_FILES`) is refused unless ``overwrite``; with it the old run's files go first, so
    nothing of it (an old timeline.json) stays beside the new one. Call it once per run (under
    MPI: on one rank, and broadcast the path).

    Examples
    --------
    >>> import tempfile
    >>> runs = tempfile.TemporaryDirectory()
    >>> first = claim_run_folder(None, "serial-mnist", runs=runs.name)
    >>> second = claim_run_folder(None, "serial-mnist", runs=first.parent)
    >>> second.name == first.name + "-2" or second.name[:15] != first.name[:15]
    True
    >>> runs.cleanup()
    """
    try:
        return _claim(out, name, overwrite, runs)
    except OSError as err:  # a name too long, no permission, a read-only or full disk
        where = f"--out {out}" if out is not None else f"{runs}/"
        raise ValueError(f"{where}: cannot be a run folder ({err.strerror or err})") from None


def _claim(out, name, overwrite, runs):
    if out is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        return _claim_new(Path(runs) / f"{stamp}-{name}")
    if not str(out).strip():
        raise ValueError(f"--out must name a folder, got {out!r}")
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {out}: exists and is not a folder")
    held = [f for f in RUN_FILES if (path / f).exists()]
    if held and not overwrite:
        raise ValueError(
            f"--out {out} holds a run ({_status(path)}); give --overwrite to "
            f"replace it, or another --out"
        )
    for name_ in held:
        (path / name_).unlink()
    for marker in RUN_MARKERS:  # nothing of an earlier run speaks for this one
        (path / marker).unlink(missing_ok=True)
    RunFolder(path)
    return path


def _claim_new(path):
    for suffix in range(1, 1000):
        candidate = path if suffix == 1 else path.with_name(f"{path.name}-{suffix}")
        try:
            candidate.parent.mkdir(parents=True, exist_ok=True)
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
        except OSError as err:
            raise ValueError(
                f"--out {candidate}: cannot create the run folder ({err.strerror})"
            ) from err
    raise ValueError(f"--out: 999 runs named {path} already; give --out")


def _status(path):
    """A run folder's status for a message: config.json's, or what is wrong with it."""
    try:
        return f"status {json.loads((path / 'config.json').read_text())['status']!r}"
    except (OSError, ValueError, KeyError, TypeError):
        return "files of a run"


class RunFolder:
    """A run folder on disk; creates it (and its parents) if needed.

    Examples
    --------
    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> run = RunFolder(folder.name)
    >>> run.write_json("summary.json", {"time_s": 1.5})
    >>> json.loads((run.path / "summary.json").read_text())
    {'time_s': 1.5}
    >>> folder.cleanup()
    """

    def __init__(self, path):
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            why = err.strerror
            raise ValueError(f"--out {path}: cannot create the run folder ({why})") from err

    def write_json(self, name, document, indent=2):
        """Replace ``name`` with ``document`` as JSON (indented, unless ``indent`` is None: a
        large machine-read file such as timeline.json), atomically."""
        self.write_bytes(name, json_bytes(document, indent))

    def write_bytes(self, name, data):
        """Replace ``name`` with the bytes ``data`` (or a list of bytes, one after another)
        atomically (where the disk is full, in place: `_rewrite_in_place`): a document already
        written as JSON (timeline.json, in pieces: `runlog.chrome_trace_pieces`), a copy of the
        run's profile."""
        try:
            self._replace(name, lambda fh: fh.writelines(_pieces(data)))
        except OSError as err:
            if err.errno not in (errno.ENOSPC, errno.EDQUOT) or not (self.path / name).exists():
                raise
            self._rewrite_in_place(name, data)

    def _rewrite_in_place(self, name, data):
        """A disk with no room for a new copy of ``name``: rewrite the old one where it lies (its
        blocks freed first, then reused), so a run that stops on a full disk can still say so
        in config.json. Not atomic: only for that last word."""
        fd = os.open(self.path / name, os.O_WRONLY)
        try:
            os.ftruncate(fd, 0)
            for piece in _pieces(data):
                _write_all(fd, piece, self.path / name)
        finally:
            os.close(fd)

    def read_json(self, name):
        """The JSON document ``name`` as written (NaN as None, numpy scalars plain)."""
        return json.loads((self.path / name).read_text())

    def save_arrays(self, name, arrays):
        """Replace ``name`` (an .npz, as `numpy.savez` writes it) with the named arrays,
        atomically. The archive's entries carry a fixed date, so the same weights give the same
        bytes (np.savez stamps them with the clock)."""

        def write(fh):
            with zipfile.ZipFile(fh, "w") as archive:
                for key, array in arrays.items():
                    entry = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                    with archive.open(entry, "w", force_zip64=True) as member:
                        np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)

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


def _pieces(data):
    """``data`` (bytes, or a list of bytes) as a sequence of bytes."""
    return (data,) if isinstance(data, bytes | bytearray | memoryview) else data


FLUSH_ROWS = 2048  # rows held back at most: their values stay in the caches and memory flat


class CsvLog:
    """An append-only CSV file grown by whole lines (one ``write(2)`` per flush).

    Several processes may append to one file (``append=True`` on all but its creator): on a local
    file system each ``O_APPEND`` write lands whole at the end, so lines never interleave. Lines are
    held back at most ``flush_s`` seconds (0: written at once), so a busy log costs one system call
    per interval rather than per row; a kill loses at most that interval, never half a line.
    `write_values` (the simulator's row per node and step) also flushes every `FLUSH_ROWS` rows:
    a second of a fast simulation's rows held as Python objects until their flush took memory
    the run kept touching (the ping-pong benchmark 2-3 % faster flushed so, 2026-12-04).
    """

    def __init__(self, path, columns, append=False, flush_s=0.0):
        self.path, self.columns, self.flush_s = Path(path), tuple(columns), flush_s
        self._pending, self._flushed_at = [], time.monotonic()
        if append:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        else:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
            _write_all(self._fd, (",".join(self.columns) + "\n").encode(), self.path)

    def write_rows(self, rows):
        """Append rows (dicts keyed by column; a missing key writes an empty field). The values
        are kept as they are and formatted once, all together, when they are flushed."""
        columns = self.columns
        self._pending.extend([row.get(c) for c in columns] for row in rows)
        self._flush_if_due()

    def write_values(self, values):
        """Append one row given as its values in the order of ``columns`` (`write_rows` without
        a dict: the simulator writes a row per node and step)."""
        pending = self._pending
        pending.append(values)
        if len(pending) >= FLUSH_ROWS or time.monotonic() - self._flushed_at >= self.flush_s:
            self.flush()

    def _flush_if_due(self):
        if time.monotonic() - self._flushed_at >= self.flush_s:
            self.flush()

    def flush(self):
        """Write the lines held back, in one system call (more only if the kernel takes part of
        them: a regular file does that only when the disk fills, and the next call then fails
        loudly with `OSError` naming the file, rather than leaving a torn line unsaid)."""
        if self._pending:
            data = _lines(self._pending).encode()
            self._pending.clear()
            _write_all(self._fd, data, self.path)
        self._flushed_at = time.monotonic()

    def close(self):
        if self._fd is not None:
            self.flush()
            os.close(self._fd)
            self._fd = None


def _write_all(fd, data, path):
    """``write(2)`` all of ``data``, or none of it: when the disk fills (or a file size limit is
    reached) part way, the file is cut back to where this write began, so a reader only ever sees
    whole lines; then OSError naming ``path`` and the bytes lost."""
    view = memoryview(data)
    start = None
    while view:
        try:
            if start is None:  # where an O_APPEND write lands: the end, now
                start = os.lseek(fd, 0, os.SEEK_END)
            written = os.write(fd, view)
        except OSError as err:
            if start is not None and len(view) < len(data):  # a torn line: take it back
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)
            raise OSError(
                err.errno, f"{path}: {len(data)} bytes not written ({err.strerror})"
            ) from err
        view = view[written:]


def _lines(rows):
    """CSV lines of rows of values, all of one length: each field is ``str`` of its value (a
    float's is its shortest repr, which round-trips exactly); None and NaN are empty fields.

    A simulated run writes millions of rows, so they are formatted in C: all at once by orjson
    where every value is a float, an int of 64 bits or None (`_python_floats`); else a column
    at a time (`_column_texts`).

    >>> _lines([[1, 0.1, None, float("nan"), 2.5e-06], [2, -0.0, 3, 0.0, 1.5e-05]])
    '1,0.1,,,2.5e-06\\n2,-0.0,3,0.0,1.5e-05\\n'
    >>> _lines([[1, "x", True], [2, "y", float("inf")]])
    '1,x,True\\n2,y,inf\\n'
    """
    if not rows:
        return ""
    try:
        text = orjson.dumps(rows).decode()
    except TypeError:  # (orjson's error is one) numpy's scalars, ints past 64 bits
        return _lines_by_column(rows)
    # strings, bools, dicts: str's own forms (a character no number or null has: one scan each)
    if '"' in text or "t" in text or "f" in text or "{" in text:
        return _lines_by_column(rows)
    # a list in a field, or rows of other lengths (which the columns refuse: ValueError)
    if text.count("[") != len(rows) + 1 or text.count(",") != len(rows) * len(rows[0]) - 1:
        return _lines_by_column(rows)
    nulls = "null" in text
    if nulls and not _INFINITIES.isdisjoint(chain.from_iterable(rows)):
        return _lines_by_column(rows)  # (orjson writes an infinity as null, as it does NaN)
    text = _python_floats(text)[2:-2].replace("],[", "\n")
    return (text.replace("null", "") if nulls else text) + "\n"


def _lines_by_column(rows):
    """`_lines` a column at a time (`_column_texts`), for values orjson does not write as
    ``str`` does."""
    texts = [_column_texts(column) for column in zip(*rows, strict=True)]
    return "\n".join(map(",".join, zip(*texts, strict=True))) + "\n"


def _column_texts(column):
    """The fields of a column: ``str`` of each value, None and NaN empty.

    Each distinct value's text is made once where the column is of one type, int or float, and
    its values repeat: a float's shortest repr costs some thousands of instructions. A dict
    would take 1 for 1.0, so a column of mixed types is formatted value by value; and 0.0 and
    -0.0 are one key of it, so the zeros of the other sign than the one kept get their own text
    back."""
    kinds = set(map(type, column))
    if kinds != _INT and kinds != _FLOAT:
        return _emptied(list(map(str, column)))
    distinct = set(column)
    if 2 * len(distinct) > len(column):  # mostly distinct: a dict would cost more than it saves
        texts = list(map(str, column))
        return _emptied(texts) if kinds == _FLOAT else texts
    text = {value: str(value) if value == value else "" for value in distinct}  # NaN: ""
    texts = list(map(text.__getitem__, column))
    if kinds == _FLOAT and 0.0 in text:
        values = np.array(column)
        kept_negative = text[0.0] == "-0.0"
        other = (values == 0.0) & (np.signbit(values) != kept_negative)
        for i in np.flatnonzero(other).tolist():
            texts[i] = "0.0" if kept_negative else "-0.0"
    return texts


def _emptied(texts):
    """``texts`` with every field of None or NaN empty."""
    if "None" in texts or "nan" in texts:
        return ["" if text == "None" or text == "nan" else text for text in texts]
    return texts


def _python_floats(text):
    """orjson's ``text`` with its floats in ``str``'s forms.

    orjson writes a float's shortest digits by Ryu (the same digits as ``str``; 35-45 ns a
    value where ``str`` takes 700-1,400: the simulator writes a steps.csv row per node-step,
    and its floats were 16 % of a message-level run's instructions, 2026-12-04), in forms of
    its own in two places: an exponent of one digit (``1e-8``, where ``str`` writes ``1e-08``),
    and 1e-05 <= |x| < 1e-04 in fixed notation (``0.000015``, where ``str`` writes
    ``1.5e-05``). Every other form is already ``str``'s: fixed from 1e-04 to below 1e+16,
    ``1e+16`` and ``1e-10`` beyond, ``-0.0``."""
    if "0.0000" in text:  # (each pass only where its literal occurs: one costs 0.3 us a value)
        text = _FIXED_E05.sub(_e05, text)
    if "e-" in text:
        text = _ONE_DIGIT_EXPONENT.sub("e-0", text)
    return text


def float_pairs(values, between):
    """``repr(a) + between + repr(b)`` of each row (a, b) of ``values``, an (n, 2) float64 array
    (finite; ``repr`` is what `json.dumps` writes), formatted all at once in C: orjson's digits
    of the array itself (no float object a value), `_python_floats`' forms, and ``between`` put
    in by one replace over the whole text. A simulated timeline writes a pair an event, a few
    events a message. ValueError for an infinity or NaN.

    >>> float_pairs(np.array([[0.1, 1.5e-05], [-0.0, 1e16], [2.5e-08, 3.0]]), "; ")
    ['0.1; 1.5e-05', '-0.0; 1e+16', '2.5e-08; 3.0']
    """
    if not len(values):
        return []
    text = orjson.dumps(np.ascontiguousarray(values, np.float64), option=_NUMPY).decode()
    if "null" in text:
        raise ValueError("float_pairs: an infinity or NaN has no JSON number")
    # "[[a,b],[c,d]]": the rows' own commas become ``between``, the rows' joints a newline, and
    # the brackets at the ends come off the first and last rows (no copy of the whole for them)
    pairs = _python_floats(text).replace("],[", "\n").replace(",", between).split("\n")
    pairs[0] = pairs[0][2:]
    pairs[-1] = pairs[-1][:-2]  # (after: with one row, the first is the last)
    return pairs


_NUMPY = orjson.OPT_SERIALIZE_NUMPY


def rounded(values, ndigits):
    """``[round(x, ndigits) for x in values]`` (a float64 array; 0 <= ndigits <= 22, where
    10**ndigits is a float exactly) at numpy's speed, the same floats (`rounded_array`'s, as a
    list).

    >>> rounded(np.array([0.0625, 1.0005, -0.0004, 2.675, 123.4567891]), 3)
    [0.062, 1.0, -0.0, 2.675, 123.457]
    """
    return rounded_array(values, ndigits).tolist()


def rounded_array(values, ndigits):
    """``round(x, ndigits)`` of each float of the float64 array ``values`` (any shape), as an
    array of its shape: ``rint(x * 10**ndigits) / 10**ndigits``, and ``round`` itself where that
    can differ. The product's rounding never carries it across a half (the half, below 2**52,
    is a float itself, nearer than anything past it), only onto one, where the exact product
    may lie either side: those, and products past 2**52 or not finite, go to ``round``. The
    division is correctly rounded, as is ``round``'s conversion back from its digits."""
    if not 0 <= ndigits <= 22:
        raise ValueError(f"rounded: ndigits must be 0-22 (10**ndigits exact), got {ndigits}")
    scale = 10.0**ndigits
    with np.errstate(over="ignore", invalid="ignore"):  # (an infinity: in doubt, NaN's off_half)
        # in place where it can be: a timeline's are some MB, and fresh memory costs its pages
        scaled = values * scale
        out = np.rint(scaled)
        out /= scale
        off_half = np.floor(scaled)
        np.subtract(scaled, off_half, out=off_half)
        off_half -= 0.5
        np.abs(off_half, out=off_half)
        doubt = ~(off_half > 0.0)
        np.abs(scaled, out=scaled)
        doubt |= ~(scaled < 2.0**52)
    flat, original = out.reshape(-1), np.asarray(values).reshape(-1)
    for i in np.flatnonzero(doubt).tolist():
        flat[i] = round(float(original[i]), ndigits)
    return out


_INFINITIES = frozenset((math.inf, -math.inf))
# orjson's forms that str writes otherwise; each begins with its literal, which the regular
# expression engine finds at C speed, and looks behind it for a field's start ([, a comma, a sign)
_FIXED_E05 = re.compile(r"0\.0000(?<=[\[,-]0\.0000)([1-9])(\d*)(?=[,\]])")  # 0.000015, 0.00001


def _e05(match):
    """``str``'s form of orjson's ``0.0000`` match: 1.5e-05, 1e-05 (a function, not a template:
    Python 3.11 expands a template in Python, 1.2 us a match against 0.7)."""
    digits = match[2]
    return f"{match[1]}.{digits}e-05" if digits else f"{match[1]}e-05"


_ONE_DIGIT_EXPONENT = re.compile(r"e-(?=\d[,\]])")  # 1.5e-8: 1.5e-08

_INT, _FLOAT = {int}, {float}


def json_bytes(document, indent=None):
    """``document`` as strict JSON and a newline, encoded: numpy scalars plain, NaN and
    infinities null (`_jsonable`), indented by ``indent`` (None: one line)."""
    return (json.dumps(_jsonable(document), indent=indent, allow_nan=False) + "\n").encode()


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
