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
# IMB-MPI1's benchmark name -> (our name, column of the time in microseconds)
IMB_BENCHMARKS = {
    "PingPong": ("imb_pingpong", "t[usec]"),
    "Sendrecv": ("imb_sendrecv", "t_avg[usec]"),
    "Allreduce": ("imb_allreduce", "t_avg[usec]"),
    "Bcast": ("imb_bcast", "t_avg[usec]"),
    "Allgather": ("imb_allgather", "t_avg[usec]"),
    "Alltoall": ("imb_alltoall", "t_avg[usec]"),
}
POINT_TO_POINT = {
    "osu_latency",
    "osu_bw",
    "osu_bibw",
    "osu_multi_lat",
    "osu_mbw_mr",
    "imb_pingpong",
    "imb_sendrecv",
}
_OSU_HEADER = re.compile(r"#\s*OSU MPI(?:-CUDA)? (.+?) (?:v\d|\()")
_IMB_HEADER = re.compile(r"#\s*Benchmarking (\S+)")
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
    """The `OsuTable` of ``spec`` = ``FILE`` or ``FILE:RANKSxPER_HOST``; ValueError naming the
    file (and line) for a file that is not OSU or IMB output, a table with missing, negative or
    non-increasing sizes or values that are not > 0, or a shape that does not parse or divide.
    ``need_shape`` False: a collective's table without a shape is read too (ranks 0: unknown),
    for comparing tables size by size."""
    path, ranks, per_host = _split_shape(spec)
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: cannot read ({err.__class__.__name__}: {err})") from None
    for number, line in enumerate(lines, 1):
        osu = _OSU_HEADER.match(line.strip())
        if osu and osu.group(1) in OSU_TITLES:
            bench, kind = OSU_TITLES[osu.group(1)]
            rows = _osu_rows(path, lines, number)
            break
        imb = _IMB_HEADER.match(line.strip())
        if imb and imb.group(1) in IMB_BENCHMARKS:
            bench, column = IMB_BENCHMARKS[imb.group(1)]
            kind, rows = "latency", _imb_rows(path, lines, number, column)
            break
    else:
        raise ValueError(
            f"{path}: not OSU or IMB-MPI1 output (no '# OSU MPI ... Test' or "
            f"'# Benchmarking NAME' header of a benchmark read here)"
        )
    if ranks is None and bench not in POINT_TO_POINT and not need_shape:
        ranks, per_host = 0, 1
    if ranks is None:
        if bench not in POINT_TO_POINT:
            raise ValueError(
                f"{path}: a collective's table needs its job's shape: {path}:RANKSxPER_HOST"
            )
        ranks, per_host = 2, 1
    sizes, values = _check_rows(path, rows, allow_zero_size=kind == "latency")
    return OsuTable(path, bench, sizes, _seconds(kind, sizes, values), ranks, per_host)


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


def _osu_rows(path, lines, header):
    """(line number, size, value) of an OSU table: rows after the header until the first line
    that is neither a row nor a comment; the value is the first column after the size."""
    rows = []
    for number, line in enumerate(lines[header:], header + 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            if rows and not fields:
                break
            continue
        rows.append((number, fields[0], fields[1] if len(fields) > 1 else None))
    return rows


def _imb_rows(path, lines, header, column):
    """(line number, size, value) of an IMB table: its ``#bytes`` header names the columns."""
    rows, names = [], None
    for number, line in enumerate(lines[header:], header + 1):
        fields = line.split()
        if names is None:
            if fields and fields[0] == "#bytes":
                names = fields
                if column not in names:
                    raise ValueError(f"{path}:{number}: no column {column} in {' '.join(names)}")
            continue
        if not fields or fields[0].startswith("#"):
            if rows:
                break
            continue
        index = names.index(column)
        rows.append((number, fields[0], fields[index] if len(fields) > index else None))
    return rows


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
