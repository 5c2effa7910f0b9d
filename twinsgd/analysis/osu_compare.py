"""``python -m twinsgd.analysis.osu_compare MEASURED SIMULATED``: two OSU tables of one benchmark
side by side, size by size, with the simulated one's error and its median over sizes.

Examples
--------
::

    mpiexec -n 2 python -m real.osu osu_allreduce > measured.txt
    python -m sim.osu osu_allreduce --profile runs/this-machine.toml > simulated.txt
    python -m twinsgd.analysis.osu_compare measured.txt simulated.txt --plot allreduce.png

Either file may be any OSU or IMB output (`twinsgd.calibration.osu_tables`); the sizes both hold
are compared. Error = simulated / measured - 1 of the tables' own numbers (a latency's or a
bandwidth's). Exit status 2 with one line for a file that is not a table, or two of different
benchmarks.
"""

import sys

import numpy as np

from twinsgd.calibration.osu_tables import read_table
from twinsgd.cli import OneLineParser
from twinsgd.run.interrupt import one_line_on_interrupt


def compare(measured, simulated, min_bytes=0):
    """Rows ``(size, measured, simulated, error)`` of the sizes both `OsuTable` hold from
    ``min_bytes`` up, in the tables' own unit (microseconds, or MB/s for a bandwidth), and the
    median |error| over them (NaN if none)."""
    if measured.bench != simulated.bench:
        raise ValueError(
            f"{simulated.path} is {simulated.bench}, {measured.path} is {measured.bench}: "
            f"compare tables of one benchmark"
        )
    common = np.intersect1d(measured.sizes, simulated.sizes)
    common = common[common >= min_bytes]
    bandwidth = measured.bench in ("osu_bw", "osu_bibw", "osu_mbw_mr")
    rows = []
    for n in common:
        m = measured.seconds[measured.sizes == n][0]
        s = simulated.seconds[simulated.sizes == n][0]
        error = m / s - 1 if bandwidth else s / m - 1  # of the rate, or of the time
        scale = (n / 1e6) if bandwidth else 1e6
        values = (scale / m, scale / s) if bandwidth else (m * scale, s * scale)
        rows.append((int(n), *values, error))
    median = float(np.median([abs(r[3]) for r in rows])) if rows else float("nan")
    return rows, median


def plot(rows, bench, out):
    """Both tables against size, log-log, into the image ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [max(r[0], 1) for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(sizes, [r[1] for r in rows], "o-", label="measured")
    ax.loglog(sizes, [r[2] for r in rows], "s--", label="simulated")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("MB/s" if bench in ("osu_bw", "osu_bibw") else "latency (us)")
    ax.set_title(bench)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


@one_line_on_interrupt("python -m twinsgd.analysis.osu_compare")
def main(argv=None):
    parser = OneLineParser(
        prog="python -m twinsgd.analysis.osu_compare",
        description="Compare a measured and a simulated OSU table, size by size.",
    )
    parser.add_argument("measured", help="OSU/IMB output (e.g. real.osu's, or the site's)")
    parser.add_argument("simulated", help="sim.osu's output")
    parser.add_argument("--min-size", type=int, default=0, metavar="BYTES", help="from this size")
    parser.add_argument("--plot", metavar="FILE.png", help="also draw both against size")
    args = parser.parse_args(argv)
    try:
        measured = read_table(args.measured, need_shape=False)
        simulated = read_table(args.simulated, need_shape=False)
        rows, median = compare(measured, simulated, args.min_size)
    except ValueError as err:
        parser.error(str(err))
    unit = "MB/s" if measured.bench in ("osu_bw", "osu_bibw") else "us"
    print(f"| size (B) | measured ({unit}) | simulated ({unit}) | error % |")
    print("|---|---|---|---|")
    for n, m, s, error in rows:
        print(f"| {n} | {m:.2f} | {s:.2f} | {100 * error:+.1f} |")
    print(f"\n{measured.bench}: median |error| {100 * median:.1f} % over {len(rows)} sizes")
    if args.plot:
        plot(rows, measured.bench, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
