"""A CIFAR-10-format substitute made from Fashion-MNIST, for machines that have no CIFAR-10.

The studies of ``notebooks/`` trained on CIFAR-10, which cannot be downloaded everywhere. What
a CIFAR-10 model needs from its data is the format: 32 x 32 x 3 uint8 images, 10 classes,
50,000 training and 10,000 test images. The substitute has that format and nothing else of
CIFAR-10: each Fashion-MNIST image is padded with 2 black pixels on every side (28 -> 32; its
background is black already) and repeated over the 3 channels; the training split is
Fashion-MNIST's first 50,000 images in file order, the test split all 10,000. No randomness, so
the files are the same bytes on every machine.

It is written as CIFAR-10 binary files (``cifar-10-batches-bin/*.bin``) with a ``SUBSTITUTE``
file beside them, so the project's own CIFAR reader loads it through ``--dataset cifar10
--data-dir DIR``; the loader sees the ``SUBSTITUTE`` file and names the data set
``cifar10-substitute`` (config.json's ``dataset``) with a note saying what it is, so no run
folder claims to have trained on CIFAR-10. Its accuracies are Fashion-MNIST's, not CIFAR-10's.

    python -m twinsgd.data.substitute --out DIR [--data-dir FASHION_MNIST_ROOT]
"""

import os
import sys
from pathlib import Path

import numpy as np

from .cifar import LAYOUTS, encode_records
from .errors import DataError
from .locations import SUBSTITUTE_MARKER as MARKER
from .locations import SUBSTITUTE_NAME as NAME
from .locations import substitute_note

SOURCE = "fashion-mnist"
NOTE = (
    f"{NAME}: Fashion-MNIST padded to 32x32 and repeated over 3 channels, in CIFAR-10's binary "
    f"format; not CIFAR-10 (its accuracies are not CIFAR-10's)"
)
PAD = 2  # pixels of black added on each side: 28 + 2 * 2 = 32
RECORDS_PER_BATCH = 10_000  # CIFAR-10's data_batch_*.bin hold 10,000 records each


def to_cifar_format(images):
    """Pad (n, 28, 28) or (n, 28, 28, 1) uint8 images to (n, 32, 32, 3) uint8.

    Examples
    --------
    >>> x = np.full((1, 28, 28, 1), 7, np.uint8)
    >>> y = to_cifar_format(x)
    >>> y.shape, y.dtype, int(y[0, 0, 0, 0]), int(y[0, 2, 2, 2])
    ((1, 32, 32, 3), dtype('uint8'), 0, 7)
    """
    images = np.asarray(images)
    if images.ndim == 4 and images.shape[-1] == 1:
        images = images[..., 0]
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (28, 28):
        raise ValueError(
            f"to_cifar_format: images must be (n, 28, 28) uint8, got {images.shape} {images.dtype}"
        )
    padded = np.pad(images, ((0, 0), (PAD, PAD), (PAD, PAD)))
    return np.repeat(padded[..., None], 3, axis=-1)


def is_substitute(path):
    """True if ``path`` is an extracted CIFAR-10 folder that `write_substitute` wrote."""
    return substitute_note(path) is not None


def write_substitute(out, data_dir=None):
    """Write the substitute under ``out`` (``out/cifar10/cifar-10-batches-bin/``) from the
    Fashion-MNIST found in ``data_dir`` (else ``TWINSGD_DATA``, the cache, system folders);
    kept as it is when a complete copy is there already. Returns ``out``, the ``--data-dir`` that
    reads it.

    Raises
    ------
    DataError
        Fashion-MNIST is not found (no download is tried) or is corrupt.
    """
    folder = Path(out) / "cifar10" / LAYOUTS["cifar10"].folder
    if _complete(folder):
        return Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    for member, (images, labels) in _batches(*_fashion_mnist(data_dir)):
        _write_atomically(folder / member, encode_records(images, labels, "cifar10"))
    _write_atomically(folder / MARKER, (NOTE + "\n").encode())  # last: marks a complete copy
    return Path(out)


def _complete(folder):
    layout = LAYOUTS["cifar10"]
    return all((folder / m).is_file() for m in (*layout.train, *layout.test, MARKER))


def _fashion_mnist(data_dir):
    """Fashion-MNIST's (train images, train labels, test images, test labels), uint8 as stored."""
    from .loader import load_dataset

    ds = load_dataset(SOURCE, data_dir, allow_download=False)
    return (*ds.stored("train"), *ds.stored("test"))


def _batches(train_images, train_labels, test_images, test_labels):
    """(member name, (images, labels)) of each CIFAR-10 file: 5 training batches of 10,000."""
    layout = LAYOUTS["cifar10"]
    for i, member in enumerate(layout.train):
        rows = slice(i * RECORDS_PER_BATCH, (i + 1) * RECORDS_PER_BATCH)
        yield member, (to_cifar_format(train_images[rows]), train_labels[rows])
    yield layout.test[0], (to_cifar_format(test_images), test_labels)


def _write_atomically(path, data):
    """Write bytes to a temporary file beside ``path``, then rename it into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def main(argv=None):
    """The command line: 0 when written, or exit status 2 and one line on stderr."""
    from twinsgd.cli import OneLineParser

    parser = OneLineParser(
        prog="python -m twinsgd.data.substitute",
        description="Write the CIFAR-10-format substitute (Fashion-MNIST padded to 32x32x3); "
        "train on it with --dataset cifar10 --data-dir OUT.",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="where to write it")
    parser.add_argument("--data-dir", metavar="DIR", help="where Fashion-MNIST is")
    args = parser.parse_args(argv)
    try:
        out = write_substitute(args.out, args.data_dir)
    except (DataError, OSError) as err:
        parser.error(str(err))
    print(f"{out}: {NAME}; train with --dataset cifar10 --data-dir {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
