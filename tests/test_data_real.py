"""The readers on the real MNIST and Fashion-MNIST files (the folder named by TWINSGD_DATA)."""

import os
from pathlib import Path

import numpy as np
import pytest

from twinsgd.data import DataError, load_dataset, locations
from twinsgd.data.idx import read_idx
from twinsgd.data.sources import SOURCES, file_md5, read_verified
from twinsgd.data.subset import BUNDLED_PATH, BUNDLED_SHA256, arrays_sha256, make_subset

pytestmark = pytest.mark.data

MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
MNIST_TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


@pytest.fixture(scope="module")
def shared():
    value = os.environ.get("TWINSGD_DATA", "")
    if not value or not (Path(value) / "mnist").is_dir():
        pytest.skip("TWINSGD_DATA is unset or has no mnist/ folder")
    return Path(value)


def fashion(shared):
    if not (shared / "fashion-mnist").is_dir():
        pytest.skip("TWINSGD_DATA has no fashion-mnist/ folder")
    return shared / "fashion-mnist"


def test_mnist_idx_files(shared):
    images = read_idx(shared / "mnist" / "train-images-idx3-ubyte.gz")
    labels = read_idx(shared / "mnist" / "train-labels-idx1-ubyte.gz")
    test_labels = read_idx(shared / "mnist" / "t10k-labels-idx1-ubyte.gz")
    assert images.shape == (60000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (60000,) and labels.dtype == np.uint8
    assert np.bincount(labels, minlength=10).tolist() == MNIST_TRAIN_COUNTS
    assert np.bincount(test_labels, minlength=10).tolist() == MNIST_TEST_COUNTS
    assert labels[:10].tolist() == [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]
    assert test_labels[:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]


def test_mnist_through_load_dataset(shared):
    ds = load_dataset("mnist", shared)
    assert (ds.name, ds.note, ds.n_train, ds.n_test, ds.input_shape) == (
        "mnist",
        None,
        60000,
        10000,
        (28, 28, 1),
    )
    assert ds.files[0] == str(shared / "mnist" / "train-images-idx3-ubyte.gz")
    X, y = ds.train_batch(np.arange(60000))
    assert np.bincount(y).tolist() == MNIST_TRAIN_COUNTS
    # standardised with the constants everyone uses for MNIST: mean 0.1307, std 0.3081
    assert abs(ds.mean[0] - 0.1307) < 1e-4 and abs(ds.std[0] - 0.3081) < 1e-4
    assert abs(X.mean()) < 1e-4 and abs(X.std() - 1) < 1e-4
    Xt, yt = ds.test_arrays()
    assert Xt.shape == (10000, 28, 28, 1) and np.bincount(yt).tolist() == MNIST_TEST_COUNTS


def test_fashion_mnist(shared):
    folder = fashion(shared)
    labels = read_idx(folder / "train-labels-idx1-ubyte.gz")
    assert np.bincount(labels).tolist() == [6000] * 10
    assert labels[:10].tolist() == [9, 0, 0, 3, 0, 2, 7, 2, 5, 5]
    ds = load_dataset("fashion-mnist", shared)
    assert (ds.name, ds.n_train, ds.n_test) == ("fashion-mnist", 60000, 10000)
    assert np.bincount(ds.test_arrays()[1]).tolist() == [1000] * 10
    X, _ = ds.train_batch(np.arange(60000))
    assert abs(ds.mean[0] - 0.2860) < 1e-4 and abs(ds.std[0] - 0.3530) < 1e-4
    assert abs(X.mean()) < 1e-4 and abs(X.std() - 1) < 1e-4


def test_shared_regzipped_files_are_recognised_by_content(shared):
    # the shared .gz files were written afresh: not the published gzip bytes, the same content
    for spec in SOURCES["mnist"].files:
        path = shared / "mnist" / spec.name
        assert file_md5(path) != spec.md5
        assert len(read_verified(path, spec)) in (60008, 10008, 47040016, 7840016)


def test_a_changed_copy_of_a_real_file_is_refused(shared, tmp_path):
    import gzip

    spec = SOURCES["mnist"].files[3]
    raw = bytearray(gzip.decompress((shared / "mnist" / spec.name).read_bytes()))
    raw[8] = (raw[8] + 1) % 10  # the first test label, 7 -> 8
    path = tmp_path / spec.name
    path.write_bytes(gzip.compress(bytes(raw)))
    assert read_idx(path)[0] == 8  # still a valid IDX file ...
    with pytest.raises(DataError, match="checksum mismatch"):
        read_verified(path, spec)  # ... but not MNIST


def test_system_folder_layout_of_debian(shared, tmp_path, monkeypatch):
    fashion(shared)
    monkeypatch.delenv("TWINSGD_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(locations, "SYSTEM_DIRS", (tmp_path / "none", shared))
    ds = load_dataset("fashion-mnist", allow_download=False)
    assert ds.files[0] == str(shared / "fashion-mnist" / "train-images-idx3-ubyte.gz")


def test_bundled_subset_is_reproducible_from_mnist(shared):
    mnist = [read_idx(shared / "mnist" / spec.name) for spec in SOURCES["mnist"].files]
    arrays = make_subset(*mnist)
    assert arrays_sha256(arrays) == BUNDLED_SHA256
    with np.load(BUNDLED_PATH, allow_pickle=False) as npz:
        for key, value in arrays.items():
            np.testing.assert_array_equal(npz[key], value)
    np.testing.assert_array_equal(arrays["train_images"], mnist[0][arrays["train_index"]])
