"""Dataset readers (IDX, CIFAR binary), download with checksums, the bundled MNIST subset, synthetic
data, sharding.

The API the rest of twinsgd uses::

    from twinsgd.data import load_dataset, Dataset, DataError, shard_indices

    ds = load_dataset("mnist", data_dir=None)     # see data/loader.py for where it looks
    X, y = ds.train_batch(shard_indices(ds.n_train, rank, size, epoch, seed)[:64])

Modules: ``idx`` and ``cifar`` (file formats), ``sources`` (mirrors, checksums), ``fetch`` (atomic
verified download), ``locations`` (where to look), ``loader`` (``load_dataset``), ``dataset``
(``Dataset``), ``subset`` (bundled MNIST subset), ``synthetic``, ``substitute`` (CIFAR-10's format
made from Fashion-MNIST), ``sharding``, ``download`` (CLI).
Only numpy and the standard library are imported.
"""

from .dataset import Dataset
from .errors import DataError
from .loader import NAMES, load_dataset
from .sharding import shard_indices

__all__ = ["NAMES", "DataError", "Dataset", "load_dataset", "shard_indices"]
