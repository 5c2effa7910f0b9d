"""Broadcasts as the MPI libraries run them for long messages, built from our operations so the
same program runs measured under MPI and simulated (`programs.collectives.binomial_bcast` is
the short-message one).

- `scatter_allgather_bcast`: MPICH's long-message broadcast (van de Geijn's): the root's bytes
  are cut into p blocks of ceil(n / p) bytes and scattered down a binomial tree
  (``MPII_Scatter_for_bcast``), then gathered back at every rank by recursive doubling
  (``MPIR_Bcast_intra_scatter_recursive_doubling_allgather``, a power of two ranks) or around a
  ring (``MPIR_Bcast_intra_scatter_ring_allgather``). Cost on the alpha-beta model (Thakur,
  Rabenseifner and Gropp 2005): ``log2 p alpha + (p-1)/p n/beta`` for the scatter, then
  ``log2 p alpha + (p-1)/p n/beta`` (recursive doubling) or ``(p-1)(alpha + n/(p beta))``
  (the ring): about ``2 n/beta`` in all where the binomial tree's is ``log2 p n/beta``.
- `pipeline_bcast`: Open MPI's pipeline (``ompi_coll_base_bcast_intra_pipeline``): a chain
  root, root+1, ..., each rank passing on segments of ``segment_bytes`` as they come, so the
  last rank has the message after ``(p - 1 + k - 1)`` segment steps for k segments.
- `split_binary_bcast`: Open MPI's split binary tree (``ompi_coll_base_bcast_intra_split_
  bintree``): the root sends the first half down its left subtree and the second down its
  right one, segment by segment, along Open MPI's binary tree (`binary_tree`); then each rank
  swaps halves with its twin in the other subtree.

MPICH cuts bytes, so its broadcast works on a byte view of the buffer (`byte_view`): a block may
end inside an element. Open MPI cuts elements (segments of ``segment_bytes // itemsize``).
Open MPI posts a segment's receive before passing on the one before; here that is a
`SendRecv` of two peers (to the first child, from the parent), so a stage of the pipeline costs
one segment's time, not two.
"""

from functools import partial

import numpy as np

from twinsgd.programs.collectives import binomial_bcast
from twinsgd.programs.ghost import GhostArray
from twinsgd.programs.ops import Recv, Send, SendRecv


def byte_view(buf):
    """``buf``'s bytes as a flat uint8 array sharing its memory (a `GhostArray` of as many
    bytes for a ghost buffer)."""
    if isinstance(buf, GhostArray):
        return GhostArray(buf.nbytes, np.uint8)
    return buf.reshape(-1).view(np.uint8)


