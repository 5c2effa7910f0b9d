"""A real cluster's collectives predicted from its point-to-point tables and one collective.

For each library of ``../shared/osu`` (AlaSKA: Intel MPI and Open MPI on the same EDR nodes),
each of its three collective tables (allreduce, allgather, alltoall at 64 ranks = 2 x 32) is held
in turn: `sim.calibrate` fits a profile to osu_latency, osu_bw and that table, then `sim.osu`'s
simulation of the other two is held against their measured tables. Prints, per library and held
collective, the median and worst |error| over sizes >= 64 KiB and the fit's wall seconds (its
sizes simulated side by side on the machine's cores, `sim.calibrate`), then the size-by-size
tables.

Run ``python benchmarks/osu_holdout.py [OSU_FOLDER]`` (about a minute a library on 2 cores).
"""

import sys
from pathlib import Path
from time import perf_counter

import numpy as np

from sim.calibrate import FIT_MIN_BYTES, fit_profile, profile_of, simulated_seconds
from twinsgd.calibration.osu_tables import read_table

COLLECTIVES = ("allreduce", "allgather", "alltoall")
SHAPE = ":64x32"


def held_out(folder, held, mpi):
    """(fitted memory path, the fit's wall seconds, {collective: [(size, measured s, simulated
    s)]}) for the profile fitted with ``held`` in, over the collectives' sizes >= FIT_MIN_BYTES."""
    tables = [
        read_table(str(folder / "osu_latency_nodes2_ppn1.txt")),
        read_table(str(folder / "osu_bw_nodes2_ppn1.txt")),
        read_table(f"{folder / f'osu_{held}_np64_nodes2_ppn32.txt'}{SHAPE}"),
    ]
    start = perf_counter()
    profile = profile_of(fit_profile(tables, mpi, say=lambda _: None))
    fit_s = perf_counter() - start
    rows = {}
    for other in COLLECTIVES:
        table = read_table(f"{folder / f'osu_{other}_np64_nodes2_ppn32.txt'}{SHAPE}")
        rows[other] = [
            (int(n), s, simulated_seconds(table, int(n), profile, profile.memory, mpi))
            for n, s in zip(table.sizes, table.seconds, strict=True)
            if n >= FIT_MIN_BYTES
        ]
    return profile.memory, fit_s, rows


def main(root):
    summary, details = [], []
    for library, mpi in (("alaska-impi", "mpich"), ("alaska-ompi", "openmpi")):
        for held in COLLECTIVES:
            memory, fit_s, rows = held_out(root / library, held, mpi)
            for other, points in rows.items():
                errors = np.array([sim / meas - 1 for _, meas, sim in points])
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


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[2] / "shared" / "osu")
