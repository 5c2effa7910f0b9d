"""The MNIST subset shipped inside the package, so twinsgd trains offline with nothing to download.

``data/bundled/mnist-subset.npz`` holds 10,000 training and 2,000 test images of MNIST (CC BY-SA
3.0, Y. LeCun, C. Cortes, C. Burges), class-balanced: 1,000 training images of each digit and 200
test images of each digit, drawn without replacement by :func:`select_balanced` with seed 0 and
kept in their original order. ``scripts/make_mnist_subset.py`` makes it from the full MNIST files;
running it again gives the same arrays. The arrays (not the zip file, whose member timestamps
change from run to run) have the SHA-256 :data:`BUNDLED_SHA256`, checked on every load.
"""

import hashlib
import zipfile
import zlib
from pathlib import Path

import numpy as np

from .dataset import Dataset
from .errors import DataError

BUNDLED_PATH = Path(__file__).resolve().parent / "bundled" / "mnist-subset.npz"
BUNDLED_SHA256 = "bf9b88d321aa3fd85de7890764754e5a3f0d67310ffc4a8b657218b90ac69e4b"
TRAIN_PER_CLASS = 1000
TEST_PER_CLASS = 200
SUBSET_SEED = 0
KEYS = ("train_images", "train_labels", "test_images", "test_labels", "train_index", "test_index")


def select_balanced(labels, per_class, seed):
    """Indices of ``per_class`` examples of every class, drawn without replacement, sorted.

    Parameters
    ----------
    labels : (n,) integer array
        Classes ``0 .. K - 1``; every class must have at least ``per_class`` examples.
    per_class : int
    seed : int
        Seeds ``np.random.default_rng``; the classes are drawn in order 0, 1, ..., K - 1.

    Returns
    -------
    (K * per_class,) int64, increasing.

    Examples
    --------
    >>> select_balanced(np.array([0, 1, 0, 1, 0, 1]), per_class=2, seed=0)
    array([1, 2, 4, 5])
    """
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    chosen = []
    for k in range(int(labels.max()) + 1):
        members = np.flatnonzero(labels == k)
        if len(members) < per_class:
            raise ValueError(
                f"select_balanced: class {k} has {len(members)} examples, need {per_class}"
            )
        chosen.append(rng.choice(members, size=per_class, replace=False))
    return np.sort(np.concatenate(chosen)).astype(np.int64)


def make_subset(train_images, train_labels, test_images, test_labels):
    """The subset's arrays from full MNIST: a dict with the keys :data:`KEYS`.

    Images ``(n, 28, 28) uint8``, labels ``(n,) uint8``, and ``*_index`` ``(n,) int64``: each
    example's position in the full MNIST file.
    """
    train_index = select_balanced(train_labels, TRAIN_PER_CLASS, SUBSET_SEED)
    test_index = select_balanced(test_labels, TEST_PER_CLASS, SUBSET_SEED)
    return {
        "train_images": np.ascontiguousarray(train_images[train_index], dtype=np.uint8),
        "train_labels": np.ascontiguousarray(train_labels[train_index], dtype=np.uint8),
        "test_images": np.ascontiguousarray(test_images[test_index], dtype=np.uint8),
        "test_labels": np.ascontiguousarray(test_labels[test_index], dtype=np.uint8),
        "train_index": train_index,
        "test_index": test_index,
    }


def arrays_sha256(arrays):
    """SHA-256 (hex) over the arrays of a dict: for each key in sorted order, the key, dtype, shape
    and C-ordered bytes. Independent of how the arrays were stored."""
    digest = hashlib.sha256()
    for key in sorted(arrays):
        array = np.ascontiguousarray(arrays[key])
        digest.update(f"{key}|{array.dtype.str}|{array.shape}|".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def load_subset(path=None, *, note=None, expected_sha256=None):
    """Load the bundled MNIST subset as a Dataset named ``"mnist-subset"``.

    Parameters
    ----------
    path : str or Path, optional
        Default :data:`BUNDLED_PATH`.
    note : str, optional
        Passed on to the Dataset (why the subset is used).
    expected_sha256 : str, optional
        Default :data:`BUNDLED_SHA256`.

    Raises
    ------
    DataError
        The file is missing, not a valid npz, lacks an array, or its arrays' SHA-256 differs.
    """
    path = BUNDLED_PATH if path is None else Path(path)
    arrays = _read_npz(path)
    digest = arrays_sha256(arrays)
    expected = BUNDLED_SHA256 if expected_sha256 is None else expected_sha256
    if digest != expected:
        raise DataError(f"{path}: checksum mismatch: arrays SHA-256 {digest}, expected {expected}")
    files = ["<bundled>"] if path == BUNDLED_PATH else [str(path)]
    return Dataset(
        "mnist-subset",
        arrays["train_images"][..., None],
        arrays["train_labels"],
        arrays["test_images"][..., None],
        arrays["test_labels"],
        n_classes=10,
        files=files,
        note=note,
    )


def _read_npz(path):
    """Every array of :data:`KEYS` from the npz at ``path`` (no pickles)."""
    try:
        # NOTE: the file is opened here, not by np.load, which leaks its handle on a corrupt zip
        with open(path, "rb") as f, np.load(f, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in KEYS if key in npz.files}
    except FileNotFoundError as err:
        raise DataError(f"{path}: missing file") from err
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        raise DataError(f"{path}: corrupt npz ({err})") from err
    missing = [key for key in KEYS if key not in arrays]
    if missing:
        raise DataError(f"{path}: not the MNIST subset: no array {missing[0]!r}")
    return arrays
