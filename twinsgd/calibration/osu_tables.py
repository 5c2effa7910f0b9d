"""Read the text tables of the OSU micro-benchmarks and of IMB-MPI1: a site's measurements, as its
users already have them.

Why a reader of their text: a cluster's published or archived measurements are these files, byte
for byte as the benchmarks printed them; nothing has to be run again to calibrate from them. The
benchmark is recognised from the file's own header (OSU's ``# OSU MPI ... Test vX``, IMB's
``# Benchmarking NAME``), and the job's shape, which the text does not say, from a suffix on the
path: ``FILE:RANKSxPER_HOST`` (``osu_allreduce.txt:64x32``: 64 ranks, 32 a host). Point-to-point
tables default to ``2x1`` (two hosts, one rank each), as they are usually run.

Every table becomes seconds: a latency table's ``t(n)`` (OSU's one-way latency: half a round
trip; a collective's average over ranks of each rank's mean time a call), a bandwidth table's
time a message, ``n / bandwidth`` (for ``osu_bibw`` per direction: half the sum).

Examples
--------
>>> import tempfile, pathlib
>>> folder = tempfile.TemporaryDirectory()
>>> path = pathlib.Path(folder.name) / "lat.txt"
>>> _ = path.write_text("# OSU MPI Latency Test v5.6.2\\n# Size          Latency (us)\\n"
...                     "0                       1.50\\n1024                    2.27\\n")
>>> table = read_table(str(path))
>>> table.bench, table.ranks, table.ranks_per_host, table.sizes.tolist(), table.seconds.tolist()
('osu_latency', 2, 1, [0, 1024], [1.5e-06, 2.27e-06])
>>> folder.cleanup()
"""

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# OSU's header title -> (benchmark name, kind of its value column)
OSU_TITLES = {
    "Latency Test": ("osu_latency", "latency"),
    "Multi Latency Test": ("osu_multi_lat", "latency"),
    "Bandwidth Test": ("osu_bw", "bandwidth"),
    "Bi-Directional Bandwidth Test": ("osu_bibw", "bibandwidth"),
    "Multiple Bandwidth / Message Rate Test": ("osu_mbw_mr", "bandwidth"),
    "Allreduce Latency Test": ("osu_allreduce", "latency"),
    "Broadcast Latency Test": ("osu_bcast", "latency"),
    "Reduce Latency Test": ("osu_reduce", "latency"),
    "Allgather Latency Test": ("osu_allgather", "latency"),
    "All-to-All Personalized Exchange Latency Test": ("osu_alltoall", "latency"),
}
# IMB-MPI1's benchmark name -> (our name, the column read, its kind as OSU_TITLES's): a time in
# microseconds, or Uniband's total rate over its pairs in MB/s (rank r < P/2 sends windows of 64
# to r + P/2, an acknowledgement after each: osu_mbw_mr's method)
IMB_BENCHMARKS = {
    "PingPong": ("imb_pingpong", "t[usec]", "latency"),
    "Sendrecv": ("imb_sendrecv", "t_avg[usec]", "latency"),
    "Allreduce": ("imb_allreduce", "t_avg[usec]", "latency"),
    "Bcast": ("imb_bcast", "t_avg[usec]", "latency"),
    "Allgather": ("imb_allgather", "t_avg[usec]", "latency"),
    "Alltoall": ("imb_alltoall", "t_avg[usec]", "latency"),
    "Reduce": ("imb_reduce", "t_avg[usec]", "latency"),
    "Uniband": ("imb_uniband", "Mbytes/sec", "bandwidth"),
}
# benchmarks of exactly two ranks, which a job of several ranks a host runs on its ranks 0 and 1
TWO_RANKS = {"osu_latency", "osu_bw", "osu_bibw", "imb_pingpong", "imb_sendrecv"}
POINT_TO_POINT = {
    "osu_latency",
    "osu_bw",
    "osu_bibw",
    "osu_multi_lat",
    "osu_mbw_mr",
    "imb_pingpong",
    "imb_sendrecv",
    "imb_uniband",
}
_OSU_HEADER = re.compile(r"#\s*OSU MPI(?:-CUDA)? (.+?) (?:v\d|\()")
_IMB_HEADER = re.compile(r"#\s*Benchmarking (\S+)")
_IMB_PROCESSES = re.compile(r"#\s*#processes\s*=\s*(\d+)")
_SHAPE = re.compile(r"(.*):(\d+)x(\d+)")


