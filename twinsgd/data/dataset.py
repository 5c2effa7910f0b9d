"""The in-memory classification data set every part of twinsgd trains and evaluates on."""

import numpy as np

from twinsgd.data.sharding import shard_indices


class Dataset:
    """Train and test images with integer labels, converted to float32 only when asked for.

    Images are kept as stored: uint8 for the real data sets (one byte per pixel, so 16 ranks on one
    host hold 16 x 47 MB for MNIST rather than 16 x 188 MB), float32 in [0, 1] for synthetic data.
    :meth:`train_batch` converts only the requested rows.

    uint8 images are standardised per channel, ``(x/255 - mean) / std`` with the mean and standard
    deviation of the training images (torchvision's ``Normalize((0.1307,), (0.3081,))`` for MNIST
    is the same thing with rounded constants): zero-mean unit-variance inputs let the first layer
    learn as fast as the others, worth about half a point of MNIST accuracy after two epochs.
    Synthetic float32 images are used as they are.

    Parameters
    ----------
    name : str
        ``"mnist"``, ``"mnist-subset"``, ``"fashion-mnist"``, ``"cifar10"``, ``"cifar100"``,
        ``"synthetic"``, ``"cifar10-substitute"`` (`data.substitute`).
    train_images, test_images : (n, H, W, C) uint8 or float32
        uint8 pixels are standardised (see above); float32 pixels are used as they are.
    train_labels, test_labels : (n,) integer
        Class indices in ``0 .. n_classes - 1``; stored as int64.
    n_classes : int
    files : list of str
        The files the data came from (or ``["<bundled>"]``, ``["<generated>"]``), for config.json.
    note : str, optional
        One line for the user, e.g. that the bundled subset replaced full MNIST.

    Attributes
    ----------
    input_shape : tuple (H, W, C)
    n_train, n_test : int

    Examples
    --------
    >>> X = np.zeros((4, 2, 2, 1), np.uint8); X[1] = X[3] = 255
    >>> ds = Dataset("toy", X, [0, 1, 0, 1], X[:2], [0, 1], n_classes=2, files=["<made up>"])
    >>> ds.input_shape, ds.n_train, ds.n_test
    ((2, 2, 1), 4, 2)
    >>> xb, yb = ds.train_batch([1, 2])
    >>> ds.mean, ds.std
    (array([0.5], dtype=float32), array([0.5], dtype=float32))
    >>> xb.dtype, xb[:, 0, 0, 0], yb
    (dtype('float32'), array([ 1., -1.], dtype=float32), array([1, 0]))
    """

    def __init__(
        self,
        name,
        train_images,
        train_labels,
        test_images,
        test_labels,
        *,
        n_classes,
        files,
        note=None,
    ):
        self.name = name
        self.n_classes = int(n_classes)
        self.files = [str(f) for f in files]
        self.note = note
        self._train_images, self._train_labels = _checked(
            name, "train", train_images, train_labels, self.n_classes
        )
        self._test_images, self._test_labels = _checked(
            name, "test", test_images, test_labels, self.n_classes
        )
        if self._train_images.shape[1:] != self._test_images.shape[1:]:
            raise ValueError(
                f"{name}: train images {self._train_images.shape[1:]} and test images "
                f"{self._test_images.shape[1:]} differ in shape"
            )
        self._test_cache = None
        self.mean, self.std = _channel_stats(self._train_images)

    @property
    def input_shape(self):
        """(H, W, C) of one image."""
        return tuple(self._train_images.shape[1:])

    @property
    def n_train(self):
        """Number of training examples."""
        return len(self._train_labels)

    @property
    def n_test(self):
        """Number of test examples."""
        return len(self._test_labels)

    def shard(self, rank, size, epoch, seed):
        """The training indices node ``rank`` of ``size`` reads in ``epoch``: `shard_indices`."""
        return shard_indices(self.n_train, rank, size, epoch, seed)

    def train_batch(self, indices):
        """The training examples at ``indices``.

        Parameters
        ----------
        indices : (b,) integer array-like
            Row numbers in ``0 .. n_train - 1`` (repeats allowed), e.g. a slice of
            :func:`data.shard_indices`.

        Returns
        -------
        X : (b, H, W, C) float32, standardised
            A new array; the data set's storage is never exposed.
        y : (b,) int64
        """
        indices = np.asarray(indices)
        if indices.ndim != 1 or not (indices.size == 0 or np.issubdtype(indices.dtype, np.integer)):
            raise ValueError(
                f"{self.name}: indices must be a 1-D integer array, got dtype "
                f"{indices.dtype} shape {indices.shape}"
            )
        if indices.size and (indices.min() < 0 or indices.max() >= self.n_train):
            raise ValueError(
                f"{self.name}: indices must be in 0..{self.n_train - 1}, got "
                f"{indices.min()}..{indices.max()}"
            )
        indices = indices.astype(np.intp, copy=False)
        # fancy indexing already copied the rows, so the conversion may work in place
        X = self._to_float(self._train_images[indices], copy=False)
        return X, self._train_labels[indices]

    def test_arrays(self):
        """The whole test split: X (n_test, H, W, C) float32 standardised, y (n_test,) int64.

        Converted on the first call and cached; the arrays are read-only and shared between calls.
        """
        if self._test_cache is None:
            X = self._to_float(self._test_images)
            y = self._test_labels.copy()
            X.flags.writeable = False
            y.flags.writeable = False
            self._test_cache = (X, y)
        return self._test_cache

    def stored(self, split):
        """One split as stored, (images (n, H, W, C) uint8 or float32, labels (n,) int64),
        read-only views: for tools that re-encode a data set (`data.substitute`), not training.
        """
        if split not in ("train", "test"):
            raise ValueError(f"{self.name}: split must be 'train' or 'test', got {split!r}")
        images, labels = (
            (self._train_images, self._train_labels)
            if split == "train"
            else (self._test_images, self._test_labels)
        )
        images, labels = images.view(), labels.view()
        images.flags.writeable = labels.flags.writeable = False
        return images, labels

    def _to_float(self, images, copy=True):
        """uint8 pixels -> new float32 array ``x * (1/(255 std)) - mean/std``; float32 pixels as
        they are (copied unless ``copy`` is False)."""
        if images.dtype != np.uint8:
            return np.array(images, dtype=np.float32, copy=copy)
        X = images.astype(np.float32)
        X *= 1.0 / (255.0 * self.std)
        X -= self.mean / self.std
        return X

    def __repr__(self):
        H, W, C = self.input_shape
        return (
            f"Dataset({self.name!r}, train={self.n_train}, test={self.n_test}, "
            f"shape=({H}, {W}, {C}), classes={self.n_classes})"
        )


