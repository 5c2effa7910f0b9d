"""Under mpiexec: our allreduces against MPI's Allreduce (exact on integers, close on floats,
the same bits on every rank, bytes as counted), our broadcasts (binomial, scatter + ring or
recursive-doubling allgather, the segmented pipeline, the split binary tree) against MPI's
Bcast, our
allgathers (ring, recursive doubling, Bruck's, neighbour exchange) against MPI's Allgather, our
pairwise, linear and Bruck alltoalls against MPI's Alltoall (bytes as counted), and MPICH's
reduces (binomial, reduce-scatter and gather) against MPI's Reduce, from every root.

Prints one line "ok N" on rank 0 when every case agrees; raises (and so aborts the job) otherwise.
"""

import numpy as np
from mpi4py import MPI

from real.backend import probe, run_collective_mpi
from twinsgd.programs.block_collectives import ALLGATHERS, ALLTOALLS, alltoall_bytes
from twinsgd.programs.broadcasts import (
    BCASTS,
    pipeline_bcast,
    scatter_allgather_bcast,
    scatter_blocks,
    split_binary_bcast,
)
from twinsgd.programs.collectives import (
    ALLREDUCES,
    allreduce_bytes,
    binomial_bcast,
    binomial_bcast_bytes,
)
from twinsgd.programs.reductions import REDUCES

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size


def run_collective_mpi_result(program):
    """(What ``program`` returns, the bytes it sent and received), carried out under MPI."""
    out = {}

    def keep():
        out["value"] = yield from program

    counted = run_collective_mpi(comm, keep())
    return out["value"], counted


for algorithm, allreduce in ALLREDUCES.items():
    for n in (0, 1, 2, size - 1, size, size + 1, 2 * size + 3, 1000, 4099):
        rng = np.random.default_rng([n, rank])
        ints = rng.integers(-1000, 1000, n).astype(np.float64)
        ours, theirs = ints.copy(), ints.copy()
        sent, received = run_collective_mpi(comm, allreduce(ours, rank, size))
        comm.Allreduce(MPI.IN_PLACE, theirs, op=MPI.SUM)
        np.testing.assert_array_equal(ours, theirs)
        counted = allreduce_bytes(algorithm, n, 8, rank, size)
        assert (sent, received) == counted, (algorithm, n, sent, received)
        floats = rng.standard_normal(n).astype(np.float32)
        ours, theirs = floats.copy(), floats.copy()
        run_collective_mpi(comm, allreduce(ours, rank, size))
        comm.Allreduce(MPI.IN_PLACE, theirs, op=MPI.SUM)
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5 * size)
        everyone = comm.allgather(ours)
        for other in everyone:  # every rank ends with the same bits
            np.testing.assert_array_equal(other, ours)

for m in (0, 1, 7, 1000):
    mine = np.random.default_rng([m, rank]).standard_normal(m).astype(np.float32)
    theirs = np.empty((size, m), np.float32)
    comm.Allgather(mine, theirs)
    for algorithm, allgather in ALLGATHERS.items():
        if (algorithm == "recursive-doubling" and size & (size - 1)) or (
            algorithm == "neighbor-exchange" and size % 2
        ):
            continue  # a power of two, an even count only
        gathered, counted = run_collective_mpi_result(allgather(mine.copy(), rank, size))
        np.testing.assert_array_equal(np.array(gathered).reshape(size, m), theirs)
        assert counted == ((size - 1) * 4 * m,) * 2, (algorithm, counted)
    blocks = np.random.default_rng([m, rank, 1]).standard_normal((size, m)).astype(np.float32)
    theirs = np.empty_like(blocks)
    comm.Alltoall(blocks, theirs)
    for algorithm, alltoall in ALLTOALLS.items():
        received, counted = run_collective_mpi_result(alltoall(list(blocks.copy()), rank, size))
        np.testing.assert_array_equal(np.array(received).reshape(size, m), theirs)
        assert counted == alltoall_bytes(algorithm, 4 * m, rank, size), (algorithm, counted)

for root in range(size):
    values = np.random.default_rng(root).standard_normal(1001).astype(np.float32)
    ours = values.copy() if rank == root else np.zeros_like(values)
    theirs = ours.copy()
    sent, received = run_collective_mpi(comm, binomial_bcast(ours, root, rank, size))
    comm.Bcast(theirs, root=root)
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(ours, values)
    assert (sent, received) == binomial_bcast_bytes(1001, 4, rank, root, size)