# what a table's value column is called in OSU's output, by benchmark
OSU_COLUMNS = {
    "osu_latency": "Latency (us)",
    "osu_bw": "Bandwidth (MB/s)",
    "osu_bibw": "Bandwidth (MB/s)",
    "osu_mbw_mr": "MB/s",
    **dict.fromkeys(
        ("osu_allreduce", "osu_allgather", "osu_alltoall", "osu_bcast", "osu_reduce"),
        "Avg Latency(us)",
    ),
}


def osu_sizes(bench, low=None, high=None):
    """OSU's message sizes for ``bench``: 0 (latency) or 1 byte to 4 MiB point to point, 4 bytes
    to 1 MiB for collectives (allreduce: one float), the powers of two in between; or from
    ``low`` to ``high`` bytes (0 first if ``low`` is 0).

    >>> osu_sizes("osu_allreduce")[:3], osu_sizes("osu_latency", 0, 4)
    ([4, 8, 16], [0, 1, 2, 4])
    """
    if low is None:
        point_to_point = bench in POINT_TO_POINT
        low = (0 if bench == "osu_latency" else 1) if point_to_point else 4
        high = 4 << 20 if point_to_point else 1 << 20
    sizes, n = ([0] if low == 0 else []), 1
    while n <= high:
        if n >= low:
            sizes.append(n)
        n *= 2
    return sizes


def format_table(bench, note, rows):
    """Yield the lines of ``bench``'s table as OSU prints it (which `read_table` reads back):
    its header with ``note`` in parentheses where OSU puts its version, then a line per
    ``(size, value)`` of ``rows``, each as it comes (a measurement prints as it goes)."""
    title = next(t for t, (name, _) in OSU_TITLES.items() if name == bench)
    yield f"# OSU MPI {title} ({note})"
    yield f"# Size{OSU_COLUMNS[bench]:>24}"
    for nbytes, value in rows:
        yield f"{nbytes:<10d}{value:>18.2f}"


@dataclass(frozen=True)
class OsuTable:
    """One benchmark's table: ``sizes`` (bytes, increasing), ``seconds`` (per size: a one-way
    or per-call time, or a message's time at the measured bandwidth), ``bench`` (``osu_bw``,
    ``imb_pingpong``, ...), and the job's shape: ``ranks``, ``ranks_per_host``."""

    path: str
    bench: str
    sizes: np.ndarray
    seconds: np.ndarray
    ranks: int
    ranks_per_host: int

    @property
    def collective(self):
        """True for a collective's table (every rank of the job takes part)."""
        return self.bench not in POINT_TO_POINT

    @property
    def hosts(self):
        """Hosts of the job."""
        return self.ranks // self.ranks_per_host


def read_table(spec, need_shape=True):
    """The one `OsuTable` of ``spec`` = ``FILE`` or ``FILE:RANKSxPER_HOST`` (`read_tables`);
    ValueError also where the file holds several tables of benchmarks read here."""
    tables = read_tables(spec, need_shape)
    if len(tables) > 1:
        path = _split_shape(spec)[0]
        raise ValueError(
            f"{path}: holds {len(tables)} tables ({', '.join(t.bench for t in tables)}); "
            f"one is expected here"
        )
    return tables[0]


