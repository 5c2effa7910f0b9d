"""Under mpiexec on 2+ ranks: a ping-pong between ranks 0 and 1 for one large message.

Usage: ``ping_pong.py [NBYTES [ROUND_TRIPS]]`` (defaults 4 MiB, 5). One round trip of warm-up
(connection set-up, TCP slow start) is discarded. Rank 0 prints one line: the one-way payload
rate of the fastest round trip and the median one, in bytes/s, then every rank's
MPI_Get_processor_name. The fastest is the link's rate: on a shared machine other processes can
only slow a transfer down, never speed it up past the shaper.
"""

import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.rank
nbytes = int(sys.argv[1]) if len(sys.argv) > 1 else 4 << 20
round_trips = int(sys.argv[2]) if len(sys.argv) > 2 else 5
buf = np.zeros(nbytes, np.uint8)
times_s = []
for trip in range(round_trips + 1):
    comm.Barrier()
    start = time.perf_counter()
    if rank == 0:
        comm.Send(buf, dest=1, tag=trip)
        comm.Recv(buf, source=1, tag=trip)
    elif rank == 1:
        comm.Recv(buf, source=0, tag=trip)
        comm.Send(buf, dest=0, tag=trip)
    if trip:  # the first is warm-up
        times_s.append(time.perf_counter() - start)
names = comm.gather(MPI.Get_processor_name(), root=0)
if rank == 0:
    best_Bps, median_Bps = (2 * nbytes / t for t in (min(times_s), statistics.median(times_s)))
    print(f"{best_Bps:.6g} {median_Bps:.6g}", *names)