for root in range(size):
    for n in (0, 1, size - 1, 13, 1001):  # float32: blocks of ceil(4n / p) bytes cut elements
        values = np.random.default_rng([root, n]).standard_normal(n).astype(np.float32)
        theirs = values.copy() if rank == root else np.zeros_like(values)
        comm.Bcast(theirs, root=root)
        kinds = ["ring"] + (["recursive-doubling"] if size & (size - 1) == 0 else [])
        for allgather in kinds:
            ours = values.copy() if rank == root else np.zeros_like(values)
            program = scatter_allgather_bcast(ours, root, rank, size, allgather)
            sent, received = run_collective_mpi(comm, program)
            np.testing.assert_array_equal(ours, theirs)
            bounds, r = scatter_blocks(4 * n, size), (rank - root) % size
            subtree = bounds[min(r + (r & -r), size)] - bounds[r] if r else 0  # the scatter's
            lacked = 4 * n - (bounds[r + 1] - bounds[r])  # the allgather's: all but its block
            assert received == subtree + lacked, (allgather, n, received, subtree, lacked)
            assert comm.allreduce(sent) == comm.allreduce(received)
        ours = values.copy() if rank == root else np.zeros_like(values)
        sent, received = run_collective_mpi(comm, pipeline_bcast(ours, root, rank, size, 1024))
        np.testing.assert_array_equal(ours, theirs)
        last = (rank - root) % size == size - 1
        assert (sent, received) == (0 if last else 4 * n, 0 if rank == root else 4 * n)
        for segment_bytes in (8, 1024):  # many segments, and the pipeline's fall-back
            ours = values.copy() if rank == root else np.zeros_like(values)
            program = split_binary_bcast(ours, root, rank, size, segment_bytes)
            sent, received = run_collective_mpi(comm, program)
            np.testing.assert_array_equal(ours, theirs)
            assert received == (0 if rank == root else 4 * n), (n, segment_bytes, received)
            assert comm.allreduce(sent) == comm.allreduce(received)
        for name in ("linear", "binary", "bmtree", "knomial", "split-binary"):  # 4.1's, whole
            ours = values.copy() if rank == root else np.zeros_like(values)
            sent, received = run_collective_mpi(comm, BCASTS[name](ours, root, rank, size, 0))
            np.testing.assert_array_equal(ours, theirs)
            if name != "split-binary":  # a tree: each rank but the root receives it once
                assert received == (0 if rank == root or n == 0 else 4 * n), (name, received)
            assert comm.allreduce(sent) == comm.allreduce(received)

pof2 = 1 << (size.bit_length() - 1)
for root in range(size):
    for n in (pof2, pof2 + 1, 2 * size + 3, 1001):  # integers: every order of adding agrees
        values = np.random.default_rng([root, n, rank]).integers(-99, 99, n).astype(np.float32)
        theirs = np.zeros_like(values)
        comm.Reduce(values, theirs, op=MPI.SUM, root=root)
        for name, reduce in REDUCES.items():
            for segment_bytes in (0, 16, 100):  # Open MPI's segments (MPICH's take none)
                ours = values.copy()
                program = reduce(ours, root, rank, size, segment_bytes)
                sent, received = run_collective_mpi(comm, program)
                if rank == root:
                    np.testing.assert_array_equal(ours, theirs, err_msg=f"{name} n={n}")
                assert comm.allreduce(sent) == comm.allreduce(received)

# real.backend.probe: MPI's Probe as a yielding loop; it names the sender and the size
if rank:
    comm.Send(np.full(rank, rank, np.int32), dest=0, tag=7)
else:
    seen = set()
    for _ in range(size - 1):
        status = MPI.Status()
        probe(comm, MPI.ANY_SOURCE, 7, status)
        source = status.Get_source()
        assert status.Get_count(MPI.INT) == source, (source, status.Get_count(MPI.INT))
        got = np.empty(source, np.int32)
        comm.Recv(got, source=source, tag=7)
        assert (got == source).all() and source not in seen
        seen.add(source)
    assert seen == set(range(1, size))

if rank == 0:
    print("ok", size)
