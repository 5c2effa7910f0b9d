"""``mpiexec -n 2 python -m real.phase``: this machine's phase now, one number (microseconds).

Ranks 0 and 1, through the machine's shared memory, each write a 512 KiB buffer and send it to
the other, in turn: the mean round trip of 100 such (after 20 unmeasured), the median of three
batches, printed by rank 0.

Why: this machine (a 2-vCPU guest) runs that at two speeds, 132-149 us and 379-447 us a round
trip (2026-12-05), and switches by itself every few seconds to minutes, inside one launch as
between launches. The same phase moves everything that copies through memory or crosses between
the cores: MPI's shared-memory transfers of bytes just written (3x), a small TCP message over
loopback or veth (9 against 12 us one way), the programs' memory-bound own code. A calibration
taken in one phase does not predict a run in the other, and no model of either phase can say
which one a run will meet; so the harnesses that hold a prediction against a measurement
(`twinsgd.analysis.validate`, `benchmarks/osu_twin.py`) probe the phase around each
calibration and measurement, and tell the rows that held it from those that moved
(`twinsgd.analysis.prediction_table.phase_held`).
"""

import sys

import numpy as np

from real.cli import RankZeroParser
from real.mpi import MPI

BUFFER_BYTES = 512 * 1024
REPEATS, WARMUP, BATCHES = 100, 20, 3


def round_trip_us(comm, repeats=REPEATS):
    """The median over `BATCHES` of the mean round trip (us) of ranks 0 and 1 each writing
    and sending `BUFFER_BYTES`; on rank 0 (None elsewhere). Other ranks wait. Collective."""
    buf = np.ones(BUFFER_BYTES // 4, np.float32)
    inbox, rank = np.empty_like(buf), comm.rank
    batches = []
    for _ in range(BATCHES):
        comm.Barrier()
        t0 = 0.0
        for k in range(WARMUP + repeats if rank < 2 else 0):
            if k == WARMUP:
                t0 = MPI.Wtime()
            buf.fill(float(k))  # written just before it goes, as MPI's collective steps send
            if rank == 0:
                comm.Send(buf, dest=1)
                comm.Recv(inbox, source=1)
            else:
                comm.Recv(inbox, source=0)
                comm.Send(buf, dest=0)
        batches.append((MPI.Wtime() - t0) / repeats * 1e6)
    return float(np.median(batches)) if rank == 0 else None


def main(argv=None):
    comm = MPI.COMM_WORLD
    parser = RankZeroParser(
        prog="python -m real.phase",
        description="This machine's phase now: a written 512 KiB round trip, microseconds.",
    )
    parser.parse_args(argv)
    if comm.size < 2:
        parser.error(f"needs 2 MPI ranks, got {comm.size}: mpiexec -n 2 python -m real.phase")
    us = round_trip_us(comm)
    if comm.rank == 0:
        print(f"{us:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
