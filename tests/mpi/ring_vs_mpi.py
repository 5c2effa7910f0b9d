"""Under mpiexec: our ring allreduce against MPI's Allreduce, exact on integers, close on floats.

Prints one line "ok N" on rank 0 when every case agrees; raises (and so aborts the job) otherwise.
"""

import numpy as np
from mpi4py import MPI

from algorithms.collectives import ring_allreduce_bytes
from real.backend import ring_allreduce_mpi

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size


for n in (0, 1, 2, size - 1, size, size + 1, 2 * size + 3, 1000, 4099):
    rng = np.random.default_rng([n, rank])
    ints = rng.integers(-1000, 1000, n).astype(np.float64)
    ours, theirs = ints.copy(), ints.copy()
    sent, received = ring_allreduce_mpi(comm, ours, rank, size)
    comm.Allreduce(MPI.IN_PLACE, theirs, op=MPI.SUM)
    np.testing.assert_array_equal(ours, theirs)
    assert (sent, received) == ring_allreduce_bytes(n, 8, rank, size), (n, sent, received)
    floats = rng.standard_normal(n).astype(np.float32)
    ours, theirs = floats.copy(), floats.copy()
    ring_allreduce_mpi(comm, ours, rank, size)
    comm.Allreduce(MPI.IN_PLACE, theirs, op=MPI.SUM)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5 * size)
    everyone = comm.allgather(ours)
    for other in everyone:  # every rank ends with the same bits
        np.testing.assert_array_equal(other, ours)

if rank == 0:
    print("ok", size)
