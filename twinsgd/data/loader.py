"""``load_dataset``: find a data set on disk (or fetch it), verify it, and return a Dataset.

Resolution order for ``mnist``, ``fashion-mnist``, ``cifar10`` and ``cifar100``:

1. An explicit data directory (the ``data_dir`` argument, else the ``TWINSGD_DATA`` environment
   variable): ``<dir>/<name>/`` or else ``<dir>/`` itself. When one is given, it is the only place
   looked at: if the files are not there, or are corrupt, that is a DataError naming the missing
   file (no cache, no download, no bundled subset). Someone who passes ``--data-dir D`` means D, and
   a run that silently trained on other data would be worse than one that stops.
   ``python -m twinsgd.data.download`` fills such a folder ahead of time.
2. The user cache ``${XDG_CACHE_HOME:-~/.cache}/twinsgd/<name>/``.
3. System folders ``/usr/share/datasets/<name>/``.
4. Download from the official mirrors into the cache (if ``allow_download``), verifying checksums.

If all of 2-4 fail for ``mnist``, the bundled subset (10,000 / 2,000 images) is returned as
``mnist-subset`` with a one-line ``note`` saying why; for the other data sets it is a DataError.
Whatever is found is verified against the published checksums before use (see data/sources.py).
An extracted CIFAR-10 folder that `data.substitute` wrote (Fashion-MNIST in CIFAR-10's format) is
loaded as ``cifar10-substitute``, with a note saying what it is.
"""

from pathlib import Path

import numpy as np

from . import locations
from .cifar import read_cifar
from .dataset import Dataset
from .errors import DataError
from .fetch import DEFAULT_TIMEOUT_S, fetch_dataset
from .idx import parse_idx
from .locations import (
    SUBSTITUTE_NAME,
    cache_root,
    env_data_dir,
    find_files,
    missing_file,
    substitute_note,
)
from .sources import SOURCES, read_verified, verify_archive
from .subset import load_subset
from .synthetic import DEFAULTS as SYNTHETIC_DEFAULTS
from .synthetic import make_synthetic

NAMES = ("mnist", "fashion-mnist", "cifar10", "cifar100", "synthetic", "mnist-subset")


def load_dataset(
    name, data_dir=None, *, allow_download=True, synthetic=None, timeout_s=DEFAULT_TIMEOUT_S
):
    """Load a data set by name.

    Parameters
    ----------
    name : {"mnist", "fashion-mnist", "cifar10", "cifar100", "synthetic", "mnist-subset"}
        ``"mnist-subset"`` asks for the bundled subset directly.
    data_dir : str or Path, optional
        The explicit data directory (``--data-dir``); when None, ``TWINSGD_DATA`` is read. Laid out
        as ``<dir>/<name>/<files>`` (files directly in ``<dir>`` are accepted too). See the module
        docstring for the resolution order and why an explicit directory is the only place tried.
    allow_download : bool
        Whether step 4 (download into the user cache) may run.
    synthetic : dict, optional
        Keyword arguments of :func:`data.synthetic.make_synthetic` (``n_train``, ``n_test``,
        ``shape``, ``n_classes``, ``seed``, ``noise_std``, ``separation``), used for ``synthetic``;
        missing keys take the defaults ``n_train=10000, n_test=2000, shape=(28, 28, 1),
        n_classes=10, seed=0``.
    timeout_s : float
        Seconds allowed for each connect and read while downloading.

    Returns
    -------
    Dataset
        ``name`` is the data set's (``"mnist-subset"`` after the fallback); ``files``, those read.

    Raises
    ------
    ValueError
        Unknown ``name`` or ``synthetic`` key (one line).
    DataError
        A file is missing (explicit directory), truncated, corrupt (checksum), or malformed; or a
        data set other than MNIST cannot be found or downloaded.

    Examples
    --------
    >>> ds = load_dataset("mnist", "/work/shared/datasets")             # doctest: +SKIP
    >>> ds.name, ds.input_shape, ds.n_train, ds.n_test, ds.note          # doctest: +SKIP
    ('mnist', (28, 28, 1), 60000, 10000, None)
    >>> X, y = ds.train_batch([0, 1]); X.shape, y                       # doctest: +SKIP
    ((2, 28, 28, 1), array([5, 0]))
    """
    if name not in NAMES:
        raise ValueError(f"dataset must be one of {', '.join(NAMES)}, got {name!r}")
    if name == "synthetic":
        return _synthetic(synthetic or {})
    if name == "mnist-subset":
        return load_subset()
    root = Path(data_dir) if data_dir not in (None, "") else env_data_dir()
    if root is not None:
        return _load_explicit(name, root)
    return _load_searched(name, allow_download, timeout_s)


