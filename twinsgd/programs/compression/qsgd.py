"""QSGD: stochastic quantisation to s levels per sign (Alistarh et al. 2017).

For g of length n with norm ||g||_2 and s levels, entry i is sent as a sign and a level l_i in
0..s: with r_i = s |g_i| / ||g||_2 and l = floor(r_i), l_i = l + 1 with probability r_i - l, else
l. The receiver gets ``Q(g)_i = ||g||_2 sign(g_i) l_i / s``, so E[Q(g)] = g (unbiased, up to
float32 rounding), with variance ``E||Q(g) - g||^2 <= min(n / s^2, sqrt(n) / s) ||g||^2``
(their Lemma 3.1), at most ``(||g||_2 / s)^2 / 4`` per entry.

Wire format: one float32 norm and, per entry, the code ``c_i = 2 l_i + [g_i < 0]`` in
``b = 1 + bit_length(s)`` bits, the fewest that hold a sign and 0..s. The codes are packed as b
bit planes, plane-major: bit j of c_i is bit ``j n + i`` of the stream (np.packbits order, most
significant bit of each byte first), which vectorises to b shifts and one packbits.
Bytes on the wire: ``HEADER_NBYTES + 4 + ceil(b n / 8)``.
"""

import math

import numpy as np

from twinsgd.programs.compression.base import HEADER_NBYTES, Codec, Message

MAX_LEVELS = 2**16 - 1


def bits_per_entry(levels):
    """b = 1 + bit_length(s): one sign bit and the fewest bits that hold 0..s.

    Examples
    --------
    >>> [bits_per_entry(s) for s in (1, 2, 3, 4, 16, 127, 128)]
    [2, 3, 3, 4, 6, 8, 9]
    """
    return 1 + int(levels).bit_length()


def variance_bound(n, levels):
    """omega = min(n / s^2, sqrt(n) / s): E||Q(g) - g||^2 <= omega ||g||^2 (Alistarh et al.)."""
    return min(n / levels**2, math.sqrt(n) / levels)


class QSGD(Codec):
    """``qsgd:LEVELS``: unbiased stochastic quantisation with s = LEVELS levels per sign.

    Bytes: ``HEADER_NBYTES + 4 + ceil(b n / 8)`` with ``b = 1 + bit_length(s)`` (s = 16: 6 bits).
    With ``contractive=True`` (what `ErrorFeedback` uses) the norm sent is divided by
    ``tau = 1 + omega``, omega = `variance_bound` (n, s). Since E||Q(g)||^2 <= tau ||g||^2,
    ``E||g - Q(g)/tau||^2 <= (1 - 1/tau) ||g||^2``: a contraction in expectation, as error
    feedback needs (Stich & Karimireddy 2019), where the unbiased Q would make the residual grow
    by up to sqrt(omega) per step.

    Examples
    --------
    >>> codec = QSGD(4)
    >>> g = np.array([3.0, -4.0, 0.0], np.float32)
    >>> msg = codec.encode(g, rng=np.random.default_rng(0))
    >>> msg.scale, codec.decode(msg), msg.nbytes
    (5.0, array([ 2.5 , -3.75,  0.  ], dtype=float32), 18)
    """

    name = "qsgd"
    needs_rng = True

    def __init__(self, levels, contractive=False):
        super().__init__()
        self.levels = levels
        self.is_contractive = contractive
        self.unbiased = not contractive
        self.spec = f"qsgd:{levels}"
        self._level_dtype = np.uint8 if levels < 2**8 else np.uint16

    def nbytes(self, n):
        """``HEADER_NBYTES + 4 + ceil(b n / 8)``, b = 1 + bit_length(s)."""
        return HEADER_NBYTES + 4 + (bits_per_entry(self.levels) * n + 7) // 8

    def contractive(self):
        """The same quantiser sending norm / (1 + omega) (for error feedback)."""
        return QSGD(self.levels, contractive=True)

    def _encode(self, g, rng):
        n, s, b = g.shape[0], self.levels, bits_per_entry(self.levels)
        r = np.abs(g, out=self._buffer("r", n, np.float32))
        # max(||g||, max|g|) makes |g_i| / norm <= 1 after float32 rounding, so l_i <= s.
        norm = np.float32(max(_norm(g), r.max()))
        planes = self._buffer("planes", n, np.uint8, rows=b)
        if norm == 0:
            planes.fill(0)
        else:
            np.divide(r, norm, out=r)
            np.multiply(r, np.float32(s), out=r)
            low = np.floor(r, out=self._buffer("low", n, np.float32))
            np.subtract(r, low, out=r)  # the fraction, exact in float32: P(round up)
            u = rng.random(n, dtype=np.float32, out=self._buffer("u", n, np.float32))
            up = np.less(u, r, out=self._buffer("up", n, np.bool_))
            level = self._buffer("level", n, self._level_dtype)
            np.copyto(level, low, casting="unsafe")
            np.add(level, up, out=level)
            np.less(g, 0, out=planes[0].view(np.bool_))
            shifted = self._buffer("shifted", n, self._level_dtype)
            for j in range(1, b):  # one pass per bit plane (b <= 17), not per entry
                np.right_shift(level, j - 1, out=shifted)
                np.bitwise_and(shifted, 1, out=planes[j], casting="unsafe")
        if self.is_contractive:
            norm = norm / np.float32(1 + variance_bound(n, s))
        return Message(self.name, n, bits=np.packbits(planes), scale=float(norm), levels=s)

    def _decode(self, msg, out):
        n, s = msg.n, msg.levels
        b = bits_per_entry(s)
        planes = np.unpackbits(msg.bits, count=b * n).reshape(b, n)
        level = self._buffer("level", n, np.uint8 if s < 2**8 else np.uint16)
        np.copyto(level, planes[b - 1])
        # NOTE: level + level, not left_shift: numpy's left_shift is not vectorised (10x slower).
        for j in range(b - 2, 0, -1):
            np.add(level, level, out=level)
            np.bitwise_or(level, planes[j], out=level)
        np.multiply(level, np.float32(msg.scale), out=out)
        np.divide(out, np.float32(s), out=out)  # (l norm) / s: norm / s may underflow to 0
        sign = self._buffer("sign", n, np.uint32)
        np.copyto(sign, planes[0])
        np.left_shift(sign, 31, out=sign)
        np.bitwise_or(out.view(np.uint32), sign, out=out.view(np.uint32))  # set the sign bits


def _norm(g):
    """||g||_2 as a float; float32 dot product, redone in float64 if it under- or overflowed."""
    with np.errstate(over="ignore"):  # an overflow is caught below, as an underflow is
        squares = float(np.dot(g, g))
    if not 1e-30 < squares < 1e30:
        g64 = g.astype(np.float64)
        squares = float(np.dot(g64, g64))
    return math.sqrt(squares)
