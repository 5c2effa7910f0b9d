"""A `Message` as the bytes it is counted as: the binary wire format, written and read.

The real backend sends a compressed gradient as one raw byte buffer of exactly ``msg.nbytes``
(MPI's ``Send``/``Allgatherv`` of uint8), not as a pickled object. Pickling is Python work the
wire does not see: a top-k message of 6.7 KB went through mpi4py's pickled ``allgather`` of 2
ranks in 42 us, and through ``Allgather`` of its bytes in 3.5 us. So the bytes a run counts, the
bytes MPI moves and the bytes the simulator charges are the same bytes.

Layout (little-endian), as `twinsgd.programs.compression` documents it::

    uint8 codec id (index in CODECS) | uint24 parameter (qsgd: levels) | uint32 n | uint32 count
    [float32 scale] [values: float32, or float16 for fp16] [indices: index_dtype(n)] [packed bits]

``none`` has no header: its message is the dense buffer, which travels as an array, never as a
message, so it has no wire form here.
"""

import numpy as np

from twinsgd.programs.compression.base import HEADER_NBYTES, Message, index_dtype
from twinsgd.programs.compression.qsgd import bits_per_entry
from twinsgd.programs.compression.spec import CODECS

_SPARSE = ("threshold", "topk", "randomk")
_HEADER = np.dtype([("id_param", "<u4"), ("n", "<u4"), ("count", "<u4")])


def size_varies(msg):
    """Whether this message's codec may send messages of other sizes on other ranks (for the
    same n): only ``threshold``'s, which keeps the entries above T. Gathering those needs the
    sizes first (an Allgatherv); every other codec's size is a function of n."""
    return msg.codec == "threshold"


def to_wire(msg):
    """The bytes of ``msg`` on the wire, a new (msg.nbytes,) uint8 array.

    Raises ValueError for a ``none`` message (it travels as its float32 array).

    Examples
    --------
    >>> from twinsgd.programs.compression import make_codec
    >>> msg = make_codec("topk:0.5").encode(np.array([3, -1, 0, 5], np.float32))
    >>> wire = to_wire(msg)
    >>> len(wire) == msg.nbytes, from_wire(wire).values, from_wire(wire).indices
    (True, array([3., 5.], dtype=float32), array([0, 3], dtype=uint8))
    """
    if msg.codec == "none":
        raise ValueError("a 'none' message has no wire form: it travels as its float32 array")
    out = np.empty(msg.nbytes, np.uint8)
    header = out[:HEADER_NBYTES].view(_HEADER)
    header["id_param"] = CODECS.index(msg.codec) | (msg.levels << 8)
    header["n"], header["count"] = msg.n, msg.count
    at = HEADER_NBYTES
    if msg.scale is not None:
        out[at : at + 4].view("<f4")[0] = msg.scale
        at += 4
    for array in (msg.values, msg.indices, msg.bits):
        if array is not None:
            nbytes = array.nbytes
            out[at : at + nbytes] = array.view(np.uint8)
            at += nbytes
    return out


def from_wire(buf):
    """The `Message` whose wire bytes are ``buf`` (a uint8 array); its arrays are views of
    ``buf``, read-only, so ``buf`` must not be reused while the message is kept.

    Raises ValueError if the bytes are not a whole message of a known codec.
    """
    buf = np.asarray(buf, np.uint8)
    if len(buf) < HEADER_NBYTES:
        raise ValueError(f"a compressed message has a {HEADER_NBYTES}-byte header, got {len(buf)}")
    header = buf[:HEADER_NBYTES].view(_HEADER)[0]
    codec_id, levels = int(header["id_param"]) & 0xFF, int(header["id_param"]) >> 8
    n, count = int(header["n"]), int(header["count"])
    if not 0 < codec_id < len(CODECS):
        raise ValueError(f"unknown codec id {codec_id} in a compressed message's header")
    codec, at = CODECS[codec_id], HEADER_NBYTES
    fields = {}
    if codec in ("sign", "qsgd"):
        fields["scale"], at = float(buf[at : at + 4].view("<f4")[0]), at + 4
    if codec in _SPARSE:
        layout = [("values", np.dtype("<f4"), count), ("indices", index_dtype(n), count)]
    elif codec == "fp16":
        layout = [("values", np.dtype("<f2"), n)]
    else:  # sign: one bit an entry; qsgd: b bits an entry
        b = 1 if codec == "sign" else bits_per_entry(levels)
        layout = [("bits", np.dtype(np.uint8), (b * n + 7) // 8)]
    for name, dtype, length in layout:
        end = at + length * dtype.itemsize
        if end > len(buf):
            raise ValueError(f"a {codec} message of n={n} needs {end} bytes, got {len(buf)}")
        array = buf[at:end].view(dtype)
        array.flags.writeable = False
        fields[name], at = array, end
    if at != len(buf):
        raise ValueError(f"a {codec} message of n={n} is {at} bytes, got {len(buf)}")
    return Message(codec, n, levels=levels, **fields)