def read_tables(spec, need_shape=True, say=None):
    """Every table of ``spec`` = ``FILE`` or ``FILE:RANKSxPER_HOST`` of a benchmark read here,
    as `OsuTable` in the file's order.

    A file may hold several: a job script's OSU runs one after another, or IMB-MPI1's whole
    suite, which runs each benchmark at 2, 4, 8, ... processes up to the job's (a section
    ``# #processes = P`` each). Of IMB's sections the one of the job's ranks is read for a
    collective (the suffix's RANKS) and the one of 2 for PingPong and Sendrecv. A two-rank
    table (osu_latency, osu_bw, osu_bibw, IMB's PingPong and Sendrecv) is between two hosts
    unless the suffix puts several ranks on a host: then the job's ranks 0 and 1, which ran it,
    share one (ranks are placed a host at a time, as mpirun and srun place them by default).
    Benchmarks not read here (IMB's Barrier, OSU's osu_barrier, ...) are left out, and said to
    ``say`` if given. An IMB collective's 0-byte row (a call that moves nothing) is left out.

    ValueError naming the file (and line) for a file that holds no table read here, a table
    with missing, negative or non-increasing sizes or values that are not > 0, a benchmark
    twice, a shape that does not parse or divide, or an IMB collective without a section of
    the job's ranks. ``need_shape`` False: a collective's table without a shape is read too
    (ranks 0: unknown), for comparing tables size by size.
    """
    path, ranks, per_host = _split_shape(spec)
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: cannot read ({err.__class__.__name__}: {err})") from None
    found, skipped = _find_tables(path, lines)
    if not found and skipped:
        raise ValueError(
            f"{path}: no table of a benchmark read here ({', '.join(dict.fromkeys(skipped))}; "
            f"read here: {', '.join(name for name, _ in OSU_TITLES.values())}, IMB's "
            f"{', '.join(IMB_BENCHMARKS)})"
        )
    if not found:
        raise ValueError(
            f"{path}: not OSU or IMB-MPI1 output (no '# OSU MPI ... Test' or "
            f"'# Benchmarking NAME' header)"
        )
    if skipped and say is not None:
        say(f"{path}: not read (no model of them here): {', '.join(dict.fromkeys(skipped))}")
    tables, first = [], {}
    for bench, _, number, processes, _ in found:
        if (bench, processes) in first:
            raise ValueError(
                f"{path}:{number}: a second {bench} table (the first at line "
                f"{first[bench, processes]}); give each run's table a file of its own"
            )
        first[bench, processes] = number
    for bench in dict.fromkeys(f[0] for f in found):
        sections = [f for f in found if f[0] == bench]
        _, kind, number, processes, rows = _section(path, sections, ranks, need_shape)
        if bench in TWO_RANKS:
            shape = (2, 1 if per_host in (None, 1) else 2)
        elif bench in POINT_TO_POINT:
            shape = (2, 1) if ranks is None else (ranks, per_host)
        elif ranks is not None:
            shape = (ranks, per_host)
        elif need_shape:
            raise ValueError(
                f"{path}: a collective's table needs its job's shape: {path}:RANKSxPER_HOST"
            )
        else:
            shape = (processes or 0, 1)
        if bench.startswith("imb_") and (bench not in POINT_TO_POINT or kind != "latency"):
            rows = [row for row in rows if row[1] != "0"]  # an empty call; no rate of 0 bytes
        sizes, values = _check_rows(path, rows, allow_zero_size=kind == "latency")
        tables.append(OsuTable(path, bench, sizes, _seconds(kind, sizes, values), *shape))
    return tables


def _find_tables(path, lines):
    """``([(bench, kind, header line, IMB's processes or None, rows)], [names not read])`` of
    every OSU and IMB header of ``lines``, in order."""
    found, skipped = [], []
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if osu := _OSU_HEADER.match(text):
            if osu.group(1) not in OSU_TITLES:
                skipped.append(f"OSU {osu.group(1)}")
                continue
            bench, kind = OSU_TITLES[osu.group(1)]
            found.append((bench, kind, number, None, _osu_rows(path, lines, number)))
        elif imb := _IMB_HEADER.match(text):
            if imb.group(1) not in IMB_BENCHMARKS:
                skipped.append(f"IMB {imb.group(1)}")
                continue
            bench, column, kind = IMB_BENCHMARKS[imb.group(1)]
            processes, rows = _imb_rows(path, lines, number, column)
            found.append((bench, kind, number, processes, rows))
    return found, skipped


def _section(path, sections, ranks, need_shape):
    """Of one benchmark's tables in a file (several only for IMB: a section a process count),
    the one to read: a two-rank benchmark's of 2 processes, a collective's of the job's
    ranks; ValueError where there is none."""
    if len(sections) == 1 and sections[0][3] is None:
        return sections[0]
    bench, counts = sections[0][0], [s[3] for s in sections]
    if bench in TWO_RANKS or (bench in POINT_TO_POINT and ranks is None):
        want = 2
    elif ranks is None:
        if len(sections) == 1 and not need_shape:
            return sections[0]
        raise ValueError(
            f"{path}: IMB's {bench[4:]} was run at {_counts(counts)} processes: give the job's "
            f"shape, {path}:RANKSxPER_HOST, to read the section of its ranks"
        )
    else:
        want = ranks
    for section in sections:
        if section[3] == want:
            return section
    raise ValueError(
        f"{path}:{sections[0][2]}: IMB's {bench[4:]} was run at {_counts(counts)} processes, "
        f"not at {want} (the job's ranks, {path}:RANKSxPER_HOST)"
    )


