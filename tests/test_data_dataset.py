"""The Dataset object, the synthetic data set, and the bundled MNIST subset."""

import re

import numpy as np
import pytest

from twinsgd.data import DataError, Dataset, load_dataset
from twinsgd.data.subset import (
    BUNDLED_PATH,
    BUNDLED_SHA256,
    KEYS,
    arrays_sha256,
    load_subset,
    select_balanced,
)
from twinsgd.data.synthetic import make_synthetic

# ---- Dataset ---------------------------------------------------------------------------------


def small(n_train=6, n_test=3):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n_train + n_test, 4, 5, 2), dtype=np.uint8)
    labels = np.arange(n_train + n_test) % 3
    return (
        Dataset(
            "toy",
            images[:n_train],
            labels[:n_train],
            images[n_train:],
            labels[n_train:],
            n_classes=3,
            files=["a", "b"],
        ),
        images,
        labels,
    )


def standardised(images, train_images):
    """Reference: (x/255 - mean) / std per channel, statistics of the training images, float64."""
    train = train_images.astype(np.float64) / 255
    axes = tuple(range(train.ndim - 1))
    return (images / 255.0 - train.mean(axis=axes)) / train.std(axis=axes)


def test_standardised_training_images_have_zero_mean_and_unit_variance():
    ds, _images, _labels = small(n_train=50)
    X, _ = ds.train_batch(np.arange(50))
    np.testing.assert_allclose(X.mean(axis=(0, 1, 2)), 0, atol=1e-6)
    np.testing.assert_allclose(X.std(axis=(0, 1, 2)), 1, rtol=1e-5)


def test_train_batch_converts_only_the_requested_rows():
    ds, images, _labels = small()
    X, y = ds.train_batch(np.array([5, 0, 5]))
    assert X.shape == (3, 4, 5, 2) and X.dtype == np.float32
    assert y.dtype == np.int64 and y.tolist() == [2, 0, 2]
    np.testing.assert_allclose(X, standardised(images[[5, 0, 5]], images[:6]), rtol=1e-5, atol=1e-6)
    X[:] = -1  # a copy: the storage is untouched
    np.testing.assert_array_equal(ds.train_batch([5])[0], ds.train_batch([5, 0])[0][:1])
    assert ds.train_batch([5])[0].min() != -1


def test_test_arrays_are_cached_and_read_only():
    ds, images, _labels = small()
    X, y = ds.test_arrays()
    assert X.shape == (3, 4, 5, 2) and X.dtype == np.float32 and y.tolist() == [0, 1, 2]
    np.testing.assert_allclose(X, standardised(images[6:], images[:6]), rtol=1e-5, atol=1e-6)
    assert ds.test_arrays()[0] is X
    with pytest.raises(ValueError, match="read-only"):
        X[0] = 0


def test_attributes():
    ds, _, _ = small()
    assert (ds.name, ds.input_shape, ds.n_train, ds.n_test, ds.n_classes) == (
        "toy",
        (4, 5, 2),
        6,
        3,
        3,
    )
    assert ds.note is None and ds.files == ["a", "b"]
    assert repr(ds) == "Dataset('toy', train=6, test=3, shape=(4, 5, 2), classes=3)"


@pytest.mark.parametrize(
    ("indices", "message"),
    [
        ([6], "indices must be in 0..5, got 6..6"),
        ([-1, 2], "indices must be in 0..5, got -1..2"),
        ([0.5], "indices must be a 1-D integer array"),
        ([[0, 1]], "indices must be a 1-D integer array"),
    ],
)
def test_bad_indices(indices, message):
    ds, _, _ = small()
    with pytest.raises(ValueError, match=re.escape(message)):
        ds.train_batch(indices)


def test_empty_batch():
    ds, _, _ = small()
    X, y = ds.train_batch([])
    assert X.shape == (0, 4, 5, 2) and y.shape == (0,)


def test_constructor_checks():
    images = np.zeros((2, 3, 3, 1), np.uint8)
    with pytest.raises(ValueError, match=re.escape("toy: train labels must be in 0..1, got 0..2")):
        Dataset("toy", images, [0, 2], images, [0, 1], n_classes=2, files=[])
    with pytest.raises(ValueError, match="must be uint8 or float32, got float64"):
        Dataset("toy", images.astype(float), [0, 1], images, [0, 1], n_classes=2, files=[])
    with pytest.raises(ValueError, match=re.escape("must be (n, H, W, C), got shape (2, 3, 3)")):
        Dataset("toy", images[..., 0], [0, 1], images, [0, 1], n_classes=2, files=[])


# ---- synthetic -------------------------------------------------------------------------------


def test_synthetic_shape_dtype_and_balance():
    ds = load_dataset(
        "synthetic",
        synthetic={"n_train": 90, "n_test": 31, "shape": (6, 5, 3), "n_classes": 9, "seed": 4},
    )
    assert (ds.name, ds.n_train, ds.n_test, ds.input_shape, ds.n_classes) == (
        "synthetic",
        90,
        31,
        (6, 5, 3),
        9,
    )
    assert ds.files == ["<generated>"] and ds.note is None
    X, y = ds.train_batch(np.arange(90))
    assert X.dtype == np.float32 and X.shape == (90, 6, 5, 3) and X.min() >= 0 and X.max() <= 1
    assert np.bincount(y).tolist() == [10] * 9
    assert sorted(np.bincount(ds.test_arrays()[1]).tolist()) == [3] * 5 + [4] * 4


