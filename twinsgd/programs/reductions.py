"""Reduce to one root as MPICH runs it, built from our operations so the same program runs
measured under MPI and simulated (`sim.osu`'s osu_reduce).

- `binomial_reduce`: MPICH's ``MPIR_Reduce_intra_binomial`` for a commutative op. Relative to
  the root, a rank adds in what each child of a binomial tree sends it (the child at relative
  rank ``rel | mask`` for each ``mask`` below its own lowest set bit) and then sends its sum to
  its parent (``rel - mask``): Open MPI's in-order binomial tree, unsegmented (`tree_reduce`).
  ``ceil(log2 p)`` rounds: ``log2 p (alpha + n/beta + n gamma)`` (Thakur, Rabenseifner and
  Gropp 2005).
- `reduce_scatter_gather`: MPICH's ``MPIR_Reduce_intra_reduce_scatter_gather`` (Rabenseifner's
  reduce): past a power of two p' the odd ranks below 2 (p - p') hand their buffer to the even
  one below them and sit out; the p' left reduce-scatter by recursive halving (block i, of
  ``n / p'`` elements, the first ``n mod p'`` one more, ends summed at new rank i), then the
  blocks are gathered to the root down a binomial tree of the same halving, halves growing.
  ``2 log2 p' alpha + 2 (p'-1)/p' n/beta + (p'-1)/p' n gamma`` for a power of two.

MPICH 4 and 5 pick (their built-in selection, the JSON in the library): the binomial tree up to
2,048 bytes, or where the buffer has fewer elements than p'; else the reduce-scatter and gather
(`mpi_choices.reduce_algorithm`).

Open MPI (``ompi/mca/coll/base/coll_base_reduce.c``) reduces along a tree in segments
(``ompi_coll_base_reduce_generic``; `tree_reduce`): a leaf sends its segments to its parent one
by one; an inner rank, segment by segment, takes each child's in turn and adds it in, and sends
the finished segment up while it takes the next segment's first child's (its receive posted
before that send: a `SendRecv` of two peers here, as in `programs.broadcasts`). The trees: the
in-order binomial tree (``ompi_coll_base_topo_build_in_order_bmtree``: MPICH's tree), Open MPI's
binary tree (`programs.broadcasts.binary_tree`) and the chain root, root + 1, ... (the
pipeline, ``build_chain`` of fan-out 1); and `linear_reduce`, every rank straight to the root.
Open MPI 4.0 picks among them and their segment sizes by size and message (`mpi_choices`).

Only the root's buffer holds the sum on return; the others' hold partial sums, as MPI leaves a
non-root's receive buffer undefined.

Open MPI's ``nonoverlapping`` allreduce (``ompi_coll_base_allreduce_intra_nonoverlapping``) is a
reduce to rank 0 and a broadcast from it, each through the communicator's own reduce and
broadcast, so through the same fixed decisions (`library_reduce_bcast`).
"""

import numpy as np

from twinsgd.programs.broadcasts import BCASTS, _flat, _segments, binary_tree, chain
from twinsgd.programs.collectives import _check_rank, _rabenseifner_schedule
from twinsgd.programs.mpi_choices import bcast_algorithm, reduce_algorithm
from twinsgd.programs.ops import Recv, Send, SendRecv


def binomial_reduce(buf, root, rank, size, tag=0):
    """Sum ``buf`` over ``size`` ranks into ``root``'s ``buf`` down a binomial tree (the
    module's docstring). Yields Send and Recv; returns ``buf``.

    >>> from twinsgd.programs.lockstep import run_lockstep
    >>> bufs = [np.full(3, float(r)) for r in range(5)]
    >>> _ = run_lockstep([binomial_reduce(b, 2, r, 5) for r, b in enumerate(bufs)])
    >>> bufs[2].tolist()
    [10.0, 10.0, 10.0]
    """
    _check_rank(rank, size)
    _check_rank(root, size, "root")
    return tree_reduce(buf, *in_order_binomial_tree(rank, root, size), 0, tag)