def _checked(name, split, images, labels, n_classes):
    """Check one split's shapes, dtypes and label range; return (images, labels int64)."""
    images = np.asarray(images)
    labels = np.asarray(labels)
    if images.ndim != 4:
        raise ValueError(f"{name}: {split} images must be (n, H, W, C), got shape {images.shape}")
    if images.dtype not in (np.uint8, np.float32):
        raise ValueError(f"{name}: {split} images must be uint8 or float32, got {images.dtype}")
    if labels.shape != (len(images),) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(
            f"{name}: {split} labels must be {len(images)} integers, got dtype "
            f"{labels.dtype} shape {labels.shape}"
        )
    if labels.size and (labels.min() < 0 or labels.max() >= n_classes):
        raise ValueError(
            f"{name}: {split} labels must be in 0..{n_classes - 1}, got "
            f"{labels.min()}..{labels.max()}"
        )
    return images, labels.astype(np.int64)


# A channel is constant when its std is below this: float arithmetic leaves ~1e-17 for a constant
# one, and the smallest true std of uint8 pixels (one pixel one level off among 1e9) is 1.2e-7
MIN_STD = 1e-12


def _channel_stats(images):
    """Per-channel mean and std (float32 (C,)) of ``images / 255``; (0, 1) for float images.

    Computed exactly from a 256-bin histogram per channel, so no float copy of the set is made.
    """
    channels = images.shape[-1]
    if images.dtype != np.uint8:
        return np.zeros(channels, np.float32), np.ones(channels, np.float32)
    levels = np.arange(256) / 255.0
    mean, std = np.empty(channels, np.float32), np.empty(channels, np.float32)
    for c in range(channels):
        counts = np.bincount(images[..., c].ravel(), minlength=256)
        mu = counts @ levels / counts.sum()
        sigma = np.sqrt(counts @ (levels - mu) ** 2 / counts.sum())
        mean[c], std[c] = mu, sigma if sigma > MIN_STD else 1.0  # a constant channel stays 0
    return mean, std
