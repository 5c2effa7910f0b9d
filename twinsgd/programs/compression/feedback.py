"""Error feedback: what compression drops this step is added to the next step's gradient.

Seide et al. 2014 (1-bit SGD); Stich et al. 2018 (sparsified SGD with memory); Karimireddy et al.
2019 (EF-signSGD). Each step sends ``C(g + e)`` and keeps ``e <- (g + e) - decode(C(g + e))``, so
nothing is lost, only delayed: after T steps

    sum_t decode(sent_t) + e_T = sum_t g_t        (exactly in real arithmetic)

and in float32 each entry is off by at most ``sum_t eps32 / 2 (|c_t| + |c_t - d_t|)``, the two
roundings of each step (``c = g + e``, ``e = c - d``), eps32 = 2**-23.
"""

import numbers

import numpy as np

from twinsgd.programs.compression.base import MAX_N, Codec, _check_gradient


class ErrorFeedback:
    """A codec with a residual memory, for one gradient of n entries (one per node).

    Parameters
    ----------
    codec : Codec
        From `make_codec`. Unbiased codecs that expand the error (``randomk``, ``qsgd``) send
        with their contractive variant, ``codec.contractive()``: randomk without the n/k scale
        (Stich et al. 2018), qsgd with the norm divided by 1 + omega (Stich & Karimireddy 2019).
        Their messages decode with ``codec`` as usual (the scale travels in the message).
    n : int
        Gradient length, ``1 <= n < 2**32``.

    Attributes
    ----------
    codec : Codec
        The codec given, which decodes the messages.
    residual : (n,) float32
        e, what has been dropped and not yet sent (zeros at first). The live buffer: copy it to
        keep it.

    Examples
    --------
    >>> from twinsgd.programs.compression import make_codec
    >>> ef = ErrorFeedback(make_codec("topk:0.5"), 4)
    >>> msg = ef.encode(np.array([1.0, -3.0, 0.5, 2.0], np.float32))
    >>> msg.indices, ef.residual
    (array([1, 3], dtype=uint8), array([1. , 0. , 0.5, 0. ], dtype=float32))
    >>> msg = ef.encode(np.array([1.0, 1.0, 0.0, 0.0], np.float32))
    >>> msg.indices, msg.values, ef.residual
    (array([0, 1], dtype=uint8), array([2., 1.], dtype=float32), array([0. , 0. , 0.5, 0. ], \
dtype=float32))
    """

    def __init__(self, codec, n):
        if not isinstance(codec, Codec):
            raise TypeError(f"codec must be a Codec from make_codec, got {type(codec).__name__}")
        if not isinstance(n, numbers.Integral) or not 1 <= n <= MAX_N:
            raise ValueError(f"n must be an integer with 1 <= n < 2**32, got {n!r}")
        self.codec = codec
        self._sender = codec.contractive()
        self._residual = np.zeros(n, np.float32)
        self._compensated = np.empty(n, np.float32)

    @property
    def residual(self):
        """e, shape (n,) float32: dropped so far and not yet sent."""
        return self._residual

    def encode(self, g, rng=None):
        """Send ``c = g + e``; keep ``e = c - decode(message)``. Returns the `Message`.

        ``g`` is (n,) float32; ``rng`` as for ``codec.encode``.
        """
        _check_gradient(g)
        if g.shape != self._residual.shape:
            raise ValueError(f"g must have shape {self._residual.shape}, got {g.shape}")
        compensated = np.add(g, self._residual, out=self._compensated)
        msg = self._sender.encode(compensated, rng)
        self._sender.decode(msg, out=self._residual)
        np.subtract(compensated, self._residual, out=self._residual)
        return msg