def reduce_scatter_gather(buf, root, rank, size, tag=0):
    """Sum ``buf`` over ``size`` ranks into ``root``'s ``buf`` by MPICH's reduce-scatter and
    gather (the module's docstring); needs ``len(buf)`` >= the largest power of two <= size.
    Yields Send, Recv and SendRecv; returns ``buf``.

    >>> from twinsgd.programs.lockstep import run_lockstep
    >>> bufs = [np.arange(8.0) + r for r in range(6)]
    >>> _ = run_lockstep([reduce_scatter_gather(b, 3, r, 6) for r, b in enumerate(bufs)])
    >>> bufs[3].tolist() == (6 * np.arange(8.0) + 15).tolist()
    True
    """
    _check_rank(rank, size)
    _check_rank(root, size, "root")
    pof2 = 1 << (size.bit_length() - 1)
    if len(buf) < pof2:
        raise ValueError(f"reduce_scatter_gather needs >= {pof2} elements, got {len(buf)}")
    rem = size - pof2
    incoming = np.empty_like(buf)
    if rank < 2 * rem and rank % 2:  # odd: hand my buffer down, sit out
        yield Send(dest=rank - 1, payload=buf, tag=tag)
        newrank = None
    else:
        if rank < 2 * rem:  # even: take my odd neighbour's in
            got = yield Recv(source=rank + 1, tag=tag, buf=incoming, reduces=True)
            np.add(buf, got[1], out=buf)
            newrank = rank // 2
        else:
            newrank = rank - rem
    counts = np.full(pof2, len(buf) // pof2)
    counts[: len(buf) % pof2] += 1
    offsets = [0, *np.cumsum(counts).tolist()]  # block i is [offsets[i], offsets[i + 1])
    levels = pof2.bit_length() - 1

    def real(new):  # a new rank's real rank
        return new * 2 if new < rem else new + rem

    def blocks(first_last):  # blocks [first, last) of buf
        return slice(offsets[first_last[0]], offsets[first_last[1]])

    if newrank is not None:  # reduce-scatter by recursive halving, as the allreduce's
        for partner, out, into in _rabenseifner_schedule(newrank, pof2)[:levels]:
            got = yield SendRecv(
                dest=real(partner),
                payload=buf[blocks(out)],
                source=real(partner),
                buf=incoming[blocks(into)],
                tag=tag,
                reduces=True,
            )
            np.add(buf[blocks(into)], got, out=buf[blocks(into)])
    # the gather to the root; a root that sat out takes new rank 0's place (and its blocks)
    stand_in = root < 2 * rem and root % 2
    if stand_in:
        if rank == root:
            yield Recv(source=0, tag=tag, buf=buf[blocks((0, 1))])
            newrank = 0
        elif newrank == 0:
            yield Send(dest=root, payload=buf[blocks((0, 1))], tag=tag)
            newrank = None
        newroot = 0
    else:
        newroot = root // 2 if root < 2 * rem else root - rem
    if newrank is None:
        return buf
    # the allgather's steps in reverse, each half of the tree towards the root's half
    gather = _rabenseifner_schedule(newrank, pof2)[levels:]
    for j, (partner, out, into) in zip(range(levels - 1, -1, -1), gather, strict=True):
        dest = root if stand_in and partner == 0 else real(partner)
        if partner >> j == newroot >> j:  # the partner's half holds the root: send and stop
            yield Send(dest=dest, payload=buf[blocks(out)], tag=tag)
            break
        yield Recv(source=dest, tag=tag, buf=buf[blocks(into)])
    return buf


def in_order_binomial_tree(rank, root, size):
    """(parent, children) of ``rank`` in Open MPI's in-order binomial tree rooted at ``root``
    (``ompi_coll_base_topo_build_in_order_bmtree``): relative rank v's children are v ^ mask
    for the masks below v's lowest set bit (from 1 up) that stay below ``size``, its parent
    v ^ (that bit).

    >>> [in_order_binomial_tree(r, 0, 8) for r in (0, 4, 6, 7)]
    [(None, [1, 2, 4]), (0, [5, 6]), (4, [7]), (6, [])]
    """
    vrank, mask, children = (rank - root) % size, 1, []
    while mask < size:
        remote = vrank ^ mask
        if remote < vrank:
            return (remote + root) % size, children
        if remote < size:
            children.append((remote + root) % size)
        mask <<= 1
    return None, children


def in_order_binary_tree(rank, size):
    """(parent, children) of ``rank`` in Open MPI's in-order binary tree of ``size`` ranks
    (``ompi_coll_base_topo_build_in_order_bintree``): rooted at rank ``size - 1`` whatever the
    reduce's root; a node's left child the rank below it, its right child the root of the
    lower ``size // 2`` ranks' subtree, each subtree built the same way.

    >>> [in_order_binary_tree(r, 9) for r in (8, 7, 3, 5, 1, 0)]  # Open MPI's picture
    [(None, [7, 3]), (8, [6, 5]), (8, [2, 1]), (7, [4]), (3, [0]), (1, [])]
    """
    me, top, parent, delta, below = rank, size, size - 1, 0, None
    while True:
        right_size = top >> 1
        left = parent - 1 if top > 1 else -1
        right = right_size - 1 if left > 0 else -1
        if me == parent:
            return below, [c + delta for c in (left, right) if c >= 0]
        if me > right:  # in the left subtree
            if me == left:
                below = parent + delta
            top, delta, me = top - right_size - 1, delta + right_size, me - right_size
            parent = top - 1
        else:  # in the right subtree
            if me == right:
                below = parent + delta
            top, parent = right_size, right


def tree_reduce(buf, parent, children, segment_bytes, tag=0):
    """A rank's part of Open MPI's segmented reduce along a tree (the module's docstring): its
    ``parent`` (None: the root) and ``children`` in the order it takes them; segments of
    ``segment_bytes // itemsize`` elements (0: the whole buffer, one segment). Adds into
    ``buf``. Yields Recv, Send and SendRecv; returns ``buf``."""
    data = _flat(buf)
    segments = _segments(data, segment_bytes)
    if not children:  # a leaf: its segments up, one after another (a root alone: nothing)
        for segment in segments if parent is not None else ():
            yield Send(dest=parent, payload=segment, tag=tag)
        return buf
    incoming = np.empty_like(segments[0])
    for k, segment in enumerate(segments):
        into = incoming[: segment.size]
        for i, child in enumerate(children):
            if i == 0 and k > 0 and parent is not None:  # the last segment up, the next one in
                step = SendRecv(parent, segments[k - 1], child, into, tag, reduces=True)
            else:
                step = Recv(source=child, tag=tag, buf=into, reduces=True)
            yield step
            np.add(segment, into, out=segment)
    if parent is not None:
        yield Send(dest=parent, payload=segments[-1], tag=tag)
    return buf


def linear_reduce(buf, root, rank, size, segment_bytes=0, tag=0):
    """Open MPI's ``basic_linear`` reduce: every other rank sends its buffer to ``root``, which
    takes them from rank ``size - 1`` down to 0 and adds each in. Yields Send or Recv; returns
    ``buf``.

    >>> from twinsgd.programs.lockstep import run_lockstep
    >>> bufs = [np.full(2, float(r)) for r in range(4)]
    >>> _ = run_lockstep([linear_reduce(b, 1, r, 4) for r, b in enumerate(bufs)])
    >>> bufs[1].tolist()
    [6.0, 6.0]
    """
    _check_rank(rank, size)
    _check_rank(root, size, "root")
    if rank != root:
        yield Send(dest=root, payload=buf, tag=tag)
        return buf
    incoming = np.empty_like(buf)
    for source in range(size - 1, -1, -1):
        if source != root:
            yield Recv(source=source, tag=tag, buf=incoming, reduces=True)
            np.add(buf, incoming, out=buf)
    return buf


def _on_tree(tree):
    def program(buf, root, rank, size, segment_bytes=0, tag=0):
        _check_rank(rank, size)
        _check_rank(root, size, "root")
        parent, children = tree(rank, root, size)
        return tree_reduce(buf, parent, children, segment_bytes, tag)

    program.__doc__ = f"""Open MPI's segmented reduce along `{tree.__name__}` (`tree_reduce`)."""
    return program


def in_order_binary_reduce(buf, root, rank, size, segment_bytes=0, tag=0):
    """Open MPI's ``in_order_binary`` reduce: `tree_reduce` along `in_order_binary_tree`, whose
    root is rank ``size - 1``; that rank then sends the sum to ``root`` if it is another.

    >>> from twinsgd.programs.lockstep import run_lockstep
    >>> bufs = [np.full(2, float(r)) for r in range(5)]
    >>> _ = run_lockstep([in_order_binary_reduce(b, 1, r, 5) for r, b in enumerate(bufs)])
    >>> bufs[1].tolist()
    [10.0, 10.0]
    """
    _check_rank(rank, size)
    _check_rank(root, size, "root")
    top = size - 1
    yield from tree_reduce(buf, *in_order_binary_tree(rank, size), segment_bytes, tag)
    if root != top and rank == top:
        yield Send(dest=root, payload=buf, tag=tag)
    elif root != top and rank == root:
        yield Recv(source=top, tag=tag, buf=buf)
    return buf


in_order_binomial_reduce = _on_tree(in_order_binomial_tree)
binary_reduce = _on_tree(binary_tree)
pipeline_reduce = _on_tree(chain)


def _mpich(program):
    def unsegmented(buf, root, rank, size, segment_bytes=0, tag=0):
        return program(buf, root, rank, size, tag)

    unsegmented.__doc__ = program.__doc__
    return unsegmented


# `mpi_choices.reduce_algorithm`'s names -> program(buf, root, rank, size, segment_bytes, tag)
REDUCES = {
    "binomial": _mpich(binomial_reduce),
    "reduce-scatter-gather": _mpich(reduce_scatter_gather),
    "linear": linear_reduce,
    "in-order-binomial": in_order_binomial_reduce,
    "binary": binary_reduce,
    "pipeline": pipeline_reduce,
    "in-order-binary": in_order_binary_reduce,
}


def library_reduce_bcast(buf, rank, size, library, tag=0):
    """Sum ``buf`` over ``size`` ranks into every rank's ``buf`` as Open MPI's ``nonoverlapping``
    allreduce does: the reduce to rank 0 that ``library`` picks for it (`reduce_algorithm`,
    with its segments), then the broadcast from rank 0 it picks (`bcast_algorithm`). Every
    rank ends with rank 0's bits. Yields Send, Recv and SendRecv; returns ``buf``. Collective.

    >>> from twinsgd.programs.lockstep import run_lockstep
    >>> bufs = [np.full(3, float(r)) for r in range(6)]
    >>> _ = run_lockstep([library_reduce_bcast(b, r, 6, "openmpi-4.1") for r, b in enumerate(bufs)])
    >>> [b.tolist() for b in bufs] == [[15.0] * 3] * 6
    True
    """
    _check_rank(rank, size)
    reduce, segment_bytes = reduce_algorithm(library, buf.size, buf.itemsize, size)
    yield from REDUCES[reduce](buf, 0, rank, size, segment_bytes, tag)
    bcast, segment_bytes = bcast_algorithm(library, buf.nbytes, size, count=buf.size)
    yield from BCASTS[bcast](buf, 0, rank, size, segment_bytes, tag)
    return buf
