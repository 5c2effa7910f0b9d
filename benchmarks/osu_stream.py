"""A real cluster's streams predicted: osu_bw and osu_mbw_mr at every count of pairs, from its
latency table, its osu_bw and one osu_mbw_mr.

For each folder holding ``osu_latency_nodes2_ppn1.txt``, ``osu_bw_nodes2_ppn1.txt`` and
``osu_mbw_mr_np{R}_nodes2_ppn{P}.txt`` tables (R = 2P ranks, P a host: P pairs crossing from
one host to the other), `sim.calibrate` fits a profile to the latency table, osu_bw and each
osu_mbw_mr in turn (``[network.gap]`` from osu_bw, ``[network.nic_gap]`` from that table;
"none": no osu_mbw_mr, so no gap: a message holds its links n / beta(n)), and `sim.osu`
simulates osu_bw and every osu_mbw_mr of the folder; printed: the median |error| over sizes
of each (the held-in table's in brackets), then how many held-out tables are within 10 %.
Before the gap (a message held its links ``n / beta(n)`` of the latency table) AlaSKA's were
30-72 % off (docs/osu.md).

Run ``python benchmarks/osu_stream.py FOLDER[:MPI] ...`` (``MPI`` as ``sim.osu --mpi``, default
``openmpi`` where the folder's name says ompi, else ``mpich``; two minutes a folder). The
project carries no such tables: docs/osu.md ("A stream's gap") says where AlaSKA's come from.
"""

import sys

import numpy as np
from osu_holdout import folders_of, mbw_mr_tables  # (benchmarks/ is this script's path)

from sim.calibrate import cluster_for, fit_profile, profile_of
from sim.osu import osu_value, simulate_benchmark
from twinsgd.calibration.osu_tables import read_table

WITHIN = 0.10


def stream_tables(folder):
    """{pairs: OsuTable} of the folder's osu_bw (1) and osu_mbw_mr tables, with their shapes."""
    return {1: read_table(str(folder / "osu_bw_nodes2_ppn1.txt")), **mbw_mr_tables(folder)}


def median_error(table, profile, mpi):
    """Median |error| over sizes of ``table``'s simulated rates against its measured ones."""
    cluster = cluster_for(table, profile, None, mpi)
    sizes = [int(n) for n in table.sizes]
    rates = [
        osu_value(table.bench, simulate_benchmark(table.bench, cluster, n, 1, mpi), n, 1)
        for n in sizes
    ]
    measured = table.sizes / table.seconds / 1e6  # MB/s
    return float(np.median(np.abs(np.array(rates) / measured - 1)))


def main(folders):
    """``folders``: (folder, MPI library) pairs."""
    held_out = []
    for folder, mpi in folders:
        latency = read_table(str(folder / "osu_latency_nodes2_ppn1.txt"))
        tables = stream_tables(folder)
        pairs = sorted(tables)
        print(f"{folder.name} ({mpi}): median |error| over sizes, the held-in table's in brackets")
        print(
            "| fitted to | "
            + " | ".join("osu_bw" if p == 1 else f"{p} pairs" for p in pairs)
            + " |"
        )
        print("|---" * (len(pairs) + 1) + "|")
        for held in [None, *pairs[1:]]:
            given = [latency, tables[1]] + ([tables[held]] if held else [])
            profile = profile_of(fit_profile(given, mpi, say=lambda _: None))
            cells = []
            for p in pairs:
                error = median_error(tables[p], profile, mpi)
                fitted = (p == 1 and held is not None) or p == held
                cells.append(f"({100 * error:.1f} %)" if fitted else f"{100 * error:.1f} %")
                if not fitted and held:
                    held_out.append(error)
            name = f"{held} pairs" if held else "none (no gap: n / beta(n) held)"
            print(f"| {name} | " + " | ".join(cells) + " |")
        print()
    within = sum(e <= WITHIN for e in held_out)
    print(
        f"{within} of {len(held_out)} held-out osu_mbw_mr tables within {WITHIN:.0%} median |error|"
    )


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python benchmarks/osu_stream.py FOLDER[:MPI] ...")
    main(folders_of(sys.argv[1:]))
