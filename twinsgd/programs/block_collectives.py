"""Collectives that move blocks without combining them, as node programs: allgather around a ring
and alltoall by pairwise exchange, the algorithms MPICH and Open MPI pick for large blocks.

Like the allreduces of `programs.collectives`, each is a generator of `SendRecv` steps, so the
same code runs under MPI (``real/``) and in the simulator (``sim/``, where ``sim.osu`` times
them as the OSU micro-benchmarks time the library's own).

Examples
--------
>>> import numpy as np
>>> from twinsgd.programs.lockstep import run_lockstep
>>> blocks = [np.full(2, r, np.float32) for r in range(3)]
>>> gathered = run_lockstep([ring_allgather(blocks[r], r, 3) for r in range(3)]).results
>>> [float(b[0]) for b in gathered[1]]
[0.0, 1.0, 2.0]
>>> out = [[np.full(1, 10 * r + d, np.float32) for d in range(3)] for r in range(3)]
>>> received = run_lockstep([pairwise_alltoall(out[r], r, 3) for r in range(3)]).results
>>> [float(b[0]) for b in received[2]]  # what ranks 0, 1, 2 sent to rank 2
[2.0, 12.0, 22.0]
"""

from twinsgd.programs.ops import SendRecv


def ring_allgather(block, rank, size, tag=0):
    """Every rank's ``block``, in rank order, on every rank: ``size - 1`` ring steps.

    In step s rank r sends block (r - s) to r + 1 and receives block (r - s - 1) from r - 1.
    Collective: every rank runs it with blocks of the same shape and dtype. Yields `SendRecv`;
    returns the list of ``size`` blocks (its own ``block`` at ``rank``).

    Cost on the alpha-beta model (Thakur et al. 2005): ``(p - 1)(alpha + m / beta)`` for blocks
    of m bytes; each rank sends and receives ``(p - 1) m`` bytes.
    """
    blocks = [block if r == rank else block.copy() for r in range(size)]
    right, left = (rank + 1) % size, (rank - 1) % size
    for s in range(size - 1):
        out, into = (rank - s) % size, (rank - s - 1) % size
        blocks[into] = yield SendRecv(
            dest=right, payload=blocks[out], source=left, buf=blocks[into], tag=tag
        )
    return blocks


def pairwise_alltoall(blocks, rank, size, tag=0):
    """Block d of rank r goes to rank d, as block r there: ``size - 1`` pairwise exchanges.

    In step s rank r sends its block for r + s and receives the block of r - s (mod size), so
    every step is a permutation and no rank receives twice at once. Collective: ``blocks`` is
    this rank's list of ``size`` blocks, all of one shape and dtype. Yields `SendRecv`; returns
    the list of received blocks, ``received[s]`` from rank s (its own block for itself kept).

    Cost on the alpha-beta model (Thakur et al. 2005): ``(p - 1)(alpha + m / beta)`` for blocks
    of m bytes.
    """
    if len(blocks) != size:
        raise ValueError(f"pairwise_alltoall needs one block per rank ({size}), got {len(blocks)}")
    received = [blocks[rank] if s == rank else blocks[s].copy() for s in range(size)]
    for s in range(1, size):
        dest, source = (rank + s) % size, (rank - s) % size
        received[source] = yield SendRecv(
            dest=dest, payload=blocks[dest], source=source, buf=received[source], tag=tag
        )
    return received