def test_synthetic_is_deterministic_per_seed():
    options = {"n_train": 50, "n_test": 20, "shape": (4, 4, 1), "n_classes": 5}
    a = make_synthetic(**options, seed=1)
    b = make_synthetic(**options, seed=1)
    c = make_synthetic(**options, seed=2)
    for x, y in zip(a.train_batch(np.arange(50)), b.train_batch(np.arange(50)), strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(a.test_arrays()[0], b.test_arrays()[0])
    assert not np.array_equal(a.test_arrays()[0], c.test_arrays()[0])
    bigger = make_synthetic(**{**options, "n_train": 80}, seed=1)  # the test set stays put
    np.testing.assert_array_equal(a.test_arrays()[0], bigger.test_arrays()[0])


def test_synthetic_defaults_are_learnable_by_a_simple_rule():
    ds = load_dataset("synthetic")
    assert (ds.n_train, ds.n_test, ds.input_shape, ds.n_classes) == (10000, 2000, (28, 28, 1), 10)
    X, y = ds.train_batch(np.arange(ds.n_train))
    X = X.reshape(len(X), -1)
    centroids = np.stack([X[y == k].mean(axis=0) for k in range(10)])
    Xt, yt = ds.test_arrays()
    Xt = Xt.reshape(len(Xt), -1)
    d2 = (Xt**2).sum(1)[:, None] - 2 * Xt @ centroids.T + (centroids**2).sum(1)[None, :]
    accuracy = (d2.argmin(axis=1) == yt).mean()
    assert 0.9 < accuracy < 0.99  # learnable, and not trivially separable


def test_synthetic_bad_options():
    with pytest.raises(ValueError, match="synthetic: unknown option 'classes'"):
        load_dataset("synthetic", synthetic={"classes": 3})
    with pytest.raises(ValueError, match="n_classes must be an integer >= 2, got 1"):
        make_synthetic(n_classes=1)
    with pytest.raises(ValueError, match=re.escape("shape must be (H, W, C)")):
        make_synthetic(shape=(28, 28))


# ---- the bundled subset ----------------------------------------------------------------------


def test_bundled_subset_loads_and_matches_its_checksum():
    assert BUNDLED_PATH.stat().st_size < 4 * 2**20
    assert (BUNDLED_PATH.parent / "LICENSE.txt").read_text().count("CC BY-SA 3.0") == 1
    with np.load(BUNDLED_PATH, allow_pickle=False) as npz:
        arrays = {key: npz[key] for key in npz.files}
    assert sorted(arrays) == sorted(KEYS)
    assert arrays_sha256(arrays) == BUNDLED_SHA256
    ds = load_dataset("mnist-subset")
    assert (ds.name, ds.n_train, ds.n_test, ds.input_shape) == (
        "mnist-subset",
        10000,
        2000,
        (28, 28, 1),
    )
    assert ds.files == ["<bundled>"] and ds.note is None
    X, y = ds.train_batch(np.arange(10000))
    assert np.bincount(y).tolist() == [1000] * 10
    assert np.bincount(ds.test_arrays()[1]).tolist() == [200] * 10
    train = arrays["train_images"][..., None]
    np.testing.assert_allclose(X, standardised(train, train), rtol=1e-5, atol=1e-5)
    assert np.all(np.diff(arrays["train_index"]) > 0) and arrays["train_index"].max() < 60000
    assert np.all(np.diff(arrays["test_index"]) > 0) and arrays["test_index"].max() < 10000


def test_a_changed_subset_is_refused(tmp_path):
    with np.load(BUNDLED_PATH, allow_pickle=False) as npz:
        arrays = {key: npz[key] for key in npz.files}
    arrays["test_labels"] = arrays["test_labels"].copy()
    arrays["test_labels"][0] = (arrays["test_labels"][0] + 1) % 10
    np.savez_compressed(tmp_path / "s.npz", **arrays)
    with pytest.raises(DataError, match=f"{re.escape(str(tmp_path / 's.npz'))}: checksum mismatch"):
        load_subset(tmp_path / "s.npz")
    (tmp_path / "cut.npz").write_bytes(BUNDLED_PATH.read_bytes()[:100000])
    with pytest.raises(DataError, match="corrupt npz"):
        load_subset(tmp_path / "cut.npz")
    with pytest.raises(DataError, match="missing file"):
        load_subset(tmp_path / "none.npz")


def test_arrays_sha256_depends_on_dtype_and_shape_not_only_bytes():
    a = np.arange(6, dtype=np.uint8)
    assert arrays_sha256({"x": a}) != arrays_sha256({"x": a.reshape(2, 3)})
    assert arrays_sha256({"x": a}) != arrays_sha256({"x": a.view(np.int8)})
    assert arrays_sha256({"x": a}) == arrays_sha256({"x": a.copy()})


def test_select_balanced():
    labels = np.array([0, 1, 2] * 5)
    chosen = select_balanced(labels, per_class=2, seed=0)
    assert np.bincount(labels[chosen]).tolist() == [2, 2, 2] and np.all(np.diff(chosen) > 0)
    np.testing.assert_array_equal(chosen, select_balanced(labels, per_class=2, seed=0))
    with pytest.raises(ValueError, match="class 0 has 5 examples, need 6"):
        select_balanced(labels, per_class=6, seed=0)


def test_a_constant_channel_is_centred_not_blown_up():
    """A channel constant over the training set (real images can have one) has a float std of
    about 1e-17, not 0: dividing by it made the CNN's inputs 1e15 and its loss 1e7."""
    from twinsgd.data.dataset import _channel_stats

    images = np.full((1000, 4, 4, 3), 21, np.uint8)  # 21: its float std is 1.4e-17, not 0
    images[..., 2] = 0
    images[..., 0] = np.random.default_rng(0).integers(0, 256, (1000, 4, 4))
    mean, std = _channel_stats(images)
    assert std[1] == std[2] == 1.0 and mean[1] == np.float32(21 / 255) and mean[2] == 0
    assert 0.25 < std[0] < 0.35  # uniform over 0..255: 0.289
