"""Splitting a data set across ranks: one seeded permutation per epoch, dealt out with a stride."""

import numpy as np


def shard_indices(n, rank, size, epoch, seed):
    """The example indices rank ``rank`` of ``size`` trains on in epoch ``epoch``.

    One global permutation ``perm`` of ``range(n)`` is drawn per (seed, epoch), the same on every
    rank, and rank ``r`` takes every ``size``-th element starting at ``r``: ``perm[rank::size]``.

    Parameters
    ----------
    n : int
        Number of examples, >= 0.
    rank : int
        This node, ``0 <= rank < size``.
    size : int
        Number of nodes, >= 1.
    epoch : int
        >= 0; each epoch has its own permutation (reshuffling).
    seed : int
        >= 0; the permutation comes from ``np.random.default_rng([seed, epoch])``.

    Returns
    -------
    indices : (ceil((n - rank) / size),) int64
        Distinct values in ``0 .. n - 1``; shard lengths differ by at most one between ranks.

    Raises
    ------
    ValueError
        Negative ``n``, ``epoch`` or ``seed``; ``size < 1``; ``rank`` outside ``0 .. size - 1``.

    Notes
    -----
    Properties (all tested):

    - The shards of the ranks are disjoint and their union is ``range(n)``.
    - Batch equivalence: with ``N = size`` and a per-rank batch size ``b``, the k-th batches of all
      ranks, ``shard[k*b:(k+1)*b]``, together make exactly the set ``perm[k*N*b:(k+1)*N*b]``: the
      k-th batch of size ``N*b`` of a 1-node run with the same seed (for each k with
      ``(k+1)*N*b <= n``). Rank r's j-th element is ``perm[j*N + r]``, so batch k covers positions
      ``k*N*b .. (k+1)*N*b - 1``. Hence synchronous data-parallel SGD whose gradients are averaged
      over ranks takes the same steps as serial SGD with batch ``N*b`` (up to floating-point
      summation order).
    - Different epochs give different orders (for n large enough that a repeat is unlikely).

    Examples
    --------
    >>> shard_indices(10, 0, 1, epoch=0, seed=0)
    array([4, 6, 2, 7, 3, 5, 9, 0, 8, 1])
    >>> shard_indices(10, 0, 2, epoch=0, seed=0), shard_indices(10, 1, 2, epoch=0, seed=0)
    (array([4, 2, 3, 9, 8]), array([6, 7, 5, 0, 1]))
    """
    for key, value in (("n", n), ("rank", rank), ("size", size), ("epoch", epoch), ("seed", seed)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise ValueError(f"shard_indices: {key} must be an integer, got {value!r}")
    if n < 0 or epoch < 0 or seed < 0:
        raise ValueError(f"shard_indices: n, epoch and seed must be >= 0, got {n}, {epoch}, {seed}")
    if size < 1:
        raise ValueError(f"shard_indices: size must be >= 1, got {size}")
    if not 0 <= rank < size:
        raise ValueError(f"shard_indices: rank must be in 0..{size - 1}, got {rank}")
    return _shard(int(n), int(rank), int(size), int(epoch), int(seed))


def _shard(n, rank, size, epoch, seed):
    perm = np.random.default_rng([seed, epoch]).permutation(n).astype(np.int64, copy=False)
    return np.ascontiguousarray(perm[rank::size])
