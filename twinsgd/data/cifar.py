"""Readers for the *binary* versions of CIFAR-10 and CIFAR-100 (Krizhevsky, 2009). Never pickle.

Layout (https://www.cs.toronto.edu/~kriz/cifar.html): each ``.bin`` file is a run of fixed-size
records with no header::

    CIFAR-10   1 label byte            + 3072 pixel bytes    (3073 bytes per record)
    CIFAR-100  1 coarse + 1 fine byte  + 3072 pixel bytes    (3074 bytes per record)

The 3072 pixel bytes are one 32 x 32 image per channel, red then green then blue (CHW, row-major).
``cifar-10-binary.tar.gz`` holds ``cifar-10-batches-bin/data_batch_{1..5}.bin`` (train, 10,000
records each) and ``test_batch.bin``; ``cifar-100-binary.tar.gz`` holds
``cifar-100-binary/train.bin`` (50,000) and ``test.bin`` (10,000). The archive is read in one
streaming pass with :mod:`tarfile`; nothing is extracted to disk. An already extracted folder works
as well.
"""

import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np

from .errors import DataError
from .idx import read_bytes

PIXELS = 32 * 32 * 3


@dataclass(frozen=True)
class CifarLayout:
    """Where the records live and how they are laid out, for one of the two data sets."""

    folder: str  # top folder inside the archive
    train: tuple  # member file names of the training split, in order
    test: tuple  # member file names of the test split
    label_bytes: int  # 1 (CIFAR-10) or 2 (CIFAR-100: coarse, fine)
    n_classes: int  # 10 or 100 (fine labels)


LAYOUTS = {
    "cifar10": CifarLayout(
        "cifar-10-batches-bin",
        tuple(f"data_batch_{i}.bin" for i in range(1, 6)),
        ("test_batch.bin",),
        label_bytes=1,
        n_classes=10,
    ),
    "cifar100": CifarLayout(
        "cifar-100-binary", ("train.bin",), ("test.bin",), label_bytes=2, n_classes=100
    ),
}


def read_cifar(source, name):
    """Read both splits of CIFAR-10 or CIFAR-100 from the binary tar.gz or an extracted folder.

    Parameters
    ----------
    source : str or Path
        ``cifar-10-binary.tar.gz`` / ``cifar-100-binary.tar.gz``, or a folder holding the ``.bin``
        files, or a folder holding the extracted ``cifar-10-batches-bin`` / ``cifar-100-binary``.
    name : {"cifar10", "cifar100"}

    Returns
    -------
    splits : dict
        ``{"train": (images, labels), "test": (images, labels)}`` with images
        ``(n, 32, 32, 3) uint8`` (NHWC, RGB) and labels ``(n,) int64`` in ``0 .. 9`` (CIFAR-10) or
        the *fine* labels in ``0 .. 99`` (CIFAR-100). Training batches are concatenated in file
        order.

    Raises
    ------
    ValueError
        ``name`` is not a CIFAR data set.
    DataError
        Missing file or archive member, truncated or corrupt archive, a file that is not a whole
        number of records, or a label out of range.

    Examples
    --------
    >>> splits = read_cifar("cifar10/cifar-10-binary.tar.gz", "cifar10")    # doctest: +SKIP
    >>> splits["train"][0].shape, splits["test"][1][:5]                     # doctest: +SKIP
    ((50000, 32, 32, 3), array([3, 8, 8, 0, 6]))
    """
    if name not in LAYOUTS:
        raise ValueError(f"read_cifar: name must be one of {', '.join(LAYOUTS)}, got {name!r}")
    layout = LAYOUTS[name]
    source = Path(source)
    blobs = _read_folder(source, layout) if source.is_dir() else _read_archive(source, layout)
    return {
        split: _records(blobs, files, layout)
        for split, files in (("train", layout.train), ("test", layout.test))
    }


def _read_folder(folder, layout):
    """Read the ``.bin`` files from an extracted folder; returns {member name: (where, bytes)}."""
    if (folder / layout.folder).is_dir():
        folder = folder / layout.folder
    return {
        member: (folder / member, read_bytes(folder / member))
        for member in layout.train + layout.test
    }


def _read_archive(path, layout):
    """Read the wanted members in one pass over the tar.gz; returns {member: (where, bytes)}."""
    wanted = set(layout.train + layout.test)
    blobs = {}
    try:
        with tarfile.open(path, mode="r|gz") as archive:
            for member in archive:
                member_name = PurePosixPath(member.name).name
                if member.isfile() and member_name in wanted and member_name not in blobs:
                    where = f"{path}:{member.name}"
                    blobs[member_name] = (where, archive.extractfile(member).read())
    except FileNotFoundError as err:
        raise DataError(f"{path}: missing file") from err
    except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
        raise DataError(f"{path}: truncated or corrupt tar.gz ({err})") from err
    missing = sorted(wanted - set(blobs))
    if missing:
        raise DataError(f"{path}: missing member {layout.folder}/{missing[0]}")
    return blobs


def _records(blobs, members, layout):
    """Decode and concatenate the records of ``members``: (images NHWC uint8, labels int64)."""
    images, labels = [], []
    for member in members:
        where, raw = blobs[member]
        batch_images, batch_labels = decode_records(raw, where, layout)
        images.append(batch_images)
        labels.append(batch_labels)
    if len(images) == 1:
        return images[0], labels[0]
    return np.concatenate(images), np.concatenate(labels)


def decode_records(raw, where, layout):
    """Decode one ``.bin`` file's bytes into (images (n, 32, 32, 3) uint8, labels (n,) int64)."""
    record_nbytes = layout.label_bytes + PIXELS
    if len(raw) == 0 or len(raw) % record_nbytes:
        raise DataError(
            f"{where}: wrong size: {len(raw)} bytes is not a whole, nonzero number of "
            f"{record_nbytes}-byte records"
        )
    records = np.frombuffer(raw, dtype=np.uint8).reshape(-1, record_nbytes)
    labels = records[:, layout.label_bytes - 1].astype(np.int64)
    _check_labels(labels, layout.n_classes, where, "label")
    if layout.label_bytes == 2:
        _check_labels(records[:, 0], 20, where, "coarse label")
    n = len(records)
    images = records[:, layout.label_bytes :].reshape(n, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), labels


def _check_labels(labels, n_classes, where, what):
    """A label outside ``0 .. n_classes - 1`` means the file is not what it claims to be."""
    bad = np.flatnonzero(labels >= n_classes)
    if bad.size:
        raise DataError(
            f"{where}: {what} {int(labels[bad[0]])} of record {int(bad[0])} is out of "
            f"range 0..{n_classes - 1}"
        )


def encode_records(images, labels, name, coarse_labels=None):
    """Encode NHWC uint8 images and labels as the bytes of a CIFAR ``.bin`` file (the inverse of
    :func:`decode_records`), used by tests and tools to make small CIFAR files."""
    layout = LAYOUTS[name]
    images = np.asarray(images, dtype=np.uint8)
    n = len(images)
    records = np.zeros((n, layout.label_bytes + PIXELS), dtype=np.uint8)
    records[:, layout.label_bytes - 1] = labels
    if layout.label_bytes == 2:
        records[:, 0] = 0 if coarse_labels is None else coarse_labels
    records[:, layout.label_bytes :] = images.transpose(0, 3, 1, 2).reshape(n, PIXELS)
    return records.tobytes()
