"""The sequential `Model` over one flat parameter buffer, and `build_model` for the MLP and the CNN.

Examples
--------
>>> model = build_model("mlp", (28, 28, 1), 10, seed=0)
>>> model.n_params, model.params.dtype
(167560, dtype('float32'))
>>> [(name, view.shape) for name, view in model.views.items()][:2]
[('dense1.W', (784, 200)), ('dense1.b', (200,))]
>>> X = np.zeros((4, 28, 28, 1), np.float32); y = np.array([0, 1, 2, 3])
>>> loss, grad = model.loss_and_gradient(X, y)
>>> grad.shape
(167560,)
"""

import math

import numpy as np

from models.conv import Conv2D
from models.layers import Dense, Flatten, LogSoftmaxNLL, MaxPool2D, ReLU
from models.params import Layout

MODELS = ("mlp", "cnn")


class Model:
    """A stack of layers ending in log-softmax + NLL, with all weights in one flat buffer.

    Parameters
    ----------
    layers : list of Layer
        In order; the last must be `LogSoftmaxNLL`.
    input_shape : tuple of int
        One sample's shape, ``(H, W, C)``.
    seed : int, default 0
        Seed of ``np.random.default_rng`` for the initial weights (drawn in float64 in layer order,
        W before b, then cast to ``dtype``: float32 and float64 models of one seed agree to float32
        rounding).
    dtype : numpy dtype, default float32
        dtype of the parameters, the gradient and every activation.

    Attributes
    ----------
    params : (n_params,) ndarray of dtype, C-contiguous
        All weights; ``views`` are slices of it. Update it in place (``model.params[:] = w``).
    views : dict of str to ndarray
        ``"dense1.W" -> (784, 200)`` etc., views into ``params`` in layer order.
    layout : models.params.Layout
        Names, shapes and offsets of the views (the gradient has the same layout).
    n_params : int
    input_shape, n_classes, dtype
    layers : list of (str, Layer)
        Named layers in order, named by kind and rank: ``conv1``, ``pool1``, ``relu1``, ...,
        ``dense1``, ``logsoftmax1``.
    """

    def __init__(self, layers, input_shape, seed=0, dtype=np.float32):
        if not layers or not isinstance(layers[-1], LogSoftmaxNLL):
            raise ValueError("a Model's last layer must be LogSoftmaxNLL")
        if not any(layer.param_shapes for layer in layers):
            raise ValueError("a Model needs at least one layer with parameters")
        self.dtype, self.input_shape = np.dtype(dtype), tuple(int(d) for d in input_shape)
        if self.dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64, got {self.dtype}")
        self.layers, self._shapes = _name_layers(layers), [self.input_shape]
        for _, layer in self.layers:
            self._shapes.append(layer.output_shape(self._shapes[-1]))
        self.n_classes = self._shapes[-1][0]
        self.layout = Layout(
            (f"{name}.{suffix}", shape)
            for name, layer in self.layers
            for suffix, shape in layer.param_shapes
        )
        self.n_params = self.layout.size
        self._params = np.empty(self.n_params, dtype=self.dtype)
        self.views = self.layout.views(self._params)
        self._init(seed)
        self._blocks = [self._block_slice(name, layer) for name, layer in self.layers]
        for (_, layer), block in zip(self.layers, self._blocks, strict=True):
            layer.bind(self._params[block], self.dtype)
        for (_, layer), (_, after) in zip(self.layers, self.layers[1:], strict=False):
            # NOTE: performance: a convolution feeding a pooling emits its pixels in the order
            # the pooling reads fastest (see Conv2D); the result is the same.
            if isinstance(layer, Conv2D):
                layer.pool_order = isinstance(after, MaxPool2D)
        first = next(i for i, (_, layer) in enumerate(self.layers) if layer.param_shapes)
        self._first_with_params = first
        self._grad_cache = (None, None)  # (the last `out` buffer, its per-layer views)

    def _block_slice(self, name, layer):
        """Slice of the flat buffer holding one layer's parameters (empty for none)."""
        if not layer.param_shapes:
            return slice(0, 0)
        start = self.layout.offsets[f"{name}.{layer.param_shapes[0][0]}"]
        return slice(start, start + sum(math.prod(shape) for _, shape in layer.param_shapes))

    @property
    def params(self):
        """The flat weights, (n_params,) of dtype: write into it (the name is read-only)."""
        return self._params

    def _init(self, seed):
        rng = np.random.default_rng(seed)
        for name, layer in self.layers:
            for (suffix, _), value in zip(layer.param_shapes, layer.init_params(rng), strict=True):
                self.views[f"{name}.{suffix}"][...] = value

    def share_scratch(self, other):
        """Use ``other``'s scratch arrays (activations kept for backward, im2col buffers) instead
        of this model's own: for models that never compute at once, such as the simulator's
        nodes in one process. A model's scratch is what its last call left there, so sharing
        changes no result: every `loss_and_gradient` and `evaluate` writes what it reads. The
        CIFAR cnn keeps about 100 MB of it at batch 100: 210 simulated nodes of their own held
        21 GB. ValueError when the two are not the same network."""
        mine = [(type(layer), layer.param_shapes) for _, layer in self.layers]
        theirs = [(type(layer), layer.param_shapes) for _, layer in other.layers]
        if mine != theirs or self.input_shape != other.input_shape or self.dtype != other.dtype:
            raise ValueError("share_scratch needs a model of the same layers, input and dtype")
        for (_, layer), (_, source) in zip(self.layers, other.layers, strict=True):
            layer.ws = source.ws

    # ------------------------------------------------------------------ training
    def loss_and_gradient(self, X, y, out=None):
        """Mean NLL loss of a batch and its gradient with respect to ``params``.

        Parameters
        ----------
        X : (n, H, W, C) float array
            The batch, NHWC (cast to the model's dtype if needed).
        y : (n,) integer array
            Labels in ``[0, n_classes)``.
        out : (n_params,) ndarray of the model's dtype, optional
            Where to write the gradient (fast path: no allocation). Without it the gradient is a
            fresh array the caller may keep.

        Returns
        -------
        loss : float
            ``-mean_i log p(y_i | X_i)``.
        grad : (n_params,) ndarray
            ``out`` if given, else a new array; same layout as ``params``.

        Raises
        ------
        ValueError
            If shapes, labels or ``out`` do not fit the model.
        """
        X, y = self._check_batch(X, y)
        grad = self._check_out(out)
        loss = self._forward(X, y)
        self._backward(self._grad_views(grad))
        return loss, grad

    def _forward(self, X, y):
        h = X
        for _, layer in self.layers[:-1]:
            h = layer.forward(h)
        return self.layers[-1][1].forward(h, y)

    def _backward(self, grad_views):
        d = self.layers[-1][1].backward()
        for i in range(len(self.layers) - 2, self._first_with_params - 1, -1):
            d = self.layers[i][1].backward(d, grad_views[i], need_dx=i > self._first_with_params)

    def _grad_views(self, grad):
        """Per-layer blocks of ``grad`` (cached for a reused ``out`` buffer)."""
        cached, views = self._grad_cache
        if cached is grad:
            return views
        views = [grad[block] for block in self._blocks]
        self._grad_cache = (grad, views)
        return views

    # ------------------------------------------------------------------ inference
    def log_probs(self, X):
        """Log-probabilities ``(n, n_classes)`` of the batch ``X (n, H, W, C)`` (a new array)."""
        X, _ = self._check_batch(X, None)
        return self._log_probs(X).copy()

    def _log_probs(self, X):
        h = X
        for _, layer in self.layers[:-1]:
            h = layer.forward(h, train=False)
        return self.layers[-1][1].log_probs(h)

    def evaluate(self, X, y, batch_size=1000):
        """Mean NLL loss and accuracy over a data set, in chunks of ``batch_size`` samples.

        Parameters
        ----------
        X : (n, H, W, C) float array
        y : (n,) integer array
        batch_size : int, default 1000
            Samples per forward pass (memory grows with it: the CNN's im2col on 32x32x3 inputs
            takes about 0.4 MB per sample).

        Returns
        -------
        mean_loss : float
        accuracy : float in [0, 1]
            Fraction of samples whose most probable class is the label.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        X, y = self._check_batch(X, y)
        total_loss, correct = 0.0, 0
        for start in range(0, len(y), batch_size):
            logp = self._log_probs(X[start : start + batch_size])
            yb = y[start : start + batch_size]
            total_loss -= float(logp[np.arange(len(yb)), yb].sum(dtype=np.float64))
            correct += int(np.count_nonzero(logp.argmax(axis=1) == yb))
        return total_loss / len(y), correct / len(y)

    # ------------------------------------------------------------------ description
    def named_arrays(self):
        """Copies of the weights by name (``dense1.W`` ...), ready for ``np.savez``."""
        return {name: view.copy() for name, view in self.views.items()}

    @property
    def layer_specs(self):
        """One line per layer: name, description, output shape per sample, parameter count."""
        lines = []
        for (name, layer), shape in zip(self.layers, self._shapes[1:], strict=True):
            count = sum(self.views[f"{name}.{s}"].size for s, _ in layer.param_shapes)
            lines.append(f"{name:12s} {layer.describe():48s} -> {shape!s:16s} {count:>9,d} params")
        return lines

    @property
    def flops_per_sample(self):
        """Forward FLOPs per sample, 2 per multiply-add of the Dense and Conv2D layers."""
        return 2 * sum(self._macs())

    @property
    def train_flops_per_sample(self):
        """FLOPs per sample of one training step's GEMMs: forward, dW, and dx except the first."""
        macs = self._macs()
        return 2 * (3 * sum(macs) - macs[self._first_with_params])

    def _macs(self):
        """Forward multiply-adds per sample of each layer."""
        return [
            layer.macs(shape)
            for (_, layer), shape in zip(self.layers, self._shapes[:-1], strict=True)
        ]

    def __repr__(self):
        return (
            f"Model({self.input_shape} -> {self.n_classes} classes, {self.n_params:,d} "
            f"params, {self.dtype})"
        )

    # ------------------------------------------------------------------ input checks
    def _check_batch(self, X, y):
        X = np.asarray(X)
        if X.ndim != 4 or X.shape[1:] != self.input_shape:
            raise ValueError(
                f"X must have shape (n, {', '.join(map(str, self.input_shape))}), got {X.shape}"
            )
        if X.shape[0] == 0:
            raise ValueError("X must hold at least one sample")
        X = np.ascontiguousarray(X, dtype=self.dtype)
        if y is None:
            return X, None
        y = np.asarray(y)
        if y.shape != (X.shape[0],) or y.dtype.kind not in "iu":
            raise ValueError(
                f"y must be an integer array of shape ({X.shape[0]},), got {y.dtype} {y.shape}"
            )
        if y.min() < 0 or y.max() >= self.n_classes:
            raise ValueError(
                f"labels must be in [0, {self.n_classes}), got values in [{y.min()}, {y.max()}]"
            )
        return X, y

    def _check_out(self, out):
        if out is None:
            return np.empty(self.n_params, dtype=self.dtype)
        if (
            not isinstance(out, np.ndarray)
            or out.shape != (self.n_params,)
            or out.dtype != self.dtype
            or not out.flags.c_contiguous
        ):
            raise ValueError(
                f"out must be a C-contiguous ({self.n_params},) {self.dtype} array, "
                f"got {getattr(out, 'dtype', type(out))} {getattr(out, 'shape', '')}"
            )
        return out


