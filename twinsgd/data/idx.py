"""Reader for the IDX format of MNIST and Fashion-MNIST, gzip-compressed or raw.

An IDX file (LeCun et al., http://yann.lecun.com/exdb/mnist/) is a header and a C-ordered payload::

    bytes 0-1   0x00 0x00                 (the first half of the magic number)
    byte  2     dtype code                0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32,
                                          0x0D float32, 0x0E float64 (multi-byte types big-endian)
    byte  3     ndim
    next        ndim big-endian uint32    the dimensions
    rest        prod(dims) * itemsize     the values, nothing more and nothing less

MNIST's image files are ``0x00000803`` (uint8, 3 dimensions: n, 28, 28) and its label files
``0x00000801`` (uint8, n). Every rule above is checked; a break raises :class:`DataError` naming the
path. Gzip is recognised by its magic bytes ``1f 8b``, not by the file name.
"""

import gzip
import math
import struct
import zlib
from pathlib import Path

import numpy as np

from .errors import DataError

GZIP_MAGIC = b"\x1f\x8b"

_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path):
    """Read an IDX file (gzip or raw) into a numpy array.

    Parameters
    ----------
    path : str or Path
        The file, compressed or not; gzip is detected by its magic bytes.

    Returns
    -------
    array : ndarray, shape and dtype from the header
        MNIST images come back as ``(n, 28, 28) uint8``, labels as ``(n,) uint8``. Values are in
        native byte order. Single-byte arrays are read-only views of the decompressed bytes.

    Raises
    ------
    DataError
        Missing or unreadable file, truncated or corrupt gzip, bad magic number, unknown dtype code,
        or a payload whose size differs from what the header's dimensions require.

    Examples
    --------
    >>> images = read_idx("mnist/train-images-idx3-ubyte.gz")       # doctest: +SKIP
    >>> images.shape, images.dtype                                   # doctest: +SKIP
    ((60000, 28, 28), dtype('uint8'))
    """
    path = Path(path)
    return parse_idx(gunzip_if_needed(read_bytes(path), path), path)


def read_bytes(path):
    """Return the bytes of ``path``; a missing or unreadable file is a :class:`DataError`."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError as err:
        raise DataError(f"{path}: missing file") from err
    except OSError as err:
        raise DataError(f"{path}: cannot read: {err.strerror or err}") from err


def gunzip_if_needed(data, path):
    """Decompress ``data`` when it starts with the gzip magic bytes; return it unchanged otherwise.

    ``path`` is only used in the error message. A stream that stops early is reported as a truncated
    gzip, any other decoding failure (bad CRC, bad block) as a corrupt one.
    """
    if not data.startswith(GZIP_MAGIC):
        return data
    try:
        return gzip.decompress(data)
    except EOFError as err:
        raise DataError(f"{path}: truncated gzip ({err})") from err
    except (gzip.BadGzipFile, zlib.error) as err:
        raise DataError(f"{path}: corrupt gzip ({err})") from err


def parse_idx(raw, path="<bytes>"):
    """Parse uncompressed IDX bytes, see :func:`read_idx` (``path`` only names them in errors)."""
    if len(raw) < 4:
        raise DataError(f"{path}: bad IDX header: {len(raw)} bytes, an IDX file has at least 4")
    if raw[0] != 0 or raw[1] != 0:
        raise DataError(f"{path}: bad IDX magic number 0x{raw[:4].hex()} (must start with 0x0000)")
    code, ndim = raw[2], raw[3]
    if code not in _DTYPES:
        known = ", ".join(f"0x{c:02x}" for c in _DTYPES)
        raise DataError(f"{path}: bad IDX dtype code 0x{code:02x} (known: {known})")
    if ndim == 0:
        raise DataError(f"{path}: bad IDX header: 0 dimensions")
    header_nbytes = 4 + 4 * ndim
    if len(raw) < header_nbytes:
        raise DataError(
            f"{path}: bad IDX header: {ndim} dimensions need {header_nbytes} header "
            f"bytes, the file has {len(raw)}"
        )
    return _payload(raw, path, np.dtype(_DTYPES[code]), header_nbytes, ndim)


def _payload(raw, path, dtype, header_nbytes, ndim):
    """Check the payload size against the header's dimensions and view it as an array."""
    dims = struct.unpack(f">{ndim}I", raw[4:header_nbytes])
    count = math.prod(dims)
    want_nbytes = count * dtype.itemsize
    have_nbytes = len(raw) - header_nbytes
    if have_nbytes != want_nbytes:
        shape = " x ".join(map(str, dims))
        raise DataError(
            f"{path}: wrong size: the IDX header says {shape} {dtype.name} = "
            f"{want_nbytes} payload bytes, the file has {have_nbytes}"
        )
    array = np.frombuffer(raw, dtype=dtype, count=count, offset=header_nbytes).reshape(dims)
    if dtype.itemsize > 1:
        array = array.astype(dtype.newbyteorder("="))
    return array


def write_idx(path, array):
    """Write ``array`` as an IDX file, gzip-compressed when ``path`` ends in ``.gz``.

    The inverse of :func:`read_idx`, used by tests and tools to make small IDX files.
    """
    array = np.asarray(array)
    codes = {np.dtype(v).newbyteorder("="): k for k, v in _DTYPES.items()}
    code = codes.get(array.dtype.newbyteorder("="))
    if code is None:
        raise ValueError(f"write_idx: dtype {array.dtype} has no IDX code")
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    raw = header + array.astype(array.dtype.newbyteorder(">")).tobytes()
    path = Path(path)
    path.write_bytes(gzip.compress(raw, mtime=0) if path.suffix == ".gz" else raw)
    return path
