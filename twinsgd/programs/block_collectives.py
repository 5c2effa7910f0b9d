"""Collectives that move blocks without combining them, as node programs: allgather around a ring,
and alltoall by pairwise exchange (the libraries' choice for large blocks), all at once (linear:
for medium blocks) or by Bruck's log p steps (for small blocks).

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

import numpy as np

from twinsgd.programs.ghost import GhostArray
from twinsgd.programs.ops import Exchange, SendRecv


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


def linear_alltoall(blocks, rank, size, tag=0):
    """Block d of rank r goes to rank d, every block at once: one `Exchange` with every other
    rank, sends posted from rank + 1 on (Open MPI's ``basic_linear``; MPICH's ``scattered``
    without its throttle of 32 requests at a time; Open MPI's ``linear_sync``, which bounds the
    requests in flight, is simulated as this). Returns the received blocks as
    `pairwise_alltoall` does.

    Cost: every rank's ``p - 1`` blocks leave its NIC back to back and arrive from ``p - 1``
    senders at once; on the alpha-beta model, no better than ``alpha + (p - 1) m / beta``.
    """
    if len(blocks) != size:
        raise ValueError(f"linear_alltoall needs one block per rank ({size}), got {len(blocks)}")
    received = [blocks[rank] if s == rank else blocks[s].copy() for s in range(size)]
    order = [(rank + k) % size for k in range(1, size)]
    if order:
        yield Exchange({d: blocks[d] for d in order}, {s: received[s] for s in order}, tag=tag)
    return received


def bruck_alltoall(blocks, rank, size, tag=0):
    """Block d of rank r goes to rank d in ceil(log2 p) steps (Bruck et al. 1997, "Efficient
    algorithms for all-to-all communications in multiport message-passing systems", IEEE TPDS;
    MPICH's and Open MPI's choice for small blocks).

    The blocks are rotated so that position i holds the block for rank + i. In the step of bit
    k (k = 1, 2, 4, ...) every rank packs the blocks whose position has bit k set, `SendRecv`s
    them to rank + k, from rank - k, and unpacks what it gets into the same positions: a block
    at position i has then moved the bits of i processed so far. At the end position i holds the
    block of rank - i. Each step moves about half the blocks, so a rank sends
    ``ceil(log2 p) m p / 2`` bytes where `pairwise_alltoall` sends ``(p - 1) m``: fewer messages,
    more bytes (`bruck_alltoall_bytes`).
    """
    if len(blocks) != size:
        raise ValueError(f"bruck_alltoall needs one block per rank ({size}), got {len(blocks)}")
    held = [blocks[(rank + i) % size].copy() for i in range(size)]
    bit = 1
    while bit < size:
        moving = [i for i in range(size) if i & bit]
        packed = _pack([held[i] for i in moving])
        incoming = yield SendRecv(
            dest=(rank + bit) % size,
            payload=packed,
            source=(rank - bit) % size,
            buf=np.empty_like(packed),
            tag=tag,
        )
        for i, part in zip(moving, _unpack(incoming, len(moving)), strict=True):
            if part is not None:  # a ghost's blocks stay as they are
                held[i] = part.reshape(held[i].shape)
        bit <<= 1
    received = [None] * size
    for i in range(size):
        received[(rank - i) % size] = held[i]
    received[rank] = blocks[rank]
    return received


def bruck_alltoall_bytes(block_bytes, rank, size):
    """Bytes ``(sent, received)`` by ``rank`` in `bruck_alltoall` of blocks of ``block_bytes``:
    in the step of bit k, the positions 0 .. p-1 with bit k set.

    >>> bruck_alltoall_bytes(100, 0, 8)  # 3 steps of 4 blocks
    (1200, 1200)
    """
    steps = [sum(1 for i in range(size) if i & (1 << k)) for k in range((size - 1).bit_length())]
    return sum(steps) * block_bytes, sum(steps) * block_bytes


def _pack(parts):
    """One message of ``parts`` back to back (a ghost of their total size for ghosts)."""
    if isinstance(parts[0], GhostArray):
        return GhostArray(sum(part.size for part in parts), parts[0].dtype)
    return np.concatenate([np.ravel(part) for part in parts])


def _unpack(message, count):
    """``count`` equal blocks of ``message`` (None for each block of a ghost: nothing to take)."""
    if isinstance(message, GhostArray):
        return [None] * count
    return [part.copy() for part in np.split(message, count)]


ALLTOALLS = {
    "pairwise": pairwise_alltoall,
    "linear": linear_alltoall,
    "bruck": bruck_alltoall,
}
"""Alltoall name -> the generator both backends run."""


def alltoall_bytes(algorithm, block_bytes, rank, size):
    """Bytes ``(sent, received)`` by ``rank`` in alltoall ``algorithm`` of blocks of
    ``block_bytes``: ``(p - 1) m`` each way, but Bruck's (`bruck_alltoall_bytes`)."""
    if algorithm == "bruck":
        return bruck_alltoall_bytes(block_bytes, rank, size)
    return (size - 1) * block_bytes, (size - 1) * block_bytes