def _name_layers(layers):
    """Name layers by kind and position among their kind: conv1, relu1, conv2, relu2, ..."""
    counts, named = {}, []
    for layer in layers:
        counts[layer.kind] = counts.get(layer.kind, 0) + 1
        named.append((f"{layer.kind}{counts[layer.kind]}", layer))
    return named


def build_model(name, input_shape, n_classes, seed=0, dtype=np.float32):
    """Build the named network, initialised deterministically from ``seed``.

    Parameters
    ----------
    name : {"mlp", "cnn"}
        ``mlp``: Flatten, Dense(d -> 200), ReLU, Dense(200 -> 50), ReLU, Dense(50 -> n_classes),
        log-softmax, with d = H*W*C (784 for MNIST).
        ``cnn``: Conv(5x5, pad 2, C -> 16), ReLU, MaxPool(2), Conv(5x5, pad 2, 16 -> 32), ReLU,
        MaxPool(2), Flatten, Dense(32*H/4*W/4 -> n_classes), log-softmax (H and W divisible by 4,
        e.g. 28x28x1 or 32x32x3). Each ReLU runs after its pooling (see Notes).
    input_shape : (H, W, C) tuple of int
        One sample's shape.
    n_classes : int
        Number of classes (>= 2).
    seed : int, default 0
    dtype : float32 or float64, default float32

    Returns
    -------
    Model

    Raises
    ------
    ValueError
        Unknown name, bad input shape or class count.

    Notes
    -----
    The cnn's layers run as conv, pool, relu: ``maxpool(relu(z)) == relu(maxpool(z))`` because the
    ReLU is monotone, and the gradients agree too (where the window's maximum is <= 0 both give 0,
    elsewhere both route it to the same maximal input), so this is the same network as conv, relu,
    pool; it is 4x less ReLU work.

    Examples
    --------
    >>> build_model("cnn", (32, 32, 3), 100).n_params
    218948
    """
    if name not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {name!r}")
    input_shape = tuple(int(d) for d in input_shape)
    if len(input_shape) != 3 or min(input_shape) < 1:
        raise ValueError(f"input_shape must be (H, W, C) with positive sizes, got {input_shape}")
    if int(n_classes) != n_classes or n_classes < 2:
        raise ValueError(f"n_classes must be an integer >= 2, got {n_classes}")
    return Model(_LAYERS[name](input_shape, int(n_classes)), input_shape, seed=seed, dtype=dtype)


def _mlp(input_shape, n_classes):
    H, W, C = input_shape
    return [
        Flatten(),
        Dense(H * W * C, 200),
        ReLU(),
        Dense(200, 50),
        ReLU(),
        Dense(50, n_classes),
        LogSoftmaxNLL(),
    ]


def _cnn(input_shape, n_classes):
    H, W, C = input_shape
    if H % 4 or W % 4:
        raise ValueError(f"the cnn needs height and width divisible by 4, got {H}x{W}")
    # NOTE: performance: pool before ReLU, the same function and gradient (see build_model).
    return [
        Conv2D(C, 16, 5, padding=2),
        MaxPool2D(),
        ReLU(),
        Conv2D(16, 32, 5, padding=2),
        MaxPool2D(),
        ReLU(),
        Flatten(),
        Dense(32 * (H // 4) * (W // 4), n_classes),
        LogSoftmaxNLL(),
    ]


_LAYERS = {"mlp": _mlp, "cnn": _cnn}
