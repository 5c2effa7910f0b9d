"""Ghost mode: size-only vectors, models and data, so the simulator can time what it cannot hold.

A ResNet-50 gradient is 102 MB; 10,000 simulated nodes cannot each hold one, and nobody wants the
simulator to add them up when the question is only how long the traffic takes. A `GhostArray` is
a vector that has a shape, a dtype and therefore ``nbytes`` (what the network model charges), but
no values: numpy ufuncs and the few array functions the node programs use (`np.copyto`,
`np.empty_like`, ...) accept it through numpy's dispatch protocols (NEP 13 and NEP 18) and return
ghosts at no cost. So the node programs run unchanged, message for message, on ghost payloads,
while a `GhostModel` gives gradients of the right size, a `GhostDataset` batches of the right
length, and `GhostOptimizer` steps that change nothing.

What ghost mode cannot give: accuracy (evaluations report NaN) and content-dependent payloads
(compression codecs look at the values, so ``--compress`` is refused).
"""

import math

import numpy as np

from models import PROFILES
from models import profile as network_profile

# Training examples of the data sets a ghost run may stand in for (epochs need a data set size).
TRAIN_EXAMPLES = {
    "mnist": 60_000,
    "mnist-subset": 10_000,
    "fashion-mnist": 60_000,
    "cifar10": 50_000,
    "cifar100": 50_000,
    "synthetic": 10_000,
    "imagenet": 1_281_167,
}


FLOAT32 = np.dtype(np.float32)


class GhostArray(np.lib.mixins.NDArrayOperatorsMixin):
    """A vector with a shape and a dtype but no values (see the module docstring).

    Parameters
    ----------
    shape : tuple of int, or int
    dtype : numpy dtype, default float32

    Examples
    --------
    >>> g = GhostArray(1000)
    >>> g.nbytes, g[100:350].nbytes, (g * 0.5).shape, len(g)
    (4000, 1000, (1000,), 1000)
    """

    __array_priority__ = 100

    def __init__(self, shape, dtype=FLOAT32):
        self.shape = (
            shape
            if type(shape) is tuple
            else (int(shape),)
            if np.ndim(shape) == 0
            else tuple(shape)
        )
        self.dtype = dtype if type(dtype) is np.dtype else np.dtype(dtype)
        self.size, self.ndim = math.prod(self.shape), len(self.shape)
        self.itemsize = self.dtype.itemsize
        self.nbytes = self.size * self.itemsize

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return f"GhostArray({self.shape}, {self.dtype})"

    def __getitem__(self, key):
        if isinstance(key, slice):
            return GhostArray(
                (len(range(*key.indices(self.shape[0]))), *self.shape[1:]), self.dtype
            )
        if isinstance(key, int | np.integer):
            return GhostArray(self.shape[1:], self.dtype) if self.ndim > 1 else np.nan
        return GhostArray((len(key), *self.shape[1:]), self.dtype)  # an index array

    def __setitem__(self, key, value):
        """Writing into a ghost changes nothing (there is nothing to change)."""

    def copy(self):
        return GhostArray(self.shape, self.dtype)

    def fill(self, value):
        """Nothing to fill."""

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        """Any ufunc over ghosts: into ``out`` if given, else a ghost of the inputs' shape."""
        if out is not None:
            return out[0] if len(out) == 1 else out
        shape = next(x.shape for x in inputs if isinstance(x, GhostArray))
        return GhostArray(shape, self.dtype) if method == "__call__" else np.nan

    def __array_function__(self, func, types, args, kwargs):
        """The array functions node programs call: allocation likes, copies, and norms."""
        if func in (np.empty_like, np.zeros_like, np.ones_like, np.copy):
            return args[0].copy()
        if func is np.copyto:
            return None
        if func in (np.linalg.norm, np.mean, np.sum, np.dot, np.vdot):
            return np.nan
        return NotImplemented


class GhostModel:
    """A model of ``params`` float32 parameters with a profile's compute and no values.

    ``loss_and_gradient`` returns a NaN loss and a ghost gradient (the same object every call: it
    is never written); ``evaluate`` returns NaN. ``flops_per_sample`` is the forward FLOPs of the
    named network (0 for a bare parameter count), for a compute model given in FLOP/s.
    """

    ghost = True

    def __init__(self, params, name=None, flops_per_sample=0):
        self.n_params, self.name, self.flops_per_sample = int(params), name, int(flops_per_sample)
        self.params = GhostArray(self.n_params)
        self._gradient = GhostArray(self.n_params)

    def loss_and_gradient(self, X, y, out=None):
        return np.nan, self._gradient

    def evaluate(self, X, y, batch_size=1000):
        return np.nan, np.nan

    def named_arrays(self):
        """No weights to save: model.npz of a ghost run is empty."""
        return {}


class GhostDataset:
    """A data set of ``n_train`` examples of ``input_shape`` with no pixels: ghost batches."""

    ghost = True
    note = None

    def __init__(self, name, n_train, input_shape, n_classes):
        self.name, self.n_train, self.n_test = f"ghost:{name}", int(n_train), 0
        self.input_shape, self.n_classes = tuple(input_shape), int(n_classes)
        self.files = ["<ghost>"]
        self._batches = {}

    def shard(self, rank, size, epoch, seed):
        """The indices of shard ``rank`` of ``size``: a range of its length (no permutation)."""
        return range(len(range(rank, self.n_train, size)))

    def train_batch(self, indices):
        """Ghost images (b, H, W, C) and labels (b,); one pair per batch length, reused."""
        b = len(indices)
        if b not in self._batches:
            self._batches[b] = GhostArray((b, *self.input_shape)), GhostArray(b, np.int64)
        return self._batches[b]

    def test_arrays(self):
        return None, None


class GhostOptimizer:
    """Stands in for the optimizer: no state (a ResNet-50 Adam state is 200 MB), no update."""

    schedule = None

    def step(self, params, grad):
        """Nothing to update."""


def ghost_model(spec):
    """The `GhostModel` of ``--ghost SPEC``: a network's name (`models.PROFILES`: resnet18,
    vgg16, resnet50, cnn-cifar) or a bare parameter count; and the data set its profile was made
    for (None for a count). ValueError for anything else."""
    if spec.isdigit() and int(spec) > 0:
        return GhostModel(int(spec)), None
    try:
        p = network_profile(spec)
    except (KeyError, ValueError) as err:
        raise ValueError(
            f"--ghost: expected {', '.join(PROFILES)} or a parameter count, got {spec!r}"
        ) from err
    data = (
        "imagenet" if p.input_shape[0] == 224 else "cifar100" if p.n_classes == 100 else "cifar10"
    )
    return GhostModel(p.params, p.name, p.flops_per_sample), GhostDataset(
        data, TRAIN_EXAMPLES[data], p.input_shape, p.n_classes
    )


def ghost_dataset(name):
    """A `GhostDataset` the size of data set ``name`` (for a bare parameter count)."""
    shape = (28, 28, 1) if "mnist" in name else (32, 32, 3)
    return GhostDataset(
        name, TRAIN_EXAMPLES.get(name, 10_000), shape, 100 if name == "cifar100" else 10
    )
