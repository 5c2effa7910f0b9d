"""Collectives built from point-to-point steps, written once for both backends.

Each collective here is a generator that yields `Send`, `Recv` and `SendRecv` operations and does
its own arithmetic, so the MPI backend and the simulator run the same sequence of messages and the
same additions in the same order: the simulated result equals the real one bit for bit.
"""

import math

import numpy as np

from twinsgd.programs.ops import Recv, Send, SendRecv


def chunk_bounds(n, size):
    """Start offsets of ``size`` contiguous chunks of ``n`` elements, sizes differing by at most 1.

    Examples
    --------
    >>> chunk_bounds(10, 4)
    [0, 2, 5, 7, 10]
    >>> chunk_bounds(2, 3)
    [0, 0, 1, 2]
    """
    return [n * i // size for i in range(size + 1)]


def ring_allreduce(buf, rank, size, tag=0):
    """Sum ``buf`` over all ranks in place: reduce-scatter, then allgather, around a ring.

    Rank r sends to r+1 and receives from r-1 (mod size) in 2(size-1) `SendRecv` steps. In
    reduce-scatter step s it sends chunk (r-s) and adds the incoming chunk (r-s-1) into its own
    copy; after size-1 steps it holds the full sum of chunk (r+1). In allgather step s it sends
    chunk (r-s+1) and receives chunk (r-s) straight into place. Any length works, including
    lengths shorter than ``size`` (some chunks are empty) and ``size`` 1 (no steps).

    Yields SendRecv operations; gets back the filled receive buffer. Returns ``buf``.

    Cost on the alpha-beta model (Thakur et al. 2005): ``T = 2(p-1)(alpha + n/(p*beta))`` for n
    bytes; each rank sends ``2(p-1)/p * n`` bytes when p divides the length.

    Parameters
    ----------
    buf : (n,) ndarray, contiguous
        This rank's contribution; holds the sum over ranks on return.
    rank, size : int
        This rank and the ring's length. Collective: every rank must run it with the same n.
    """
    if size == 1:
        return buf
    bounds = chunk_bounds(len(buf), size)
    chunk = [buf[bounds[i] : bounds[i + 1]] for i in range(size)]
    right, left = (rank + 1) % size, (rank - 1) % size
    scratch = np.empty(max(len(c) for c in chunk), dtype=buf.dtype)
    for s in range(size - 1):
        out, into = chunk[(rank - s) % size], chunk[(rank - s - 1) % size]
        incoming = yield SendRecv(
            dest=right, payload=out, source=left, buf=scratch[: len(into)], tag=tag, reduces=True
        )
        np.add(into, incoming, out=into)
    for s in range(size - 1):
        out, into = chunk[(rank - s + 1) % size], chunk[(rank - s) % size]
        # chunk (r - s) is the one its reduce-scatter step s sent away
        yield SendRecv(dest=right, payload=out, source=left, buf=into, tag=tag, rewrites_sent=True)
    return buf


def finish_reduction(buf, op, size):
    """Turn a sum over ``size`` ranks into the requested reduction, in place (both backends)."""
    if op == "mean" and size > 1:
        np.divide(buf, size, out=buf)
    return buf


def ring_allreduce_bytes(n, itemsize, rank, size):
    """Bytes ``(sent, received)`` by ``rank`` in `ring_allreduce` of ``n`` elements.

    It sends every chunk but (rank+1) in reduce-scatter and every chunk but (rank+2) in allgather;
    it receives every chunk but its own, then every chunk but (rank+1). When ``size`` divides ``n``
    both equal ``2(size-1)/size * n * itemsize``.

    Examples
    --------
    >>> ring_allreduce_bytes(1000, 4, rank=0, size=4)
    (6000, 6000)
    >>> ring_allreduce_bytes(5, 4, rank=0, size=1)
    (0, 0)
    """
    if size == 1:
        return 0, 0
    # Chunk i has n(i+1)//size - n*i//size elements, as chunk_bounds cuts them; O(1) per rank,
    # since the simulator asks for every rank of every collective.
    i, j, k = rank, (rank + 1) % size, (rank + 2) % size
    mine = n * (i + 1) // size - n * i // size
    next_ = n * (j + 1) // size - n * j // size
    after = n * (k + 1) // size - n * k // size
    sent = 2 * n - next_ - after
    received = 2 * n - mine - next_
    return sent * itemsize, received * itemsize


def average_models(models):
    """The mean of the nodes' weights, summed in rank order (so both backends get the same bits),
    and the consensus distance, the mean over nodes of ``||w_i - mean||``.

    Parameters
    ----------
    models : list of (params,) float32 arrays, in rank order.

    Returns
    -------
    (mean (params,) float32, consensus distance float)
    """
    mean = np.zeros_like(models[0])
    for weights in models:
        mean += weights
    finish_reduction(mean, "mean", len(models))
    return mean, float(np.mean([np.linalg.norm(weights - mean) for weights in models]))


def evaluate_for_log(fn, models, train_losses, average):
    """What an evaluation computes on the reporting rank, the same in both backends.

    ``models``: every rank's weights in rank order when ``average`` (the evaluated model is
    then their mean, `average_models`), else the reporter's alone.
    ``train_losses``: each rank's mean training loss since the last evaluation (NaN: a rank that
    trained on nothing, such as a server). Returns ``((test_loss, test_accuracy), train loss
    averaged over the ranks that trained (NaN if none), consensus distance or None)``.
    """
    params, consensus = models[0], None
    if average and len(models) > 1:
        params, consensus = average_models(models)
    trained = [x for x in train_losses if not math.isnan(x)]
    return fn(params), float(np.mean(trained)) if trained else math.nan, consensus


# -- recursive doubling and the binomial tree ----------------------------------------------------
#
# Written as MPICH writes them (MPIR_Allreduce_intra_recursive_doubling, MPIR_Bcast_intra_binomial;
# Thakur, Rabenseifner and Gropp 2005). Each public function checks its arguments when called and
# returns the generator of a private helper, so a bad rank fails at the call, not at the first step.


def recursive_doubling_allreduce(buf, rank, size, tag=0):
    """Sum ``buf`` over all ranks in place by recursive doubling (MPICH's scheme).

    With p' the largest power of two <= ``size`` and r = size - p' (Thakur et al. 2005):

    1. Fold in: of the first 2r ranks, each even rank `Send`s its buffer to rank+1, and each odd
       rank `Recv`s it and adds it to its own. The even ranks then sit out.
    2. Recursive doubling among the p' remaining ranks, renumbered ``newrank`` = rank // 2 for
       the odd ranks below 2r and rank - r above: for mask = 1, 2, 4, ... < p' a rank exchanges
       its whole buffer (`SendRecv`) with the rank whose newrank is ``newrank ^ mask`` and adds
       what it gets. When size is a power of two (r = 0) the partner is simply ``rank ^ mask``.
    3. Fold out: each odd rank below 2r `Send`s the sum to rank-1, which `Recv`s it into ``buf``.

    Every rank ends with the same bits: in each exchange one partner computes a + b and the other
    b + a, which IEEE addition makes equal, so after the step with mask m each block of 2m
    newranks holds one value; the ranks that sat out receive a copy. (Not when NaNs with
    different payloads meet: which payload a + b keeps depends on the operand order.)

    Yields Send, Recv and SendRecv operations; gets back None, ``(source, buf)`` and the filled
    receive buffer. Returns ``buf``. Collective: every rank must run it with the same n and tag.

    Cost on the alpha-beta model (Thakur et al. 2005), n bytes, alpha seconds per message, beta
    bytes per second: ``T = log2(p)(alpha + n/beta)`` when p is a power of two, and
    ``floor(log2 p)(alpha + n/beta) + 2(alpha + n/beta)`` otherwise (fold in, fold out). Each rank
    sends and receives ``n log2(p')`` bytes, the odd ranks below 2r ``n`` more, the even ranks
    below 2r only ``n``: see `recursive_doubling_bytes`. Fewer rounds than `ring_allreduce`
    (2(p-1)), but every round moves the whole buffer: the choice for short messages.

    Parameters
    ----------
    buf : (n,) ndarray, contiguous
        This rank's contribution; holds the sum over ranks on return.
    rank, size : int
        This rank and the number of ranks, 0 <= rank < size.
    tag : int
        Tag of every message.

    Raises
    ------
    ValueError
        If size < 1 or rank is not in [0, size).

    Examples
    --------
    >>> bufs = [np.full(3, r, np.float32) for r in range(2)]
    >>> programs = [recursive_doubling_allreduce(b, r, 2) for r, b in enumerate(bufs)]
    >>> ops = [next(p) for p in programs]
    >>> ops[0].dest, ops[0].source, ops[1].dest
    (1, 1, 0)
    """
    _check_rank(rank, size)
    return _recursive_doubling(buf, rank, size, tag)


def _fold_in(buf, rank, size, tag, incoming_first=False):
    """MPICH's fold to a power of two p' (recursive doubling, Rabenseifner): of the first 2r
    ranks (r = size - p') each even one sends its buffer to rank+1 and sits out until the sum
    comes back; each odd one adds it (``incoming + own`` if ``incoming_first``, MPICH's order in
    Rabenseifner's). Returns (p', r, newrank or None for a rank that sat out, scratch buffer)."""
    pof2 = 1 << (size.bit_length() - 1)
    rem = size - pof2
    if rank < 2 * rem and rank % 2 == 0:  # sits out: fold in, wait for the sum
        yield Send(dest=rank + 1, payload=buf, tag=tag)
        yield Recv(source=rank + 1, tag=tag, buf=buf)
        return pof2, rem, None, None
    scratch = np.empty(len(buf), dtype=buf.dtype)
    if rank < 2 * rem:  # odd: takes its even neighbour's share
        yield Recv(source=rank - 1, tag=tag, buf=scratch, reduces=True)
        if incoming_first:
            np.add(scratch, buf, out=buf)
        else:
            np.add(buf, scratch, out=buf)
        return pof2, rem, rank // 2, scratch
    return pof2, rem, rank - rem, scratch


def _recursive_doubling(buf, rank, size, tag):
    if size == 1:
        return buf
    pof2, rem, newrank, scratch = yield from _fold_in(buf, rank, size, tag)
    if newrank is None:
        return buf
    mask = 1
    while mask < pof2:
        partner = newrank ^ mask
        dest = partner * 2 + 1 if partner < rem else partner + rem  # back to a real rank
        incoming = yield SendRecv(
            dest=dest, payload=buf, source=dest, buf=scratch, tag=tag, reduces=True
        )
        np.add(buf, incoming, out=buf)
        mask <<= 1
    if rank < 2 * rem:  # fold out: the sum to the even neighbour that sat out
        yield Send(dest=rank - 1, payload=buf, tag=tag)
    return buf


def rabenseifner_allreduce(buf, rank, size, tag=0):
    """Sum ``buf`` over all ranks in place: reduce-scatter by recursive halving, then allgather
    by recursive doubling (Rabenseifner's algorithm, as MPICH's
    ``MPIR_Allreduce_intra_reduce_scatter_allgather`` runs it for long messages).

    With p' the largest power of two <= ``size`` and r = size - p', the first 2r ranks fold in
    and out as in `recursive_doubling_allreduce`. Among the p' others the buffer is cut into p'
    blocks, ``n // p'`` elements each and the remainder in the last (MPICH's ``cnts``). In the
    reduce-scatter, for mask = 1, 2, ... < p' a rank exchanges half of its current range of
    blocks with newrank ``^ mask`` (`SendRecv`; the lower newrank keeps the lower half) and adds
    what it gets into the half it keeps, so each ends holding the sum of one block; the
    allgather retraces the steps in reverse, exchanging the summed ranges back. A rank adds
    ``incoming + own``, MPICH's order (equal bits to ``own + incoming`` in IEEE arithmetic).

    Cost on the alpha-beta model, p' = p: ``2 log2(p) alpha + 2 (p-1)/p n/beta`` (Thakur et al.
    2005): the ring's bytes in log rounds; see `rabenseifner_time` for the exact figure with
    uneven blocks and the fold. MPICH runs it when the message is over 8 bytes and has at
    least p' elements (`mpich_allreduce`).

    Yields Send, Recv and SendRecv; returns ``buf``. Collective: every rank must run it with the
    same n and tag.

    Examples
    --------
    >>> from twinsgd.programs.lockstep import run_lockstep
    >>> bufs = [np.arange(10, dtype=np.float64) * (r + 1) for r in range(4)]
    >>> out = run_lockstep([rabenseifner_allreduce(b, r, 4) for r, b in enumerate(bufs)]).results
    >>> out[0].tolist() == (np.arange(10) * 10.0).tolist()
    True
    """
    _check_rank(rank, size)
    return _rabenseifner(buf, rank, size, tag)


def _rabenseifner_blocks(n, pof2):
    """MPICH's ``cnts`` and ``disps``: p' blocks of n // p', the remainder in the last."""
    counts = [n // pof2] * pof2
    counts[-1] = n - (n // pof2) * (pof2 - 1)
    starts = [0]
    for count in counts[:-1]:
        starts.append(starts[-1] + count)
    return counts, [*starts, n]


def _rabenseifner_span(n, pof2, first, end):
    """Elements in blocks ``first`` to ``end - 1`` of `_rabenseifner_blocks` ``(n, pof2)``,
    without making them: p' blocks of n // p', the remainder in the last. Why: the blocks are
    p' long, and the bytes and times below sum spans of them for every rank and step (at 10,000
    ranks, 45 s of a closed-form run's set-up summed them block by block).

    >>> counts, _ = _rabenseifner_blocks(1003, 8)
    >>> [_rabenseifner_span(1003, 8, a, b) == sum(counts[a:b]) for a, b in ((0, 8), (2, 5), (4, 8))]
    [True, True, True]
    """
    whole = n // pof2
    return (end - first) * whole + (n - whole * pof2 if end == pof2 and first < end else 0)


def _rabenseifner_schedule(newrank, pof2):
    """Per step of the reduce-scatter then the allgather: (partner newrank, send block range,
    receive block range), as MPICH's index arithmetic gives them."""
    steps, send_idx, recv_idx, last_idx, mask = [], 0, 0, pof2, 1
    while mask < pof2:  # reduce-scatter: recursive halving
        partner = newrank ^ mask
        if newrank < partner:
            send_idx = recv_idx + pof2 // (mask * 2)
            steps.append((partner, (send_idx, last_idx), (recv_idx, send_idx)))
        else:
            recv_idx = send_idx + pof2 // (mask * 2)
            steps.append((partner, (send_idx, recv_idx), (recv_idx, last_idx)))
        send_idx = recv_idx
        mask <<= 1
        if mask < pof2:
            last_idx = recv_idx + pof2 // mask
    mask >>= 1
    while mask > 0:  # allgather: recursive doubling, the steps in reverse
        partner = newrank ^ mask
        if newrank < partner:
            if mask != pof2 // 2:
                last_idx = last_idx + pof2 // (mask * 2)
            recv_idx = send_idx + pof2 // (mask * 2)
            steps.append((partner, (send_idx, recv_idx), (recv_idx, last_idx)))
        else:
            recv_idx = send_idx - pof2 // (mask * 2)
            steps.append((partner, (send_idx, last_idx), (recv_idx, send_idx)))
            send_idx = recv_idx
        mask >>= 1
    return steps


def _rabenseifner(buf, rank, size, tag):
    if size == 1:
        return buf
    pof2, rem, newrank, scratch = yield from _fold_in(buf, rank, size, tag, incoming_first=True)
    if newrank is None:
        return buf
    _, bounds = _rabenseifner_blocks(len(buf), pof2)
    schedule = _rabenseifner_schedule(newrank, pof2)
    for i, (partner, (s0, s1), (r0, r1)) in enumerate(schedule):
        dest = partner * 2 + 1 if partner < rem else partner + rem  # back to a real rank
        lo, hi = bounds[r0], bounds[r1]
        reducing = i < pof2.bit_length() - 1
        into = scratch[lo:hi] if reducing else buf[lo:hi]
        yield SendRecv(
            dest=dest,
            payload=buf[bounds[s0] : bounds[s1]],
            source=dest,
            buf=into,
            tag=tag,
            reduces=reducing,
            rewrites_sent=not reducing,  # the allgather receives the ranges it gave away
        )
        if reducing:
            np.add(into, buf[lo:hi], out=buf[lo:hi])
    if rank < 2 * rem:  # fold out: the sum to the even neighbour that sat out
        yield Send(dest=rank - 1, payload=buf, tag=tag)
    return buf


MPICH_RECURSIVE_DOUBLING_BYTES = 8  # MPICH 4+'s default selection (below)


def mpich_allreduce(n, itemsize, size):
    """The allreduce MPICH picks for n elements of ``itemsize`` bytes on ``size`` ranks, by the
    default selection MPICH 4 and 5 carry (the JSON built into libmpi, read from the 5.0.2
    wheel: ``"avg_msg_size<=8"`` recursive doubling, then for a built-in operation ``"count<
    pow2"`` recursive doubling, else ``reduce_scatter_allgather``): recursive doubling for
    messages of at most 8 bytes or fewer elements than p' (the largest power of two <= size),
    Rabenseifner's otherwise. MPICH 3's ``MPIR_Allreduce_intra_auto`` drew the line at 2,048
    bytes (``MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE``); measured on the emulated cluster, MPICH 5's
    allreduce of 16 B to 1 KiB takes two Sendrecvs' time (25-33 us), of 4 and 8 B one (16 us).

    >>> mpich_allreduce(2, 4, 2), mpich_allreduce(4, 4, 2), mpich_allreduce(4, 4, 16)
    ('recursive-doubling', 'rabenseifner', 'recursive-doubling')
    """
    pof2 = 1 << (max(size, 1).bit_length() - 1)
    if n * itemsize <= MPICH_RECURSIVE_DOUBLING_BYTES or n < pof2:
        return "recursive-doubling"
    return "rabenseifner"


def rabenseifner_bytes(n, itemsize, rank, size):
    """Bytes ``(sent, received)`` by ``rank`` in `rabenseifner_allreduce` of ``n`` elements."""
    _check_rank(rank, size)
    if size == 1:
        return 0, 0
    pof2 = 1 << (size.bit_length() - 1)
    rem = size - pof2
    if rank < 2 * rem and rank % 2 == 0:
        return n * itemsize, n * itemsize
    newrank = rank // 2 if rank < 2 * rem else rank - rem
    sent = received = n if rank < 2 * rem else 0  # the fold: in (received), out (sent)
    for _, (s0, s1), (r0, r1) in _rabenseifner_schedule(newrank, pof2):
        sent += _rabenseifner_span(n, pof2, s0, s1)
        received += _rabenseifner_span(n, pof2, r0, r1)
    return sent * itemsize, received * itemsize


def combined_s(gamma, nbytes):
    """Seconds a reduction takes to combine ``nbytes`` into its buffer: ``gamma`` a byte (a
    float, Thakur, Rabenseifner and Gropp's gamma), or ``gamma.seconds(nbytes)`` for a cost
    measured by size (`real.calibrate`'s ``[compute.reduction]``: an add whose operands fit the
    caches runs 3-4x faster a byte than one that streams from memory, 2026-12-02)."""
    if isinstance(gamma, int | float):
        return gamma * nbytes
    return float(gamma.seconds(nbytes))


def rabenseifner_time(n_bytes, size, alpha, beta, itemsize=1, gamma=0.0):
    """Seconds of `rabenseifner_allreduce` on the alpha-beta(-gamma) model: per step, alpha plus
    the largest message of that step over beta (every rank exchanges at once), plus that
    message's gamma in the reduce-scatter half, plus the fold in and out (alpha + n/beta each,
    and n gamma for the fold in) when size is not a power of two."""
    if size == 1:
        return 0.0
    n, pof2 = n_bytes // itemsize, 1 << (size.bit_length() - 1)
    largest, halving = {}, pof2.bit_length() - 1
    for newrank in range(pof2):
        for step, (_, (s0, s1), (r0, r1)) in enumerate(_rabenseifner_schedule(newrank, pof2)):
            largest[step] = max(
                largest.get(step, 0),
                _rabenseifner_span(n, pof2, s0, s1),
                _rabenseifner_span(n, pof2, r0, r1),
            )
    seconds = sum(
        alpha
        + count * itemsize / beta
        + (combined_s(gamma, count * itemsize) if step < halving else 0.0)
        for step, count in largest.items()
    )
    fold = 2 * (alpha + n_bytes / beta) + combined_s(gamma, n_bytes)
    return seconds + (0.0 if size == pof2 else fold)


def recursive_doubling_bytes(n, itemsize, rank, size):
    """Bytes ``(sent, received)`` by ``rank`` in `recursive_doubling_allreduce` of ``n`` elements.

    With p' the largest power of two <= size and r = size - p': ``n * itemsize`` times log2(p')
    for the ranks from 2r on, log2(p') + 1 for the odd ranks below 2r, and 1 for the even ranks
    below 2r. Sent equals received on every rank.

    Examples
    --------
    >>> recursive_doubling_bytes(1000, 4, rank=0, size=8)
    (12000, 12000)
    >>> [recursive_doubling_bytes(1000, 4, rank, size=6)[0] for rank in range(6)]
    [4000, 12000, 4000, 12000, 8000, 8000]
    >>> recursive_doubling_bytes(5, 4, rank=0, size=1)
    (0, 0)
    """
    _check_rank(rank, size)
    if size == 1:
        return 0, 0
    pof2 = 1 << (size.bit_length() - 1)
    rem = size - pof2
    sits_out = rank < 2 * rem and rank % 2 == 0
    messages = 1 if sits_out else pof2.bit_length() - 1 + (rank < 2 * rem)
    return messages * n * itemsize, messages * n * itemsize


def binomial_bcast(buf, root, rank, size, tag=0):
    """Broadcast ``root``'s ``buf`` into every rank's ``buf`` along a binomial tree (MPICH's).

    With relative rank ``vrank = (rank - root) mod size``, a rank other than the root receives
    (`Recv` into ``buf``) from vrank - mask for the lowest bit ``mask`` set in vrank, then sends
    (`Send`) to vrank + m for m = mask/2, mask/4, ..., 1 while vrank + m < size; the root sends for
    every power of two m < size, largest first. Received values are copied, so every rank ends
    with root's bits exactly.

    Yields Recv and Send operations; gets back ``(source, buf)`` and None. Returns ``buf``.
    Collective: every rank must run it with the same root, n and tag.

    Cost on the alpha-beta model (Thakur et al. 2005), n bytes, alpha seconds per message, beta
    bytes per second: ``T = ceil(log2 p)(alpha + n/beta)``. A rank sends to its children one after
    the other, so the assumption is that a message occupies its sender for the full
    ``alpha + n/beta`` (a Send completes when its bytes have left, and successive sends serialize
    on the sender's NIC); then the root's ceil(log2 p) sends take that many rounds and nobody
    waits longer. Where the latency overlaps the next send (the simulator's `StarNetwork`: a send
    returns once its bytes have left, they arrive alpha later) the formula is exact when p is a
    power of two and an upper bound otherwise. The root sends ``ceil(log2 p) n`` bytes; see
    `binomial_bcast_bytes`.

    Parameters
    ----------
    buf : (n,) ndarray, contiguous
        The data on the root; on the other ranks a buffer of the same shape and dtype, filled.
    root, rank, size : int
        The broadcasting rank, this rank and the number of ranks, 0 <= root, rank < size.
    tag : int
        Tag of every message.

    Raises
    ------
    ValueError
        If size < 1 or root or rank is not in [0, size).

    Examples
    --------
    >>> buf = np.zeros(4, np.float32)
    >>> [op.dest for op in binomial_bcast(buf, root=0, rank=0, size=6)]
    [4, 2, 1]
    >>> next(binomial_bcast(buf, root=2, rank=5, size=6)).source
    4
    """
    _check_rank(root, size, "root")
    _check_rank(rank, size)
    return _binomial_bcast(buf, root, rank, size, tag)


def _binomial_bcast(buf, root, rank, size, tag):
    vrank = (rank - root) % size
    mask = 1
    while mask < size:  # the parent: clear the lowest set bit of vrank
        if vrank & mask:
            yield Recv(source=(rank - mask) % size, tag=tag, buf=buf)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:  # the children: set each lower bit, largest subtree first
        if vrank + mask < size:
            yield Send(dest=(rank + mask) % size, payload=buf, tag=tag)
        mask >>= 1
    return buf


def binomial_bcast_bytes(n, itemsize, rank, root, size):
    """Bytes ``(sent, received)`` by ``rank`` in `binomial_bcast` of ``n`` elements from ``root``.

    Every rank but the root receives ``n * itemsize`` once; a rank sends it to each child.

    Examples
    --------
    >>> [binomial_bcast_bytes(1000, 4, rank, root=0, size=8) for rank in (0, 4, 6, 7)]
    [(12000, 0), (8000, 4000), (4000, 4000), (0, 4000)]
    >>> binomial_bcast_bytes(1000, 4, rank=3, root=0, size=1)
    Traceback (most recent call last):
    ...
    ValueError: rank must be in [0, size=1), got 3
    """
    _check_rank(root, size, "root")
    _check_rank(rank, size)
    vrank = (rank - root) % size
    children, mask = 0, 1
    while mask < size and not vrank & mask:
        children += vrank + mask < size
        mask <<= 1
    return children * n * itemsize, (n * itemsize if vrank else 0)


def reduce_bcast_allreduce(buf, rank, size, tag=0):
    """Sum ``buf`` over all ranks in place: a binomial-tree reduce to rank 0, then a
    `binomial_bcast` of the sum from it (Open MPI's ``nonoverlapping`` allreduce, a reduce and
    then a broadcast, here with binomial trees for both).

    The reduce is MPICH's binomial one for commutative operations: with mask = 1, 2, 4, ..., a
    rank whose bit ``mask`` is clear `Recv`s the partial sum of rank + mask (if that rank exists)
    and adds it to its own (``own + incoming``); a rank whose bit is set `Send`s its partial sum
    to rank - mask and is done. Rank 0 ends with the sum and broadcasts it, so every rank ends
    with rank 0's bits.

    Yields Send and Recv operations; gets back None and the filled receive buffer. Returns
    ``buf``. Collective: every rank must run it with the same n and tag.

    Cost on the alpha-beta-gamma model: ``ceil(log2 p)(2(alpha + n/beta) + n gamma)``, the
    reduce's rounds (each a message and its add) and the broadcast's; exact when p is a power
    of two, an upper bound otherwise. Every rank but 0 sends and receives n once in each half,
    and a rank with c children sends and receives n c times more (`reduce_bcast_bytes`):
    ``log2 p`` times the buffer through rank 0, where the ring moves 2 (p-1)/p of it. The
    choice of a library for small buffers on many ranks.

    Parameters
    ----------
    buf : (n,) ndarray, contiguous
        This rank's contribution; holds the sum over ranks on return.
    rank, size : int
        This rank and the number of ranks, 0 <= rank < size.
    tag : int
        Tag of every message.

    Raises
    ------
    ValueError
        If size < 1 or rank is not in [0, size).

    Examples
    --------
    >>> buf = np.zeros(4, np.float32)
    >>> next(reduce_bcast_allreduce(buf, 0, 4)).source, next(reduce_bcast_allreduce(buf, 3, 4)).dest
    (1, 2)
    """
    _check_rank(rank, size)
    return _reduce_bcast(buf, rank, size, tag)


def _reduce_bcast(buf, rank, size, tag):
    scratch, mask = np.empty_like(buf), 1
    while mask < size:  # the binomial reduce to rank 0
        if rank & mask:
            yield Send(dest=rank - mask, payload=buf, tag=tag)
            break
        if rank + mask < size:
            yield Recv(source=rank + mask, tag=tag, buf=scratch, reduces=True)
            np.add(buf, scratch, out=buf)
        mask <<= 1
    yield from _binomial_bcast(buf, 0, rank, size, tag)
    return buf


def reduce_bcast_bytes(n, itemsize, rank, size):
    """Bytes ``(sent, received)`` by ``rank`` in `reduce_bcast_allreduce` of ``n`` elements:
    the reduce mirrors the broadcast (what a rank receives from its children there it sends to
    them here), so each is the broadcast's sent plus received.

    >>> [reduce_bcast_bytes(1000, 4, rank, size=8) for rank in (0, 4, 7)]
    [(12000, 12000), (12000, 12000), (4000, 4000)]
    """
    sent, received = binomial_bcast_bytes(n, itemsize, rank, 0, size)
    return sent + received, sent + received


def alpha_beta_time(algorithm, n_bytes, size, alpha, beta, itemsize=1, gamma=0.0):
    """Seconds a collective over ``n_bytes`` on ``size`` ranks takes on the alpha-beta-gamma
    model.

    The formulas of Thakur, Rabenseifner and Gropp (2005), with p = ``size``, n = ``n_bytes``:

    - ``"ring"`` (`ring_allreduce`): ``2(p-1)(alpha + c/beta) + (p-1) c gamma``, c the largest
      chunk in bytes (``ceil(n/(p itemsize)) itemsize``; n/p when p divides the length), as the
      simulator's closed-form allreduce charges it. Exact when p divides the length, an upper
      bound otherwise.
    - ``"recursive-doubling"`` (`recursive_doubling_allreduce`): ``log2(p')(alpha + n/beta +
      n gamma)``, p' the largest power of two <= p, plus ``2(alpha + n/beta) + n gamma`` when p
      is not a power of two.
    - ``"binomial-bcast"`` (`binomial_bcast`): ``ceil(log2 p)(alpha + n/beta)``.
    - ``"reduce-bcast"`` (`reduce_bcast_allreduce`): ``ceil(log2 p)(2(alpha + n/beta) +
      n gamma)``.

    Thakur et al. write beta as seconds per byte (``alpha + n beta``); here it is the bandwidth.
    gamma is the reduction's arithmetic, seconds per byte combined.

    Parameters
    ----------
    algorithm : {"ring", "recursive-doubling", "rabenseifner", "reduce-bcast", "mpi", \
"binomial-bcast"}
        ("mpi": what MPICH picks, `mpich_allreduce`)
    n_bytes : int
        The buffer's size in bytes, a multiple of ``itemsize``.
    size : int
        Number of ranks, >= 1.
    alpha : float
        Latency per message, seconds, >= 0.
    beta : float
        Bandwidth, bytes per second, > 0.
    itemsize : int
        Bytes per element; the ring cuts the buffer between elements.
    gamma : float or cost model
        Seconds per byte the reduction combines, >= 0; or the measured seconds of combining
        n bytes by size (``[compute.reduction]``, `combined_s`).

    Returns
    -------
    float, seconds.

    Raises
    ------
    ValueError
        On an unknown algorithm or a value outside the ranges above.

    Examples
    --------
    >>> alpha_beta_time("ring", 4000, 4, alpha=1.0, beta=1000.0)
    12.0
    >>> alpha_beta_time("recursive-doubling", 4000, 6, alpha=1.0, beta=1000.0)
    20.0
    >>> alpha_beta_time("binomial-bcast", 4000, 6, alpha=1.0, beta=1000.0)
    15.0
    """
    if algorithm not in (*ALLREDUCES, "mpi", "binomial-bcast"):
        raise ValueError(
            f"algorithm must be ring, recursive-doubling, rabenseifner, reduce-bcast, mpi or "
            f"binomial-bcast, got {algorithm!r}"
        )
    if itemsize < 1:
        raise ValueError(f"itemsize must be >= 1, got {itemsize}")
    if n_bytes < 0 or n_bytes % itemsize:
        raise ValueError(
            f"n_bytes must be a multiple of itemsize={itemsize} and >= 0, got {n_bytes}"
        )
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0 seconds, got {alpha}")
    if not beta > 0:
        raise ValueError(f"beta must be > 0 bytes per second, got {beta}")
    if isinstance(gamma, int | float) and not gamma >= 0:
        raise ValueError(f"gamma must be >= 0 seconds per byte, got {gamma}")
    return _alpha_beta_time(algorithm, n_bytes, size, alpha, beta, itemsize, gamma)


def _alpha_beta_time(algorithm, n_bytes, size, alpha, beta, itemsize, gamma=0.0):
    if algorithm == "mpi":
        algorithm = mpich_allreduce(n_bytes // itemsize, itemsize, size)
    if algorithm == "rabenseifner":
        return rabenseifner_time(n_bytes, size, alpha, beta, itemsize, gamma)
    if algorithm == "ring":
        chunk = -(-n_bytes // itemsize // size) * itemsize  # the largest of chunk_bounds' chunks
        return 2 * (size - 1) * (alpha + chunk / beta) + (size - 1) * combined_s(gamma, chunk)
    message = alpha + n_bytes / beta
    if algorithm == "reduce-bcast":
        return (size - 1).bit_length() * (2 * message + combined_s(gamma, n_bytes))
    if algorithm == "recursive-doubling":
        rounds = size.bit_length() - 1
        combine = combined_s(gamma, n_bytes)
        folds = 0 if size & (size - 1) == 0 else 2 * message + combine
        return rounds * (message + combine) + folds
    return (size - 1).bit_length() * message  # ceil(log2 size) rounds


def _check_rank(rank, size, name="rank"):
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    if not 0 <= rank < size:
        raise ValueError(f"{name} must be in [0, size={size}), got {rank}")


ALLREDUCES = {
    "ring": ring_allreduce,
    "recursive-doubling": recursive_doubling_allreduce,
    "rabenseifner": rabenseifner_allreduce,
    "reduce-bcast": reduce_bcast_allreduce,
}
"""``--allreduce`` name -> the generator both backends run (``mpi``: the MPI library's own)."""


def allreduce_bytes(algorithm, n, itemsize, rank, size):
    """Bytes ``(sent, received)`` by ``rank`` in allreduce ``algorithm`` of ``n`` elements; MPI's
    own (``"mpi"``) is counted as the algorithm MPICH picks for it sends (`mpich_allreduce`)."""
    if algorithm == "mpi":
        algorithm = mpich_allreduce(n, itemsize, size)
    if algorithm == "rabenseifner":
        return rabenseifner_bytes(n, itemsize, rank, size)
    if algorithm == "recursive-doubling":
        return recursive_doubling_bytes(n, itemsize, rank, size)
    if algorithm == "reduce-bcast":
        return reduce_bcast_bytes(n, itemsize, rank, size)
    return ring_allreduce_bytes(n, itemsize, rank, size)
