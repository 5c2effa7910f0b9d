"""Sparsifying codecs: send some entries as (value, index) pairs, the rest count as zero.

``threshold:T`` keeps every entry with |g| > T (Strom 2015), ``topk:F`` the k largest |g| and
``randomk:F`` k uniformly random entries, scaled by n/k (Stich et al. 2018; Wangni et al. 2018),
with k = max(1, round(F n)). A message holds the kept values as float32 and their indices, sorted
and distinct, in the narrowest unsigned dtype holding n-1 (`index_dtype`): w = 1 byte for
n <= 256, 2 for n <= 65536, else 4. Bytes on the wire: ``HEADER_NBYTES + k (4 + w)``.
"""

import numpy as np

from twinsgd.programs.compression.base import HEADER_NBYTES, Codec, Message, index_dtype


def kept_count(fraction, n):
    """k = max(1, round(F n)) entries of n (Python's round: halves go to the even neighbour)."""
    return max(1, round(fraction * n))


class _Sparse(Codec):
    """Shared decoding: the kept values at their indices, zero elsewhere."""

    def _message(self, n, indices, values):
        return Message(
            self.name,
            n,
            values=values.astype(np.float32, copy=False),
            indices=indices.astype(index_dtype(n)),
        )

    def _decode(self, msg, out):
        out.fill(0)
        out[msg.indices] = msg.values

    def _add_into(self, msg, acc):
        acc[msg.indices] += msg.values  # indices are distinct, so no np.add.at is needed


class Threshold(_Sparse):
    """``threshold:T``: keep the entries with |g_i| > T, T > 0.

    How many are kept depends on g: ``nbytes(n)`` is None, and a message takes
    ``HEADER_NBYTES + k (4 + w)`` bytes for the k entries kept (k may be 0).

    Examples
    --------
    >>> codec = Threshold(0.5)
    >>> msg = codec.encode(np.array([0.1, -0.7, 0.5, 2.0], np.float32))
    >>> msg.indices, msg.values, msg.nbytes
    (array([1, 3], dtype=uint8), array([-0.7,  2. ], dtype=float32), 22)
    """

    name = "threshold"

    def __init__(self, threshold):
        super().__init__()
        self.threshold = threshold
        self.spec = f"threshold:{threshold!r}"
        # |g| > T (exactly, for the real number T) <=> |g| > the largest float32 <= T.
        t32 = np.float32(min(threshold, float(np.finfo(np.float32).max)))
        self._t32 = np.nextafter(t32, np.float32(0)) if float(t32) > threshold else t32

    def nbytes(self, n):
        """None: the number of entries above T depends on the gradient."""
        return None

    def _encode(self, g, rng):
        n = g.shape[0]
        magnitude = np.abs(g, out=self._buffer("abs", n, np.float32))
        kept = np.greater(magnitude, self._t32, out=self._buffer("mask", n, np.bool_))
        indices = np.flatnonzero(kept)
        return self._message(n, indices, g[indices])


class TopK(_Sparse):
    """``topk:F``: keep the k = max(1, round(F n)) entries of largest |g|, 0 < F <= 1.

    Selected by np.argpartition: when several entries tie at the k-th largest |g|, which of
    them are kept is up to it (always a valid top-k set, the same for the same g). Bytes:
    ``HEADER_NBYTES + k (4 + w)``.

    Examples
    --------
    >>> msg = TopK(0.5).encode(np.array([0.1, -0.7, 0.5, 2.0], np.float32))
    >>> msg.indices, msg.values, msg.nbytes
    (array([1, 3], dtype=uint8), array([-0.7,  2. ], dtype=float32), 22)
    """

    name = "topk"

    def __init__(self, fraction):
        super().__init__()
        self.fraction = fraction
        self.spec = f"topk:{fraction!r}"

    def nbytes(self, n):
        """``HEADER_NBYTES + k (4 + w)``, k = max(1, round(F n)), w = index_dtype(n).itemsize."""
        return HEADER_NBYTES + kept_count(self.fraction, n) * (4 + index_dtype(n).itemsize)

    def _encode(self, g, rng):
        n = g.shape[0]
        k = kept_count(self.fraction, n)
        magnitude = np.abs(g, out=self._buffer("abs", n, np.float32))
        # Selection (introselect), O(n), no full sort; only the k kept indices are sorted.
        indices = np.sort(np.argpartition(magnitude, n - k)[n - k :])
        return self._message(n, indices, g[indices])


class RandomK(_Sparse):
    """``randomk:F``: k = max(1, round(F n)) distinct entries drawn uniformly, scaled by n/k.

    Each entry is kept with probability k/n, so sending ``(n/k) g_i`` makes the decoded vector an
    unbiased estimate of g (up to float32 rounding of the product). With ``scaled=False`` (what
    `ErrorFeedback` uses) the values go unscaled: biased, but a contraction,
    ``||g - C(g)||^2 = (1 - k/n) ||g||^2`` in expectation. Bytes: ``HEADER_NBYTES + k (4 + w)``.

    Examples
    --------
    >>> msg = RandomK(0.5).encode(np.ones(4, np.float32), rng=np.random.default_rng(0))
    >>> len(msg.indices), msg.values, msg.nbytes
    (2, array([2., 2.], dtype=float32), 22)
    """

    name = "randomk"
    needs_rng = True

    def __init__(self, fraction, scaled=True):
        super().__init__()
        self.fraction = fraction
        self.scaled = scaled
        self.unbiased = scaled
        self.is_contractive = not scaled
        self.spec = f"randomk:{fraction!r}"

    def nbytes(self, n):
        """``HEADER_NBYTES + k (4 + w)``, k = max(1, round(F n)), w = index_dtype(n).itemsize."""
        return HEADER_NBYTES + kept_count(self.fraction, n) * (4 + index_dtype(n).itemsize)

    def contractive(self):
        """The same sampling without the n/k scale (for error feedback)."""
        return RandomK(self.fraction, scaled=False)

    def _encode(self, g, rng):
        n = g.shape[0]
        k = kept_count(self.fraction, n)
        indices = np.sort(rng.choice(n, k, replace=False, shuffle=False))
        values = g[indices]
        if self.scaled:
            values *= np.float32(n / k)
        return self._message(n, indices, values)
