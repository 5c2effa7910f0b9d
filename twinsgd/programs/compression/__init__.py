"""Gradient compression: codecs for a flat float32 gradient, and error feedback.

>>> from twinsgd.programs.compression import make_codec, ErrorFeedback
>>> codec = make_codec("topk:0.01")                       # the --compress spec
>>> msg = codec.encode(g, rng=rng)                        # doctest: +SKIP
>>> msg.nbytes                                            # doctest: +SKIP
>>> codec.decode(msg, out=dense); codec.add_into(msg, acc)  # doctest: +SKIP

Bytes on the wire of a message for a length-n gradient (exact, ``Message.nbytes``; a 12-byte
header ``HEADER_NBYTES`` = codec id 1 + parameter 3 + n 4 + count 4 in all but ``none``;
w = index bytes, 1 for n <= 256, 2 for n <= 65536, else 4):

=================  ==========================================  ============================
spec               nbytes                                      decodes to
=================  ==========================================  ============================
``none``           4 n (the dense buffer, no header)           g
``threshold:T``    12 + k (4 + w), k = #{i : |g_i| > T}        g on the kept entries, else 0
``topk:F``         12 + k (4 + w), k = max(1, round(F n))      g on the k largest |g|
``randomk:F``      12 + k (4 + w), k = max(1, round(F n))      (n/k) g on k random entries
``qsgd:LEVELS``    12 + 4 + ceil(b n / 8), b = 1 + bitlen(s)   ||g|| sign(g) l / s, E = g
``sign``           12 + 4 + ceil(n / 8)                        mean|g| sign(g)
``fp16``           12 + 2 n                                    g rounded to float16
=================  ==========================================  ============================

Unbiased (E[decode] = g): ``none``, ``randomk``, ``qsgd``. `ErrorFeedback` sends the biased,
contractive variant of those two (see its docstring). The messages are small frozen dataclasses
of numpy arrays in their wire dtypes; `wire.to_wire` writes one as exactly ``nbytes`` bytes and
`wire.from_wire` reads it back, which is how the real backend sends them.
"""

from twinsgd.programs.compression.base import HEADER_NBYTES, Codec, Message, index_dtype
from twinsgd.programs.compression.feedback import ErrorFeedback
from twinsgd.programs.compression.spec import CODECS, make_codec

__all__ = [
    "CODECS",
    "HEADER_NBYTES",
    "Codec",
    "ErrorFeedback",
    "Message",
    "index_dtype",
    "make_codec",
]
