"""Collectives built from point-to-point steps, written once for both backends.

Each collective here is a generator that yields `SendRecv` operations and does its own arithmetic,
so the MPI backend and the simulator run the same sequence of messages and the same additions in the
same order: the simulated result equals the real one bit for bit.
"""

import numpy as np

from algorithms.ops import SendRecv


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
    chunk = [buf[bounds[i]:bounds[i + 1]] for i in range(size)]
    right, left = (rank + 1) % size, (rank - 1) % size
    scratch = np.empty(max(len(c) for c in chunk), dtype=buf.dtype)
    for s in range(size - 1):
        out, into = chunk[(rank - s) % size], chunk[(rank - s - 1) % size]
        incoming = yield SendRecv(dest=right, payload=out, source=left, buf=scratch[:len(into)],
                                  tag=tag)
        np.add(into, incoming, out=into)
    for s in range(size - 1):
        out, into = chunk[(rank - s + 1) % size], chunk[(rank - s) % size]
        yield SendRecv(dest=right, payload=out, source=left, buf=into, tag=tag)
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
    bounds = chunk_bounds(n, size)
    length = [bounds[i + 1] - bounds[i] for i in range(size)]
    sent = 2 * n - length[(rank + 1) % size] - length[(rank + 2) % size]
    received = 2 * n - length[rank] - length[(rank + 1) % size]
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