def scatter_blocks(nbytes, size):
    """MPICH's blocks of a scatter-allgather broadcast of ``nbytes`` over ``size`` ranks: block
    i (of relative rank i) is bytes ``[bounds[i], bounds[i + 1])``, ``ceil(nbytes / size)``
    each, the last ones shorter or empty.

    >>> scatter_blocks(10, 4)
    [0, 3, 6, 9, 10]
    >>> scatter_blocks(3, 4)
    [0, 1, 2, 3, 3]
    """
    block = -(-nbytes // size)
    return [min(nbytes, i * block) for i in range(size + 1)]


def scatter_allgather_bcast(buf, root, rank, size, allgather="ring", tag=0):
    """Broadcast ``root``'s ``buf`` into every rank's ``buf``: a binomial scatter of its p
    blocks (`scatter_blocks`), then an allgather of them, ``allgather`` ``"ring"`` or
    ``"recursive-doubling"`` (a power of two ``size`` only), as MPICH does for long messages.

    With relative rank ``r = (rank - root) mod p`` and ``m`` the lowest bit set in r, rank r
    receives from r - m the blocks of its subtree, r .. r + m - 1, and passes each child r + m'
    (m' = m/2, ..., 1) the blocks of the child's subtree; then each holds its own block r. The
    ring: at step i = 1 .. p-1 each rank sends the block it got last (its own first) to the
    right and receives the next from the left. Recursive doubling: at round k each exchanges the
    blocks of its 2^k-rank subtree with the partner r xor 2^k. As in MPICH, the scatter sends
    nothing to a subtree whose blocks are empty, and the allgathers send every message, empty
    or not.

    Yields Send, Recv and SendRecv; returns ``buf``. Collective.

    Examples
    --------
    >>> from twinsgd.programs.lockstep import run_lockstep
    >>> bufs = [np.arange(5.0) if r == 1 else np.zeros(5) for r in range(3)]
    >>> out = run_lockstep([scatter_allgather_bcast(b, 1, r, 3) for r, b in enumerate(bufs)])
    >>> [b.tolist() for b in out.results] == [list(range(5))] * 3
    True
    """
    if allgather not in ("ring", "recursive-doubling"):
        raise ValueError(f"allgather must be ring or recursive-doubling, got {allgather!r}")
    if allgather == "recursive-doubling" and size & (size - 1):
        raise ValueError(f"recursive doubling needs a power of two ranks, got {size}")
    _check(root, rank, size)
    return _scatter_allgather(byte_view(buf), buf, root, rank, size, allgather, tag)


def _scatter_allgather(data, buf, root, rank, size, allgather, tag):
    bounds = scatter_blocks(data.size, size)
    relative = (rank - root) % size

    def real(r):  # a relative rank's rank
        return (r + root) % size

    def blocks(first, count):  # bytes of relative blocks first .. first + count - 1
        return data[bounds[min(first, size)] : bounds[min(first + count, size)]]

    # the binomial scatter: my subtree's blocks from my parent, then each child's to it
    mask = 1
    while mask < size:
        if relative & mask:
            mine = blocks(relative, mask)
            if mine.size:
                yield Recv(source=real(relative - mask), tag=tag, buf=mine)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if relative + mask < size:
            theirs = blocks(relative + mask, mask)
            if theirs.size:
                yield Send(dest=real(relative + mask), payload=theirs, tag=tag)
        mask >>= 1
    if allgather == "ring":
        left, right = real(relative - 1), real(relative + 1)
        for step in range(size - 1):
            yield SendRecv(
                dest=right,
                payload=blocks((relative - step) % size, 1),
                source=left,
                buf=blocks((relative - step - 1) % size, 1),
                tag=tag,
            )
    else:
        mask = 1
        while mask < size:
            partner = relative ^ mask
            yield SendRecv(
                dest=real(partner),
                payload=blocks(relative & ~(mask - 1), mask),
                source=real(partner),
                buf=blocks(partner & ~(mask - 1), mask),
                tag=tag,
            )
            mask <<= 1
    return buf


def pipeline_bcast(buf, root, rank, size, segment_bytes, tag=0):
    """Broadcast ``root``'s ``buf`` down the chain root, root + 1, ..., root - 1 in segments of
    ``segment_bytes // itemsize`` elements (at least one; the last segment shorter; 0: the
    whole buffer in one, as Open MPI 4.1's fixed rules pass no segment size): each rank
    receives a segment from its predecessor, then passes it to its successor, segment by
    segment (Open MPI's pipeline, a chain of fan-out 1). Yields Recv and Send; returns ``buf``.
    Collective.

    >>> from twinsgd.programs.lockstep import run_lockstep
    >>> bufs = [np.arange(7.0) if r == 0 else np.zeros(7) for r in range(4)]
    >>> out = run_lockstep([pipeline_bcast(b, 0, r, 4, 16) for r, b in enumerate(bufs)])
    >>> all(b.tolist() == list(range(7)) for b in out.results)
    True
    """
    _check(root, rank, size, segment_bytes)
    return _down_tree(buf, root, rank, size, chain, segment_bytes, tag)


def _segments(data, segment_bytes):
    """``data`` (flat) cut into Open MPI's segments of ``segment_bytes // itemsize`` elements
    (``segment_bytes`` 0: one segment, the whole of it)."""
    count = max(1, segment_bytes // data.itemsize if segment_bytes else data.size)
    return [data[start : start + count] for start in range(0, data.size, count)]


def chain(rank, root, size):
    """(parent, children) of ``rank`` on the chain root, root + 1, ..., root - 1 (Open MPI's
    pipeline: ``ompi_coll_base_topo_build_chain`` of fan-out 1)."""
    relative = (rank - root) % size
    parent = None if relative == 0 else (rank - 1) % size
    return parent, [(rank + 1) % size] if relative < size - 1 else []


def _relay(segments, parent, children, tag):
    """A tree node's part of a segmented broadcast: receive each segment from ``parent`` (None:
    the root has them) and pass it to each child, the next segment's receive posted while the
    first child is sent this one (a `SendRecv` of two peers: Open MPI's Irecv posted before
    its sends)."""
    for k, segment in enumerate(segments):
        if parent is not None and k == 0:
            yield Recv(source=parent, tag=tag, buf=segment)
        following = segments[k + 1] if parent is not None and k + 1 < len(segments) else None
        for i, child in enumerate(children):
            if i == 0 and following is not None:
                yield SendRecv(dest=child, payload=segment, source=parent, buf=following, tag=tag)
            else:
                yield Send(dest=child, payload=segment, tag=tag)
        if not children and following is not None:
            yield Recv(source=parent, tag=tag, buf=following)


def binary_tree(rank, root, size):
    """(parent, children) of ``rank`` in Open MPI's binary tree of ``size`` ranks rooted at
    ``root`` (``ompi_coll_base_topo_build_tree(2, ...)``): shifted ranks level by level, a node
    of level l (2^l nodes) with children s + 2^l and s + 2^(l+1); the root's parent is None.

    >>> [binary_tree(r, 0, 7) for r in (0, 1, 2, 3)]
    [(None, [1, 2]), (0, [3, 5]), (0, [4, 6]), (1, [])]
    """
    shifted = (rank - root) % size
    delta = 1 << ((shifted + 1).bit_length() - 1)  # 2^level: level l holds 2^l - 1 .. 2^(l+1) - 2
    children = [(shifted + k * delta + root) % size for k in (1, 2) if shifted + k * delta < size]
    if shifted == 0:
        return None, children
    parent = shifted
    if parent < 2:
        parent = 0
    while parent >= delta - 1:  # the nodes above my level: 2^l - 1
        parent -= delta // 2
    return (parent + root) % size, children


def split_binary_bcast(buf, root, rank, size, segment_bytes, tag=0):
    """Broadcast ``root``'s ``buf`` as Open MPI's split binary tree does: the buffer in two
    halves (the first ``ceil(n / 2)`` elements, the rest), the first down the root's left
    subtree (odd shifted ranks), the second down its right one (even), each in segments of
    ``segment_bytes // itemsize`` elements passed on as they come (`binary_tree`); then every
    rank but the root swaps its half with its twin in the other subtree (shifted rank s + 1
    for an odd s, s - 1 for an even one); with an even ``size`` the last rank, which has no
    twin, gets the second half from the root. Where a half is empty or shorter than a segment,
    Open MPI runs the pipeline instead (`pipeline_bcast`), and so does this.

    Yields Send, Recv and SendRecv; returns ``buf``. Collective.

    >>> from twinsgd.programs.lockstep import run_lockstep as run
    >>> bufs = [np.arange(40.0) if r == 2 else np.zeros(40) for r in range(6)]
    >>> [b.tolist() == list(range(40)) for b in run(
    ...     [split_binary_bcast(b, 2, r, 6, 32) for r, b in enumerate(bufs)]).results] == [True] * 6
    True
    """
    _check(root, rank, size, segment_bytes)
    data = _flat(buf)
    first = -(-data.size // 2)
    halves = (data[:first], data[first:])
    if size == 1:
        return _nothing(buf)
    if min(h.size for h in halves) == 0 or segment_bytes > halves[1].nbytes:
        return _down_tree(buf, root, rank, size, chain, segment_bytes, tag)
    return _split_binary(buf, halves, root, rank, size, segment_bytes, tag)


def _split_binary(buf, halves, root, rank, size, segment_bytes, tag):
    shifted = (rank - root) % size
    side = (shifted + 1) % 2  # 0: left (odd shifted ranks) with the first half; 1: right
    parent, children = binary_tree(rank, root, size)
    if rank == root:  # segment k of each half in turn, down each subtree
        segments = [_segments(half, segment_bytes) for half in halves]
        for k in range(len(segments[0])):
            for child, half in zip(children, segments, strict=False):
                if k < len(half):
                    yield Send(dest=child, payload=half[k], tag=tag)
    else:
        yield from _relay(_segments(halves[side], segment_bytes), parent, children, tag)
    twin = (rank + 1) % size if side == 0 else (rank - 1) % size
    last = (root + size - 1) % size
    if size % 2 == 0 and rank == root:
        yield Send(dest=last, payload=halves[1], tag=tag)
    elif size % 2 == 0 and rank == last:
        yield Recv(source=root, tag=tag, buf=halves[1])
    elif rank != root:
        yield SendRecv(dest=twin, payload=halves[side], source=twin, buf=halves[1 - side], tag=tag)
    return buf


def linear_bcast(buf, root, rank, size, segment_bytes=0, tag=0):
    """Broadcast ``root``'s ``buf`` as Open MPI's basic linear one does
    (``ompi_coll_base_bcast_intra_basic_linear``): the root sends the whole buffer to every
    other rank, in rank order; each receives it once. ``segment_bytes`` is not used (the
    signature is `BCASTS`'). Yields Send and Recv; returns ``buf``. Collective.

    >>> from twinsgd.programs.lockstep import run_lockstep
    >>> bufs = [np.arange(3.0) if r == 1 else np.zeros(3) for r in range(3)]
    >>> out = run_lockstep([linear_bcast(b, 1, r, 3) for r, b in enumerate(bufs)])
    >>> [b.tolist() for b in out.results], out.sent
    ([[0.0, 1.0, 2.0], [0.0, 1.0, 2.0], [0.0, 1.0, 2.0]], [0, 48, 0])
    """
    _check(root, rank, size)
    return _linear(_flat(buf), buf, root, rank, size, tag)


def _linear(data, buf, root, rank, size, tag):
    if rank == root:
        for dest in range(size):
            if dest != root:
                yield Send(dest=dest, payload=data, tag=tag)
    else:
        yield Recv(source=root, tag=tag, buf=data)
    return buf


def bmtree(rank, root, size):
    """(parent, children) of ``rank`` in Open MPI's binomial tree (``ompi_coll_base_topo_
    build_bmtree``): with shifted rank s, the parent is s less its highest bit, the children
    s + 2^k for every 2^k above s (nearest first) under ``size``. (MPICH's binomial tree, in
    `programs.collectives.binomial_bcast`, takes off the lowest bit.)

    >>> [bmtree(r, 0, 6) for r in range(6)]
    [(None, [1, 2, 4]), (0, [3, 5]), (0, []), (1, []), (0, []), (1, [])]
    """
    shifted = (rank - root) % size
    mask = 1 << shifted.bit_length()  # the least power of two above s
    parent = None if shifted == 0 else (shifted ^ (mask >> 1)) + root
    children = []
    while mask < size and (shifted ^ mask) < size:
        children.append((shifted ^ mask) + root)
        mask <<= 1
    return (None if parent is None else parent % size), [c % size for c in children]


def knomial_tree(rank, root, size, radix=4):
    """(parent, children) of ``rank`` in Open MPI's k-nomial tree of ``radix`` (``ompi_coll_
    base_topo_build_kmtree``; 4 is the tuned component's default): shifted rank s hangs under
    s with its lowest nonzero base-``radix`` digit cleared, and has children s + j m (j = 1 ..
    radix - 1) for each power m of the radix below its own lowest nonzero digit's, farthest
    first.

    >>> [knomial_tree(r, 0, 6) for r in range(6)]
    [(None, [4, 1, 2, 3]), (0, []), (0, []), (0, []), (0, [5]), (4, [])]
    """
    shifted = (rank - root) % size
    parent, mask = None, 1
    while mask < size:
        if shifted % (radix * mask):
            parent = (shifted // (radix * mask) * (radix * mask) + root) % size
            break
        mask *= radix
    children, mask = [], mask // radix
    while mask > 0:
        for j in range(1, radix):
            if shifted + mask * j >= size:
                break
            children.append((shifted + mask * j + root) % size)
        mask //= radix
    return parent, children


def tree_bcast(buf, root, rank, size, segment_bytes=0, tag=0, tree=binary_tree):
    """Broadcast ``root``'s ``buf`` down ``tree`` ((rank, root, size) -> (parent, children)) as
    Open MPI's generic tree broadcast does (``ompi_coll_base_bcast_intra_generic``): each rank
    receives each segment of ``segment_bytes // itemsize`` elements (0: the whole buffer in one)
    from its parent and passes it to its children in the tree's order. Yields Recv, Send and
    SendRecv; returns ``buf``. Collective.

    >>> from twinsgd.programs.lockstep import run_lockstep
    >>> bufs = [np.arange(5.0) if r == 2 else np.zeros(5) for r in range(7)]
    >>> out = run_lockstep([tree_bcast(b, 2, r, 7, tree=knomial_tree) for r, b in enumerate(bufs)])
    >>> all(b.tolist() == list(range(5)) for b in out.results), sum(out.received)
    (True, 240)
    """
    _check(root, rank, size, segment_bytes)
    return _down_tree(buf, root, rank, size, tree, segment_bytes, tag)


def _down_tree(buf, root, rank, size, tree, segment_bytes, tag):
    parent, children = tree(rank, root, size)
    yield from _relay(_segments(_flat(buf), segment_bytes), parent, children, tag)
    return buf


def _nothing(buf):
    return buf
    yield  # a generator that yields nothing


def _flat(buf):
    """``buf`` as a flat array sharing its memory (a ghost as it is)."""
    return buf if isinstance(buf, GhostArray) else buf.reshape(-1)


def _check(root, rank, size, segment_bytes=0):
    if not (0 <= root < size and 0 <= rank < size):
        raise ValueError(f"root and rank must be in [0, size={size}), got {root} and {rank}")
    if segment_bytes < 0:
        raise ValueError(f"segment_bytes must be >= 0 (0: unsegmented), got {segment_bytes}")


def _binomial(buf, root, rank, size, segment_bytes, tag=0):
    return binomial_bcast(buf, root, rank, size, tag)


def _scatter_ring(buf, root, rank, size, segment_bytes, tag=0):
    return scatter_allgather_bcast(buf, root, rank, size, "ring", tag)


def _scatter_recursive_doubling(buf, root, rank, size, segment_bytes, tag=0):
    return scatter_allgather_bcast(buf, root, rank, size, "recursive-doubling", tag)


# `mpi_choices.bcast_algorithm`'s names -> program(buf, root, rank, size, segment_bytes, tag)
BCASTS = {
    "linear": linear_bcast,
    "binary": tree_bcast,
    "bmtree": partial(tree_bcast, tree=bmtree),
    "knomial": partial(tree_bcast, tree=knomial_tree),
    "binomial": _binomial,
    "scatter-ring": _scatter_ring,
    "scatter-recursive-doubling": _scatter_recursive_doubling,
    "pipeline": pipeline_bcast,
    "split-binary": split_binary_bcast,
}
