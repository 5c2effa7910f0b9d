"""Under mpiexec on 2+ ranks: contention at a NIC, in both directions.

Usage: ``contention.py [NBYTES [REPEATS]]`` (defaults 1 MiB, 5). The last rank is the hub. Each
repeat times three phases at the hub, from a barrier to the last byte: rank 0 sends NBYTES to
the hub alone; every other rank sends NBYTES to the hub at once (incast: they queue at the
switch port toward the hub, its ingress); the hub sends NBYTES to every other rank at once
(outcast: they queue at the hub's own egress; each receiver answers one byte when it has all).
A first repeat (connection set-up) is discarded. The hub prints one line: the fastest time of
each phase in seconds, then incast and outcast over alone. Fastest, as in ping_pong.py: other
processes only ever add time.
"""

import sys
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
hub = size - 1
nbytes = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20
repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
message = np.zeros(nbytes, np.uint8)


def phase(senders, receivers, tag):
    """Each sender sends ``message`` to each receiver it is paired with (everyone with the hub);
    return the hub's time in seconds."""
    comm.Barrier()
    start = time.perf_counter()
    if rank == hub:
        bufs = [np.empty(nbytes, np.uint8) for _ in senders]  # alive until Waitall returns
        requests = [
            comm.Irecv(buf, source=s, tag=tag) for buf, s in zip(bufs, senders, strict=True)
        ]
        requests += [comm.Isend(message, dest=r, tag=tag) for r in receivers]
        requests += [comm.Irecv(np.empty(1, np.uint8), source=r, tag=tag) for r in receivers]
        MPI.Request.Waitall(requests)
    elif rank in senders:
        comm.Send(message, dest=hub, tag=tag)
    elif rank in receivers:  # an Isend completes once buffered: the receiver says it has all
        comm.Recv(np.empty(nbytes, np.uint8), source=hub, tag=tag)
        comm.Send(np.zeros(1, np.uint8), dest=hub, tag=tag)
    return time.perf_counter() - start


others = list(range(size - 1))
times_s = {"alone": [], "incast": [], "outcast": []}
for repeat in range(repeats + 1):
    timed = {
        "alone": phase([0], [], 3 * repeat),
        "incast": phase(others, [], 3 * repeat + 1),
        "outcast": phase([], others, 3 * repeat + 2),
    }
    for name, seconds in timed.items():
        if repeat:
            times_s[name].append(seconds)
if rank == hub:
    alone, incast, outcast = (min(times_s[name]) for name in ("alone", "incast", "outcast"))
    print(f"{alone:.6f} {incast:.6f} {outcast:.6f} {incast / alone:.4f} {outcast / alone:.4f}")