def _counts(counts):
    return ", ".join(str(c) for c in counts)


def _split_shape(spec):
    """(path, ranks or None, ranks per host or None) of ``FILE[:RANKSxPER_HOST]``."""
    match = _SHAPE.fullmatch(spec)
    if match is None:
        if re.search(r":[^/]*x", spec) and not Path(spec).exists():
            raise ValueError(f"{spec}: the shape after ':' must be RANKSxPER_HOST, e.g. :64x32")
        return spec, None, None
    path, ranks, per_host = match.group(1), int(match.group(2)), int(match.group(3))
    if ranks < 1 or per_host < 1 or ranks % per_host:
        raise ValueError(
            f"{spec}: RANKSxPER_HOST needs ranks and ranks per host >= 1, the first a "
            f"multiple of the second, got {ranks}x{per_host}"
        )
    return path, ranks, per_host


def _is_row(fields):
    """Whether a line's fields start a table's row: its first is a whole number (a size)."""
    return bool(fields) and re.fullmatch(r"[+-]?\d+", fields[0]) is not None


def _osu_rows(path, lines, header):
    """(line number, size, value) of an OSU table: its rows (lines that start with a whole
    number) after the header, up to the first other line after them (a blank line, a comment,
    the next job's output, a prompt); the value is the first column after the size. Lines
    before the first row (OSU 7's ``# Datatype``, a launcher's warning) are passed over."""
    rows = []
    for number, line in enumerate(lines[header:], header + 1):
        fields = line.split()
        if not _is_row(fields):
            if rows or _OSU_HEADER.match(line.strip()) or _IMB_HEADER.match(line.strip()):
                break  # the table's end, or the next table's header before a row of this one
            continue
        rows.append((number, fields[0], fields[1] if len(fields) > 1 else None))
    return rows


def _imb_rows(path, lines, header, column):
    """(processes, rows) of an IMB section: ``# #processes = P`` (None if absent) and its
    (line number, size, value) rows; its ``#bytes`` header names the columns."""
    rows, names, processes = [], None, None
    for number, line in enumerate(lines[header:], header + 1):
        fields = line.split()
        if names is None:
            if match := _IMB_PROCESSES.match(line.strip()):
                processes = int(match.group(1))
            elif fields and fields[0] == "#bytes":
                names = fields
                if column not in names:
                    raise ValueError(f"{path}:{number}: no column {column} in {' '.join(names)}")
            elif _IMB_HEADER.match(line.strip()):
                break  # the next benchmark, before a table of this one
            continue
        if not _is_row(fields):
            if rows:
                break
            continue
        index = names.index(column)
        rows.append((number, fields[0], fields[index] if len(fields) > index else None))
    return processes, rows


def _check_rows(path, rows, allow_zero_size):
    """Sizes (int64) and values (float64) of ``rows``, each checked; ValueError naming the line."""
    if not rows:
        raise ValueError(f"{path}: the table has no rows")
    sizes, values = [], []
    for number, size, value in rows:
        where = f"{path}:{number}"
        try:
            n = int(size)
            v = float(value) if value is not None else None
        except ValueError:
            raise ValueError(f"{where}: expected a size and a number, got {size} {value}") from None
        if v is None:
            raise ValueError(f"{where}: the row of size {n} has no value")
        if n < 0 or (n == 0 and not (allow_zero_size and not sizes)):
            raise ValueError(
                f"{where}: sizes must be > 0 (0 only first, in a latency table), got {n}"
            )
        if sizes and n <= sizes[-1]:
            raise ValueError(f"{where}: sizes must increase, got {n} after {sizes[-1]}")
        if not v > 0 or not np.isfinite(v):
            raise ValueError(f"{where}: the value must be a number > 0, got {value}")
        sizes.append(n)
        values.append(v)
    return np.array(sizes, np.int64), np.array(values, np.float64)


def _seconds(kind, sizes, values):
    """Seconds per size: microseconds as they are; a bandwidth (MB/s, 1e6 bytes) as a message's
    time; a bidirectional one per direction (half the sum)."""
    if kind == "latency":
        return values * 1e-6
    per_direction = values / 2 if kind == "bibandwidth" else values
    return sizes / (per_direction * 1e6)
