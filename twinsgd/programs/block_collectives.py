"""Collectives that move blocks without combining them, as node programs, the algorithms MPICH and
Open MPI choose among (`programs.mpi_choices`): allgather around a ring, by recursive doubling,
by Bruck's steps or by neighbour exchange (`ALLGATHERS`); alltoall by pairwise exchange, all at
once (linear) or by Bruck's steps (`ALLTOALLS`).

Like the allreduces of `programs.collectives`, each is a generator of `SendRecv` steps (the
linear alltoall: one `Exchange`), so the same code runs under MPI (``real/``) and in the
simulator (``sim/``, where ``sim.osu`` times them as the OSU micro-benchmarks time the library's
own).

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

import functools

import numpy as np

from twinsgd.programs.ghost import GhostArray
from twinsgd.programs.ops import Exchange, SendRecv


def ring_allgather(block, rank, size, tag=0, lengths=None):
    """Every rank's ``block``, in rank order, on every rank: ``size - 1`` ring steps.

    In step s rank r sends block (r - s) to r + 1 and receives block (r - s - 1) from r - 1.
    Collective: every rank runs it with blocks of the same shape and dtype; or, with
    ``lengths`` (every rank's block length, 1-D blocks), of those lengths: an allgatherv.
    Yields `SendRecv`; returns the list of ``size`` blocks (its own ``block`` at ``rank``).

    Cost on the alpha-beta model (Thakur et al. 2005): ``(p - 1)(alpha + m / beta)`` for blocks
    of m bytes; each rank sends and receives ``(p - 1) m`` bytes.
    """
    if lengths is None:
        blocks = [block if r == rank else block.copy() for r in range(size)]
    else:
        blocks = [block if r == rank else np.empty(lengths[r], block.dtype) for r in range(size)]
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


def recursive_doubling_allgather(block, rank, size, tag=0):
    """Every rank's ``block``, in rank order, on every rank, in log2 p exchanges (MPICH's and
    Open MPI's choice for short messages on a power of two ranks): in the step of bit k a rank
    swaps the k blocks it holds (those of its group of k ranks) with rank ^ k. Returns the
    list of ``size`` blocks. ``size`` must be a power of two (ValueError otherwise).

    Cost on the alpha-beta model: ``log2 p alpha + (p - 1) m / beta``; a rank sends and
    receives ``(p - 1) m`` bytes, as around the ring.
    """
    if size & (size - 1):
        raise ValueError(f"recursive doubling allgather needs a power of two ranks, got {size}")
    blocks = [block if r == rank else block.copy() for r in range(size)]
    bit = 1
    while bit < size:
        mine, theirs = rank & ~(bit - 1), (rank ^ bit) & ~(bit - 1)
        incoming = yield SendRecv(
            dest=rank ^ bit,
            payload=_pack(blocks[mine : mine + bit]),
            source=rank ^ bit,
            buf=_pack(blocks[theirs : theirs + bit]),
            tag=tag,
        )
        for i, part in enumerate(_unpack(incoming, bit)):
            if part is not None:
                blocks[theirs + i] = part.reshape(block.shape)
        bit <<= 1
    return blocks


def bruck_allgather(block, rank, size, tag=0):
    """Every rank's ``block``, in rank order, on every rank, in ceil(log2 p) steps for any p
    (Bruck et al. 1997; MPICH's and Open MPI's choice for short messages on other counts): a
    rank holds the blocks of rank, rank + 1, ...; in the step of distance d = 1, 2, 4, ... it
    sends the first min(d, p - d) of them to rank - d and appends as many from rank + d.
    Returns the list of ``size`` blocks.

    Cost on the alpha-beta model: ``ceil(log2 p) alpha + (p - 1) m / beta``.
    """
    held, distance = [block], 1
    while distance < size:
        count = min(distance, size - distance)
        incoming = yield SendRecv(
            dest=(rank - distance) % size,
            payload=_pack(held[:count]),
            source=(rank + distance) % size,
            buf=_pack([block] * count),
            tag=tag,
        )
        held += [
            block.copy() if part is None else part.reshape(block.shape)
            for part in _unpack(incoming, count)
        ]
        distance <<= 1
    return [held[(r - rank) % size] for r in range(size)]


def neighbor_exchange_allgather(block, rank, size, tag=0):
    """Every rank's ``block``, in rank order, on every rank, in p / 2 steps for an even p (Chen
    et al. 2005, Open MPI's ``neighbor_exchange`` for long messages on an even count): ranks pair
    up (2i, 2i + 1) and swap their blocks; then, alternately with the other neighbour and the
    first, each rank forwards the pair of blocks it got last and gets its neighbour's. Returns
    the list of ``size`` blocks. ``size`` must be even (ValueError otherwise).

    Cost on the alpha-beta model: ``(p / 2) alpha + (p - 1) m / beta``: the ring's bytes in half
    its steps.
    """
    if size % 2:
        raise ValueError(f"neighbour exchange needs an even number of ranks, got {size}")
    blocks = [block if r == rank else block.copy() for r in range(size)]
    latest = _latest_pairs(size)  # latest[i][q]: the first block of the pair q got at step i
    neighbours = _neighbours(rank, size)
    partner = neighbours[0]
    blocks[partner] = yield SendRecv(
        dest=partner, payload=block, source=partner, buf=blocks[partner], tag=tag
    )
    for step in range(1, size // 2):
        partner = neighbours[step % 2]
        mine, theirs = latest[step - 1][rank], latest[step - 1][partner]
        incoming = yield SendRecv(
            dest=partner,
            payload=_pack(blocks[mine : mine + 2]),
            source=partner,
            buf=_pack(blocks[theirs : theirs + 2]),
            tag=tag,
        )
        for i, part in enumerate(_unpack(incoming, 2)):
            if part is not None:
                blocks[theirs + i] = part.reshape(block.shape)
    return blocks


def _neighbours(rank, size):
    """(first, second) neighbour of ``rank`` in the neighbour exchange: its pair's other rank,
    then the adjacent rank of the next pair over."""
    if rank % 2 == 0:
        return (rank + 1) % size, (rank - 1) % size
    return (rank - 1) % size, (rank + 1) % size


@functools.lru_cache(maxsize=8)
def _latest_pairs(size):
    """For each step of the neighbour exchange, the first block of the pair each rank received
    last (step 0: its own pair's): what it forwards at the next step. Shape (p/2, p)."""
    ranks = np.arange(size)
    first = ranks - ranks % 2
    partners = [np.array([_neighbours(r, size)[k] for r in ranks]) for k in (0, 1)]
    latest = [first]
    for step in range(1, size // 2):
        latest.append(latest[-1][partners[step % 2]])
    return np.array(latest)


ALLGATHERS = {
    "ring": ring_allgather,
    "recursive-doubling": recursive_doubling_allgather,
    "bruck": bruck_allgather,
    "neighbor-exchange": neighbor_exchange_allgather,
}
"""Allgather name -> the generator both backends run."""


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
