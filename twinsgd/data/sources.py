"""Where each data set's files come from and how to recognise a good copy: mirrors and checksums.

A local or downloaded IDX file is accepted when either

- its bytes have the MD5 of the file as published (the official ``.gz``), or
- its uncompressed content has the MD5 of the official file's uncompressed content,

so a file that was decompressed or re-gzipped is still recognised (the copies in
``shared/datasets`` and Debian's ``dataset-fashion-mnist`` have other gzip bytes than the published
MD5s, and the same content); anything else is reported corrupt. Archives (CIFAR) have only the
published MD5.

Sources of the numbers (MD5 identifies the published files; it is not used for security here):

- MNIST gzip MD5s: the values torchvision checks, also in ``shared/datasets/README.md``.
  Uncompressed MD5s: the same README; checked against the shared files.
- Fashion-MNIST gzip MD5s: torchvision's ``FashionMNIST.resources`` (and other public copies of
  zalandoresearch's list). Uncompressed MD5s: computed from ``shared/datasets/fashion-mnist``, whose
  files are byte-identical to Debian's ``dataset-fashion-mnist``; they agree with published lists.
- CIFAR binary tar.gz MD5s: the table on https://www.cs.toronto.edu/~kriz/cifar.html.

The published gzip and tar.gz MD5s could not be checked against downloaded files where this was
written (no network); the copies at hand are re-gzipped and match by content.
"""

import hashlib
from dataclasses import dataclass
from pathlib import Path

from .errors import DataError
from .idx import GZIP_MAGIC, gunzip_if_needed, read_bytes


@dataclass(frozen=True)
class FileSpec:
    """One published file: its name, its MD5 and (gzip) the MD5 of its uncompressed content."""

    name: str
    md5: str
    raw_md5: str | None = None

    @property
    def raw_name(self):
        """The name of the uncompressed file (``train-images-idx3-ubyte``), or None for archives."""
        return self.name.removesuffix(".gz") if self.raw_md5 else None


@dataclass(frozen=True)
class Source:
    """A data set as published: its files, the mirrors that serve them, and what is inside.

    For the IDX data sets ``files`` is ordered train images, train labels, test images, test
    labels; for CIFAR it is the one binary tar.gz. Mirrors are base URLs; a file's URL is mirror +
    file name.
    """

    name: str
    files: tuple
    mirrors: tuple
    input_shape: tuple  # (H, W, C)
    n_classes: int
    n_train: int
    n_test: int


def _idx_files(md5s, raw_md5s):
    names = (
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    )
    return tuple(
        FileSpec(f"{n}.gz", md5, raw) for n, md5, raw in zip(names, md5s, raw_md5s, strict=True)
    )


SOURCES = {
    "mnist": Source(
        "mnist",
        _idx_files(
            (
                "f68b3c2dcbeaaa9fbdd348bbdeb94873",
                "d53e105ee54ea40749a09fcbcd1e9432",
                "9fb629c4189551a2d022fa330f9573f3",
                "ec29112dd5afa0611ce80d1b7f02629c",
            ),
            (
                "6bbc9ace898e44ae57da46a324031adb",
                "a25bea736e30d166cdddb491f175f624",
                "2646ac647ad5339dbf082846283269ea",
                "27ae3e4e09519cfbb04c329615203637",
            ),
        ),
        mirrors=(
            "https://ossci-datasets.s3.amazonaws.com/mnist/",
            "http://yann.lecun.com/exdb/mnist/",
        ),
        input_shape=(28, 28, 1),
        n_classes=10,
        n_train=60000,
        n_test=10000,
    ),
    "fashion-mnist": Source(
        "fashion-mnist",
        _idx_files(
            (
                "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
                "25c81989df183df01b3e8a0aad5dffbe",
                "bef4ecab320f06d8554ea6380940ec79",
                "bb300cfdad3c16e7a12a480ee83cd310",
            ),
            # computed from shared/datasets/fashion-mnist (see the module docstring)
            (
                "f4a8712d7a061bf5bd6d2ca38dc4d50a",
                "9018921c3c673c538a1fc5bad174d6f9",
                "8181f5470baa50b63fa0f6fddb340f0a",
                "15d484375f8d13e6eb1aabb0c3f46965",
            ),
        ),
        mirrors=(
            "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
            "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
        ),
        input_shape=(28, 28, 1),
        n_classes=10,
        n_train=60000,
        n_test=10000,
    ),
    "cifar10": Source(
        "cifar10",
        (FileSpec("cifar-10-binary.tar.gz", "c32a1d4ab5d03f1284b67883e8d87530"),),
        mirrors=("https://www.cs.toronto.edu/~kriz/",),
        input_shape=(32, 32, 3),
        n_classes=10,
        n_train=50000,
        n_test=10000,
    ),
    "cifar100": Source(
        "cifar100",
        (FileSpec("cifar-100-binary.tar.gz", "03b5dce01913d631647c71ecec9e9cb8"),),
        mirrors=("https://www.cs.toronto.edu/~kriz/",),
        input_shape=(32, 32, 3),
        n_classes=100,
        n_train=50000,
        n_test=10000,
    ),
}


def md5_hex(data):
    """MD5 of ``data`` (bytes) as 32 hex digits."""
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def file_md5(path, chunk_nbytes=1 << 20):
    """MD5 of the file at ``path``, read in chunks of ``chunk_nbytes`` bytes."""
    digest = hashlib.md5(usedforsecurity=False)
    try:
        with open(path, "rb") as f:
            while chunk := f.read(chunk_nbytes):
                digest.update(chunk)
    except FileNotFoundError as err:
        raise DataError(f"{path}: missing file") from err
    except OSError as err:
        raise DataError(f"{path}: cannot read: {err.strerror or err}") from err
    return digest.hexdigest()


def read_verified(path, spec):
    """Read an IDX file, check it against ``spec``, and return its uncompressed bytes.

    Parameters
    ----------
    path : str or Path
        The file, gzip or raw (detected by magic bytes, not by name).
    spec : FileSpec

    Returns
    -------
    raw : bytes
        The uncompressed content.

    Raises
    ------
    DataError
        Missing file, truncated or corrupt gzip, or checksum mismatch (neither the file's MD5 equals
        ``spec.md5`` nor its uncompressed content's MD5 equals ``spec.raw_md5``).
    """
    data = read_bytes(path)
    file_digest = md5_hex(data)
    raw = gunzip_if_needed(data, path)
    if file_digest == spec.md5 and data.startswith(GZIP_MAGIC):
        return raw
    raw_digest = file_digest if raw is data else md5_hex(raw)
    if spec.raw_md5 is not None and raw_digest == spec.raw_md5:
        return raw
    raise DataError(
        f"{path}: checksum mismatch: file MD5 {file_digest}, content MD5 {raw_digest}; "
        f"expected {spec.md5} (published {spec.name}) or {spec.raw_md5} (its content)"
    )


def verify_archive(path, spec):
    """Check that the file at ``path`` has the published MD5 ``spec.md5``, else DataError."""
    digest = file_md5(path)
    if digest != spec.md5:
        raise DataError(
            f"{path}: checksum mismatch: MD5 {digest}, expected {spec.md5} (published {spec.name})"
        )


def verify(path, spec):
    """Check a file against ``spec`` (IDX: gzip or content MD5; archive: file MD5); return it."""
    if spec.raw_md5 is None:
        verify_archive(path, spec)
    else:
        read_verified(path, spec)
    return Path(path)
