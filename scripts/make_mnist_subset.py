"""Make data/bundled/mnist-subset.npz, the MNIST subset shipped with twinsgd, from full MNIST.

    python scripts/make_mnist_subset.py [--source DIR] [--out FILE]

DIR holds the four MNIST IDX files (gzip or raw; default ``../shared/datasets/mnist`` beside the
repository); each is checked against the published MNIST checksums first. The subset is
class-balanced, 1,000 training and 200 test images per digit, drawn with seed 0 (see
``data/subset.py``), so running this again gives the same arrays (with numpy 2.x, the same file
bytes too). It prints the arrays' SHA-256, which must equal ``data.subset.BUNDLED_SHA256``; if you
change the selection, update that constant.
"""

import argparse
import sys
from pathlib import Path

import numpy as np

from twinsgd.data.errors import DataError
from twinsgd.data.idx import parse_idx
from twinsgd.data.locations import find_files
from twinsgd.data.sources import read_verified
from twinsgd.data.subset import BUNDLED_PATH, BUNDLED_SHA256, arrays_sha256, make_subset

REPO = Path(__file__).resolve().parents[1]


def read_mnist(folder):
    """The four MNIST arrays in ``folder``, verified: train images, labels, test images, labels."""
    found = find_files("mnist", folder)
    if found is None:
        raise DataError(f"{folder}: no complete MNIST here (need the four IDX files)")
    return [parse_idx(read_verified(path, spec), path) for path, spec in found]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--source", type=Path, default=REPO.parent / "shared" / "datasets" / "mnist"
    )
    parser.add_argument("--out", type=Path, default=BUNDLED_PATH)
    args = parser.parse_args(argv)
    try:
        arrays = make_subset(*read_mnist(args.source))
    except DataError as err:
        parser.exit(2, f"make_mnist_subset: {err}\n")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **arrays)
    digest = arrays_sha256(arrays)
    print(
        f"{args.out}: {args.out.stat().st_size} bytes, "
        f"{len(arrays['train_labels'])} train + {len(arrays['test_labels'])} test images"
    )
    print(
        f"arrays SHA-256 {digest}"
        + (
            ""
            if digest == BUNDLED_SHA256
            else "  (differs from twinsgd.data.subset.BUNDLED_SHA256)"
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
