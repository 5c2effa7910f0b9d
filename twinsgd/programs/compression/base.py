"""The message every codec sends, its exact size on the wire, and the codec base class.

A `Message` holds a compressed gradient as the few numpy arrays a binary encoding would put on the
wire, already in their wire dtypes (float32 or float16 values, the narrowest unsigned indices,
packed bits), and ``nbytes`` is the size of that binary encoding (`compression.wire` writes and
reads it; the real backend sends those bytes), counted the same way by the real and the simulated
backend.

Wire format of every codec but ``none``: a fixed ``HEADER_NBYTES = 12``-byte header, then the
payload::

    uint8 codec id | uint24 parameter (qsgd: LEVELS, else 0) | uint32 n | uint32 count (k or n)
    [float32 scale]  [float32/float16 values]  [uint8/16/32 indices]  [packed bits]

``none`` sends the plain dense float32 buffer that the uncompressed algorithms send: ``4 n`` bytes,
no header.
"""

from dataclasses import dataclass

import numpy as np

HEADER_NBYTES = 12
"""Bytes of the fixed header: codec id (1) + parameter (3) + n (4) + count (4)."""

MAX_N = 2**32 - 1
"""Largest gradient length the header's uint32 ``n`` holds."""


def index_dtype(n):
    """The narrowest unsigned dtype holding every index ``0 .. n-1`` of a length-``n`` gradient.

    Examples
    --------
    >>> [index_dtype(n).itemsize for n in (1, 256, 257, 65536, 65537)]
    [1, 1, 2, 2, 4]
    """
    if n <= 2**8:
        return np.dtype(np.uint8)
    if n <= 2**16:
        return np.dtype(np.uint16)
    return np.dtype(np.uint32)


@dataclass(frozen=True, eq=False, slots=True)
class Message:
    """One compressed gradient, as it travels.

    Parameters
    ----------
    codec : str
        Family name of the codec that made it (``"topk"``, ``"sign"``, ...; one of `CODECS`).
    n : int
        Length of the gradient it encodes.
    values : (k,) float32, (n,) float32 or (n,) float16, optional
        Sent values: sparse codecs' kept entries, ``none``'s dense buffer, ``fp16``'s halves.
    indices : (k,) uint8, uint16 or uint32, optional
        Positions of ``values`` (sparse codecs), sorted and distinct, in `index_dtype` (n).
    bits : (m,) uint8, optional
        Packed bits (``sign``: one per entry; ``qsgd``: bit planes of the codes).
    scale : float, optional
        A float32 number sent with the payload (``sign``: mean |g|; ``qsgd``: the norm).
    levels : int
        ``qsgd``'s s (in the header's parameter field), 0 for the others.

    Notes
    -----
    ``nbytes`` is derived from the arrays, which are kept in their wire dtypes::

        none:   values.nbytes                                             (= 4 n)
        others: HEADER_NBYTES + 4 [scale] + values.nbytes + indices.nbytes + bits.nbytes

    The arrays never share memory with a codec's scratch buffers, so a message may be kept and
    sent later. Messages compare by identity (``eq=False``): compare their arrays instead.
    """

    codec: str
    n: int
    values: np.ndarray | None = None
    indices: np.ndarray | None = None
    bits: np.ndarray | None = None
    scale: float | None = None
    levels: int = 0

    @property
    def nbytes(self):
        """Exact bytes on the wire (int): header + scale + values + indices + packed bits."""
        if self.codec == "none":
            return int(self.values.nbytes)
        arrays = (self.values, self.indices, self.bits)
        payload = sum(int(a.nbytes) for a in arrays if a is not None)
        return HEADER_NBYTES + (4 if self.scale is not None else 0) + payload

    @property
    def count(self):
        """Entries sent with their own value or code: k for sparse codecs, n for dense ones."""
        return self.n if self.values is None or self.indices is None else len(self.values)


