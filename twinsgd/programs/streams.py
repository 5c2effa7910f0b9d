"""Compressed streams: what one node sends, message after message, under ``--compress``.

Each stream (a node's gradients to the allreduce, its gradient slice to one server, its model to
its neighbours) keeps its own error-feedback residual, since residuals of different vectors must
not mix, and draws randomness (randomk, qsgd) from the node's seeded generator.
"""

from twinsgd.programs.compression import ErrorFeedback, make_codec
from twinsgd.programs.ops import Allgather


class CompressedStream:
    """Encoder of one stream of (n,) float32 vectors.

    Parameters
    ----------
    spec : str
        The ``--compress`` spec (not ``none``).
    n : int
        Length of the vectors.
    error_feedback : bool
        Keep the residual of each message and add it to the next vector (Seide et al. 2014).
    rng : numpy.random.Generator
        The node's generator.
    """

    def __init__(self, spec, n, error_feedback, rng):
        self.codec, self.rng = make_codec(spec), rng
        self._encoder = ErrorFeedback(self.codec, n) if error_feedback else self.codec

    @property
    def residual(self):
        """The error-feedback residual (n,) float32, or None without error feedback."""
        return getattr(self._encoder, "residual", None)

    def encode(self, x):
        """The message for ``x`` (with the residual added, under error feedback)."""
        return self._encoder.encode(x, rng=self.rng)

    def mean_over_ranks(self, x, size):
        """Replace ``x`` in place by the mean over ranks of the decoded messages (allgather).

        Yields one Allgather; gets back every rank's message. Decoding adds them in rank order,
        so every rank (and every backend) ends with the same bits.
        """
        messages = yield Allgather(self.encode(x))
        x.fill(0.0)
        for message in messages:
            self.codec.add_into(message, x)
        x /= size
        return x