def _synthetic(options):
    allowed = (*SYNTHETIC_DEFAULTS, "noise_std", "separation")
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"synthetic: unknown option {unknown[0]!r} (known: {', '.join(allowed)})")
    return make_synthetic(**{**SYNTHETIC_DEFAULTS, **options})


def _load_explicit(name, root):
    """Step 1: the explicit data directory, and nothing else."""
    if not root.is_dir():
        raise DataError(f"{root}: data directory does not exist (from --data-dir or TWINSGD_DATA)")
    for folder in (root / name, root):
        found = find_files(name, folder)
        if found:
            return _load_files(name, found)
    raise DataError(
        f"{missing_file(name, root / name)}: missing file (the data directory {root} "
        f"was given, so no other place is tried; fetch it with: "
        f"python -m twinsgd.data.download {name} --dir {root})"
    )


def _load_searched(name, allow_download, timeout_s):
    """Steps 2-4 and the MNIST fallback."""
    cache = cache_root() / name
    places = [cache, *(Path(d) / name for d in locations.SYSTEM_DIRS)]
    for folder in places:
        found = find_files(name, folder)
        if found and folder == cache:
            try:
                return _load_files(name, found)
            except DataError as err:  # ours to repair: say how
                raise DataError(
                    f"{err}; python -m twinsgd.data.download {name} replaces it"
                ) from err
        if found:
            return _load_files(name, found)
    where = ", ".join(map(str, places))
    if allow_download:
        try:
            fetch_dataset(name, cache, timeout_s=timeout_s)
            return _load_files(name, find_files(name, cache))
        except DataError as err:
            why = f"not found in {where}, and the download failed: {err}"
    else:
        why = f"not found in {where}, and downloads are off"
    if name != "mnist":
        raise DataError(
            f"{name}: {why}; fetch it with: python -m twinsgd.data.download {name} "
            f"--dir D, then pass --data-dir D"
        )
    subset = load_subset()
    subset.note = (
        f"mnist: full MNIST {why}; using the bundled class-balanced subset "
        f"({subset.n_train:,} train / {subset.n_test:,} test images)"
    )
    return subset


def _load_files(name, found):
    """Read and verify the files ``find_files`` returned; build the Dataset."""
    source = SOURCES[name]
    paths = [path for path, _ in found]
    if len(found) == 1:
        splits = _cifar(name, *found[0], source)
    else:
        splits = {
            "train": _idx_pair(found[0], found[1], source),
            "test": _idx_pair(found[2], found[3], source),
        }
    (X_train, y_train), (X_test, y_test) = splits["train"], splits["test"]
    dataset = Dataset(
        name, X_train, y_train, X_test, y_test, n_classes=source.n_classes, files=paths
    )
    note = substitute_note(paths[0]) if name == "cifar10" else None
    if note is not None:  # data.substitute wrote it: no run folder may call it CIFAR-10
        dataset.name, dataset.note = SUBSTITUTE_NAME, note
    return dataset


def _idx_pair(images_found, labels_found, source):
    """One split of an IDX data set: images (n, H, W, 1) uint8 and labels (n,), checked."""
    (images_path, images_spec), (labels_path, labels_spec) = images_found, labels_found
    images = parse_idx(read_verified(images_path, images_spec), images_path)
    labels = parse_idx(read_verified(labels_path, labels_spec), labels_path)
    H, W, _ = source.input_shape
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (H, W):
        raise DataError(
            f"{images_path}: wrong shape: expected (n, {H}, {W}) uint8 images, got "
            f"{images.shape} {images.dtype}"
        )
    if labels.dtype != np.uint8 or labels.shape != (len(images),):
        raise DataError(
            f"{labels_path}: wrong size: expected ({len(images)},) uint8 labels to "
            f"match {images_path}, got {labels.shape} {labels.dtype}"
        )
    if labels.size and labels.max() >= source.n_classes:
        raise DataError(
            f"{labels_path}: label {labels.max()} is out of range 0..{source.n_classes - 1}"
        )
    return images[..., None], labels


def _cifar(name, path, spec, source):
    """CIFAR from the published tar.gz (checked by MD5) or an extracted folder (checked by counts,
    since no checksums are published for the members)."""
    path = Path(path)
    if path.is_file():
        verify_archive(path, spec)
        return read_cifar(path, name)
    splits = read_cifar(path, name)
    for split, want in (("train", source.n_train), ("test", source.n_test)):
        have = len(splits[split][1])
        if have != want:
            raise DataError(
                f"{path}: wrong size: {have} {split} records, the published {name} has {want}"
            )
    return splits
