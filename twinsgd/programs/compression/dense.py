"""Codecs that send every entry: ``none`` (float32), ``fp16`` (float16) and ``sign`` (one bit).

Bytes on the wire, for a length-n gradient::

    none   4 n                              the plain dense buffer, no header
    fp16   HEADER_NBYTES + 2 n
    sign   HEADER_NBYTES + 4 + ceil(n / 8)  one float32 scale, one bit per entry
"""

import numpy as np

from twinsgd.programs.compression.base import HEADER_NBYTES, Codec, Message

FP16_MAX = float(np.finfo(np.float16).max)  # 65504.0

# Row b holds the eight signs (+1 for a 0 bit, -1 for a 1 bit) of the packed byte b, most
# significant bit first (np.packbits order): decoding a sign message is one table lookup per byte.
_SIGNS = 1 - 2 * np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.float32)


class NoCompression(Codec):
    """``none``: the dense float32 gradient, exactly the buffer uncompressed algorithms send.

    Bytes on the wire: ``4 n`` (no header). The message holds a copy of g.

    Examples
    --------
    >>> NoCompression().encode(np.ones(1000, np.float32)).nbytes
    4000
    """

    name = "none"
    spec = "none"
    unbiased = True

    def nbytes(self, n):
        """``4 n``."""
        return 4 * n

    def _encode(self, g, rng):
        return Message(self.name, g.shape[0], values=g.copy())

    def _decode(self, msg, out):
        np.copyto(out, msg.values)

    def _add_into(self, msg, acc):
        np.add(acc, msg.values, out=acc)


class FP16(Codec):
    """``fp16``: every entry rounded to float16 (to nearest, ties to even).

    Relative error at most 2**-11 for |g| in float16's normal range [2**-14, 65504], absolute
    error at most 2**-25 below it; entries beyond +-65504 are clipped to +-65504 (saturated, not
    sent as inf; error feedback carries the remainder); NaN stays NaN. Bytes:
    ``HEADER_NBYTES + 2 n``.

    Examples
    --------
    >>> codec = FP16()
    >>> msg = codec.encode(np.array([1.0, 1e-3, 1e5], np.float32))
    >>> codec.decode(msg), msg.nbytes
    (array([1.0000000e+00, 1.0004044e-03, 6.5504000e+04], dtype=float32), 18)
    """

    name = "fp16"
    spec = "fp16"

    def nbytes(self, n):
        """``HEADER_NBYTES + 2 n``."""
        return HEADER_NBYTES + 2 * n

    def _encode(self, g, rng):
        n = g.shape[0]
        low, high = g.min(), g.max()  # NaN if g holds one
        if not -FP16_MAX <= low <= high <= FP16_MAX:  # NOTE: the clip pass only when needed
            g = np.clip(g, -FP16_MAX, FP16_MAX, out=self._buffer("clipped", n, np.float32))
            if np.isnan(low) or np.isnan(high):  # numpy's cast keeps NaN a NaN
                return Message(self.name, n, values=g.astype(np.float16))
        values = np.empty(n, np.uint16)
        _float16_bits(
            g, values, self._buffer("base", n, np.float32), self._buffer("bits", n, np.uint32)
        )
        return Message(self.name, n, values=values.view(np.float16))

    def _decode(self, msg, out):
        np.copyto(out, msg.values)

    def _add_into(self, msg, acc):
        np.add(acc, msg.values, out=acc)


class Sign(Codec):
    """``sign``: one bit per entry and one float32 scale, the mean |g| (scaled signSGD).

    Decodes to ``scale * sign(g)`` with ``scale = ||g||_1 / n``, a zero entry counting as
    positive: the compressor of EF-signSGD (Karimireddy et al. 2019; Bernstein et al. 2018 for
    signSGD). Bit i of the packed bytes (most significant first, as np.packbits) is 1 where
    g_i < 0. Bytes: ``HEADER_NBYTES + 4 + ceil(n / 8)``.

    Examples
    --------
    >>> codec = Sign()
    >>> msg = codec.encode(np.array([3.0, -1.0, 0.0, -4.0], np.float32))
    >>> msg.scale, msg.bits, codec.decode(msg), msg.nbytes
    (2.0, array([80], dtype=uint8), array([ 2., -2.,  2., -2.], dtype=float32), 17)
    """

    name = "sign"
    spec = "sign"

    def nbytes(self, n):
        """``HEADER_NBYTES + 4 + ceil(n / 8)``."""
        return HEADER_NBYTES + 4 + (n + 7) // 8

    def _encode(self, g, rng):
        n = g.shape[0]
        magnitude = np.abs(g, out=self._buffer("abs", n, np.float32))
        scale = float(np.float32(np.add.reduce(magnitude, dtype=np.float64) / n))
        negative = np.less(g, 0, out=self._buffer("negative", n, np.bool_))
        return Message(self.name, n, bits=np.packbits(negative), scale=scale)

    def _decode(self, msg, out):
        table = _SIGNS * np.float32(msg.scale)
        full = msg.n // 8
        # mode="clip" (indices are bytes, always in range) lets take write into out unbuffered.
        np.take(table, msg.bits[:full], axis=0, out=out[: 8 * full].reshape(full, 8), mode="clip")
        if full * 8 < msg.n:
            out[8 * full :] = table[msg.bits[full], : msg.n - 8 * full]


def _float16_bits(g, out, base, work):
    """The float16 bit patterns of g (finite, |g| <= 65504) into ``out``, (n,) uint16.

    Bit-exact with ``g.astype(np.float16)`` (round to nearest, ties to even; checked for every
    float32 in [-65504, 65504]), by the branch-free integer method of Maratyszcza's FP16 library
    (``fp16_ieee_from_fp32_value``), without its inf/NaN branch. ``base`` (n,) float32 and
    ``work`` (n,) uint32 are scratch.
    """
    # NOTE: numpy's float32 -> float16 cast converts one entry at a time in software (3.5 ms for
    # 2**20 entries here, 7.5 ms when many are float16 subnormals); these 15 vector passes take
    # 2 ms, whatever the values.
    u32 = np.uint32
    bits = g.view(u32)
    np.abs(g, out=base)
    np.multiply(base, np.float32(4.0), out=base)  # the library's x 2**112 x 2**-110, no overflow
    np.add(bits, bits, out=work)  # w << 1 (wraps: the sign bit drops out)
    np.bitwise_and(work, u32(0xFF000000), out=work)  # exponent, shifted out of the sign
    np.maximum(work, u32(0x71000000), out=work)  # below float16's normal range: fixed bias
    np.right_shift(work, 1, out=work)
    np.add(work, u32(0x07800000), out=work)
    np.add(work.view(np.float32), base, out=base)  # the float addition rounds to 10 bits
    rounded = base.view(u32)
    np.right_shift(rounded, 13, out=work)
    np.bitwise_and(work, u32(0x7C00), out=work)  # exponent bits
    np.bitwise_and(rounded, u32(0x0FFF), out=rounded)  # mantissa bits (and exponent carry)
    np.add(work, rounded, out=work)
    np.right_shift(bits, 16, out=rounded)
    np.bitwise_and(rounded, u32(0x8000), out=rounded)  # sign
    np.bitwise_or(work, rounded, out=out, casting="unsafe")
