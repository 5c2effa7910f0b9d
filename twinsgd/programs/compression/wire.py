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

import struct
import sys

import numpy as np

from twinsgd.programs.compression.base import HEADER_NBYTES, Message, index_dtype
from twinsgd.programs.compression.qsgd import bits_per_entry
from twinsgd.programs.compression.spec import CODECS

_SPARSE = ("threshold", "topk", "randomk")
_HEADER = struct.Struct("<III")  # codec id | levels << 8, n, count
_SCALE = struct.Struct("<f")
_LITTLE = sys.byteorder == "little"
_F4, _F2, _U1 = np.dtype("<f4"), np.dtype("<f2"), np.dtype(np.uint8)


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
    # NOTE: one bytes join, not slices of a uint8 array: a message is a few KB and sent every
    # step, so the Python calls are its cost (4.3 us with structured views, about 1.5 us so).
    if msg.codec == "none":
        raise ValueError("a 'none' message has no wire form: it travels as its float32 array")
    parts = [_HEADER.pack(CODECS.index(msg.codec) | (msg.levels << 8), msg.n, msg.count)]
    if msg.scale is not None:
        parts.append(_SCALE.pack(msg.scale))
    for array in (msg.values, msg.indices, msg.bits):
        if array is not None:
            parts.append(array.data if _LITTLE else array.astype(array.dtype.newbyteorder("<")))
    return np.frombuffer(b"".join(parts), _U1)


def from_wire(buf):
    """The `Message` whose wire bytes are ``buf`` (a uint8 array); its arrays are views of
    ``buf``, read-only, so ``buf`` must not be reused while the message is kept.

    Raises ValueError if the bytes are not a whole message of a known codec.
    """
    size = len(buf)
    if size < HEADER_NBYTES:
        raise ValueError(f"a compressed message has a {HEADER_NBYTES}-byte header, got {size}")
    id_levels, n, count = _HEADER.unpack_from(buf)
    codec_id, levels = id_levels & 0xFF, id_levels >> 8
    if not 0 < codec_id < len(CODECS):
        raise ValueError(f"unknown codec id {codec_id} in a compressed message's header")
    codec, at = CODECS[codec_id], HEADER_NBYTES
    if codec in _SPARSE:
        width = index_dtype(n)
        end = at + count * (4 + width.itemsize)
        layout = ((_F4, count, "values"), (width, count, "indices"))
        scale = None
    elif codec == "fp16":
        end, layout, scale = at + 2 * n, ((_F2, n, "values"),), None
    else:  # sign: a scale, then one bit an entry; qsgd: a scale, then b bits an entry
        b = 1 if codec == "sign" else bits_per_entry(levels)
        length = (b * n + 7) // 8
        end, layout = at + 4 + length, ((_U1, length, "bits"),)
        scale = _SCALE.unpack_from(buf, at)[0] if size >= at + 4 else None
        at += 4
    if end != size:
        raise ValueError(f"a {codec} message of n={n} is {end} bytes, got {size}")
    fields = {}
    for dtype, length, name in layout:
        array = np.frombuffer(buf, dtype, length, at)
        array.flags.writeable = False
        fields[name], at = array, at + length * dtype.itemsize
    return Message(codec, n, scale=scale, levels=levels, **fields)