class Codec:
    """Base class: checks the arguments, then hands off to the subclass's ``_encode``/``_decode``.

    A subclass sets ``name`` (the family), ``spec`` (canonical spec string, ``make_codec(spec)``
    rebuilds it), ``needs_rng`` and ``unbiased`` (E[decode(encode(g))] = g), and implements
    ``_encode(g, rng)``, ``_decode(msg, out)`` and ``nbytes(n)``; ``_add_into`` defaults to
    decoding into a reused scratch buffer and adding it.

    A codec keeps scratch buffers for the last n it saw (reused across calls, never part of a
    message): one instance may serve sequential callers, not concurrent threads.
    """

    name = ""
    spec = ""
    needs_rng = False
    unbiased = False

    def __init__(self):
        self._buffers = {}

    def __repr__(self):
        variant = ".contractive()" if getattr(self, "is_contractive", False) else ""
        return f"make_codec({self.spec!r}){variant}"

    def encode(self, g, rng=None):
        """Compress a gradient.

        Parameters
        ----------
        g : (n,) float32
            The gradient, finite (not checked: it would cost a pass), ``1 <= n < 2**32``.
        rng : numpy.random.Generator, optional
            Needed by the randomised codecs (``randomk``, ``qsgd``); ignored by the others.

        Returns
        -------
        Message
            With ``nbytes`` the exact bytes on the wire.

        Raises
        ------
        TypeError
            If ``g`` is not a float32 ndarray, or ``rng`` is not a Generator where one is needed.
        ValueError
            If ``g`` is not 1-D with ``1 <= n < 2**32``, or ``rng`` is missing where needed.
        """
        _check_gradient(g)
        if self.needs_rng:
            if rng is None:
                raise ValueError(f"{self.spec} needs rng, a numpy.random.Generator, got None")
            if not isinstance(rng, np.random.Generator):
                raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        return self._encode(g, rng)

    def decode(self, msg, out=None):
        """The dense gradient a message stands for, shape (n,) float32.

        With ``out`` (an (n,) float32 array) it is written there, entries not sent set to zero,
        and ``out`` is returned; without, a new array is returned.
        """
        self._check_message(msg)
        if out is None:
            out = np.empty(msg.n, np.float32)
        else:
            _check_buffer("out", out, msg.n)
        self._decode(msg, out)
        return out

    def add_into(self, msg, acc):
        """``acc += decode(msg)`` in place, acc (n,) float32; returns None.

        Sparse codecs add the kept values at their (distinct) indices; ``none`` and ``fp16`` add
        the values directly; ``sign`` and ``qsgd`` decode into a reused scratch buffer first.
        """
        self._check_message(msg)
        _check_buffer("acc", acc, msg.n)
        self._add_into(msg, acc)

    def nbytes(self, n):
        """Bytes on the wire of a message for a length-``n`` gradient (None: depends on g)."""
        raise NotImplementedError

    def contractive(self):
        """The codec `ErrorFeedback` sends with: this one, unless it is unbiased and expanding.

        Error feedback needs ``E||x - C(x)||^2 <= (1 - delta) ||x||^2`` for some delta > 0;
        ``randomk`` and ``qsgd`` return their rescaled, contractive variant.
        """
        return self

    def _add_into(self, msg, acc):
        dense = self._buffer("decoded", msg.n, np.float32)
        self._decode(msg, dense)
        np.add(acc, dense, out=acc)

    def _buffer(self, key, n, dtype, rows=None):
        """A scratch array of shape (n,) (or (rows, n)), kept for the next call of the same n."""
        shape = (n,) if rows is None else (rows, n)
        buf = self._buffers.get(key)
        if buf is None or buf.shape != shape or buf.dtype != dtype:
            buf = self._buffers[key] = np.empty(shape, dtype)
        return buf

    def _check_message(self, msg):
        if not isinstance(msg, Message):
            raise TypeError(f"msg must be a Message, got {type(msg).__name__}")
        if msg.codec != self.name:
            raise ValueError(f"{self.spec} cannot decode a {msg.codec!r} message")


def _check_gradient(g):
    if not isinstance(g, np.ndarray) or g.dtype != np.float32:
        what = g.dtype if isinstance(g, np.ndarray) else type(g).__name__
        raise TypeError(f"g must be a float32 ndarray, got {what}")
    if g.ndim != 1 or not 1 <= g.shape[0] <= MAX_N:
        raise ValueError(f"g must have shape (n,) with 1 <= n < 2**32, got {g.shape}")


def _check_buffer(label, buf, n):
    if not isinstance(buf, np.ndarray) or buf.dtype != np.float32 or buf.shape != (n,):
        what = (buf.dtype, buf.shape) if isinstance(buf, np.ndarray) else type(buf).__name__
        raise ValueError(f"{label} must be a ({n},) float32 array, got {what}")
