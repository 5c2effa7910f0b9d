"""A real cluster's collectives predicted from its point-to-point tables and one collective.

For each folder (default: the two of ``../shared/osu``, AlaSKA's Intel MPI and Open MPI on the
same EDR nodes), each of its three collective tables (allreduce, allgather, alltoall; their job
shape from the file name, ``osu_allreduce_np64_nodes2_ppn32.txt``: 64 ranks, 32 a host) is held
in turn: `sim.calibrate` fits a profile to osu_latency, osu_bw and that table (and to the
folder's osu_mbw_mr tables of several pairs where it has them: the gap), then `sim.osu`'s
simulation of the other two is held against their measured tables. Prints, per folder and held
collective, the median and worst |error| over sizes >= 64 KiB and the fit's wall seconds (its
sizes simulated side by side on the machine's cores, `sim.calibrate`), then the size-by-size
tables and how many predictions are within 25 %.

Run ``python benchmarks/osu_holdout.py [FOLDER[:MPI] ...]`` (about a minute a folder on 2
cores; ``MPI`` as ``sim.osu --mpi``, default ``mpich``, or ``openmpi`` where the folder's name
says ompi). Other clusters' tables in that layout: docs/osu.md ("Held out on more clusters").
"""

import re
import sys
from pathlib import Path
from time import perf_counter

import numpy as np

from sim.calibrate import FIT_MIN_BYTES, fit_profile, profile_of, simulated_seconds
from twinsgd.calibration.osu_tables import read_table

COLLECTIVES = ("allreduce", "allgather", "alltoall")
WITHIN = 0.25  # the bound on a held-out table's median |error|


def collective_table(folder, bench):
    """The `OsuTable` of ``folder``'s one ``osu_{bench}_np{R}_nodes{H}_ppn{P}.txt``, read with
    its job shape R x P."""
    (path,) = folder.glob(f"osu_{bench}_np*_nodes*_ppn*.txt")
    shape = re.fullmatch(rf"osu_{bench}_np(\d+)_nodes\d+_ppn(\d+)\.txt", path.name)
    return read_table(f"{path}:{shape[1]}x{shape[2]}")


def mbw_mr_tables(folder):
    """{pairs: OsuTable} of ``folder``'s ``osu_mbw_mr_np{R}_nodes2_ppn{P}.txt`` tables whose
    pairs all cross (R = 2P, P > 1), read with their shapes: the NIC's (`sim.calibrate`)."""
    tables = {}
    for path in sorted(folder.glob("osu_mbw_mr_np*_nodes2_ppn*.txt")):
        shape = re.fullmatch(r"osu_mbw_mr_np(\d+)_nodes2_ppn(\d+)\.txt", path.name)
        ranks, per_host = int(shape[1]), int(shape[2])
        if ranks == 2 * per_host and per_host > 1:
            tables[per_host] = read_table(f"{path}:{ranks}x{per_host}")
    return tables


def held_out(folder, held, mpi):
    """(fitted memory path, the fit's wall seconds, {collective: [(size, measured s, simulated
    s)]}) for the profile fitted with ``held`` in, over the collectives' sizes >= FIT_MIN_BYTES."""
    tables = [
        read_table(str(folder / "osu_latency_nodes2_ppn1.txt")),
        read_table(str(folder / "osu_bw_nodes2_ppn1.txt")),
        collective_table(folder, held),
        *mbw_mr_tables(folder).values(),  # where given: the stream's gap and the NIC's
    ]
    start = perf_counter()
    profile = profile_of(fit_profile(tables, mpi, say=lambda _: None))
    fit_s = perf_counter() - start
    rows = {}
    for other in COLLECTIVES:
        table = collective_table(folder, other)
        rows[other] = [
            (int(n), s, simulated_seconds(table, int(n), profile, profile.memory, mpi))
            for n, s in zip(table.sizes, table.seconds, strict=True)
            if n >= FIT_MIN_BYTES
        ]
    return profile.memory, fit_s, rows


def main(folders):
    """``folders``: (folder, MPI library) pairs."""
    summary, details, medians = [], [], []
    for folder, mpi in folders:
        library = folder.name
        for held in COLLECTIVES:
            memory, fit_s, rows = held_out(folder, held, mpi)
            for other, points in rows.items():
                errors = np.array([sim / meas - 1 for _, meas, sim in points])
                if other != held:
                    medians.append(float(np.median(np.abs(errors))))
                summary.append(
                    f"| {library} | {held} | {other}{' (fitted)' if other == held else ''} | "
                    f"{100 * np.median(np.abs(errors)):.1f} | {100 * np.max(np.abs(errors)):.1f} | "
                    f"{memory.bandwidth_Bps / 1e9:.2f} GB/s x {memory.channels} | {fit_s:.1f} |"
                )
                if other != held:
                    details += [
                        f"| {library} | {held} | {other} | {n} | {meas * 1e6:.1f} | "
                        f"{sim * 1e6:.1f} | {100 * (sim / meas - 1):+.1f} |"
                        for n, meas, sim in points
                    ]
    print(
        "| library | fitted to | predicted | median abs error % | worst % | memory fitted | fit s |"
    )
    print("|---|---|---|---|---|---|---|")
    print("\n".join(summary))
    print()
    print(
        "| library | fitted to | predicted | size (B) | measured (us) | simulated (us) | error % |"
    )
    print("|---|---|---|---|---|---|---|")
    print("\n".join(details))
    print()
    within = sum(m <= WITHIN for m in medians)
    print(f"{within} of {len(medians)} held-out tables within {WITHIN:.0%} median |error|")


def folders_of(args):
    """(folder, MPI library) of each ``FOLDER[:MPI]`` argument; none: ../shared/osu's two."""
    if not args:
        root = Path(__file__).parents[2] / "shared" / "osu"
        return [(root / "alaska-impi", "mpich"), (root / "alaska-ompi", "openmpi")]
    pairs = []
    for arg in args:
        folder, _, mpi = arg.partition(":")
        pairs.append((Path(folder), mpi or ("openmpi" if "ompi" in Path(folder).name else "mpich")))
    return pairs


if __name__ == "__main__":
    main(folders_of(sys.argv[1:]))
