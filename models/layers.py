"""Layers with forward and backward side by side: Dense, ReLU, MaxPool2D, Flatten, the loss.

Theory of operation
-------------------
Activations are NHWC arrays, ``(n, H, W, C)``, or ``(n, d)`` after `Flatten`. A layer's ``forward``
keeps what its ``backward`` needs (its input, an im2col matrix, a mask) and returns its output
(``train=False`` lets it keep less: a forward-only pass for inference);
``backward(dy, grad, need_dx)`` writes the gradient of the loss with respect to the layer's
parameters into ``grad`` (the layer's block of the model's flat gradient, same layout as its
parameters) and returns the gradient with respect to its input, or None when ``need_dx`` is False
(the first layer with parameters needs no input gradient). Kernels compute gradients and never apply
them: the optimizer does that, after communication.

Parameters live in the model's flat buffer (`models.params`): ``bind`` hands each layer its block,
a 1-D view holding its arrays back to back in ``param_shapes`` order, and the layer reads them
through views of that block. No layer ever rebinds them, so ``model.params[:] = w`` changes what
every layer computes.

Outputs and scratch arrays come from the layer's `Workspace` and are reused by the next call with
the same batch size, so an output is valid until the layer's next ``forward``. Everything runs in
the model's dtype: float32 for speed, float64 for gradient checks.

`Conv2D` lives in `models.conv`. Weight layouts (no GEMM needs a transpose copy)::

    Dense   W (din, dout), b (dout,)          y = x @ W + b
    Conv2D  W (kh, kw, cin, cout), b (cout,)  y = im2col(x) @ W.reshape(kh*kw*cin, cout) + b

Initialisation follows PyTorch's defaults for ``nn.Linear`` and ``nn.Conv2d``: W and b both
uniform in ``[-1/sqrt(fan_in), 1/sqrt(fan_in)]`` (kaiming_uniform with a = sqrt(5)), with
``fan_in = din`` or ``kh*kw*cin``.
"""

import math

import numpy as np

from models.params import Workspace


class Layer:
    """Base class: a layer without parameters whose output has the shape of its input."""

    kind = "layer"  # prefix of the layer's name in the model: dense1, conv2, ...
    param_shapes = ()  # ((suffix, shape), ...) in packing order

    def bind(self, block, dtype):
        """Attach the layer's parameter block (1-D view into the model's params) and its scratch."""
        self.block, self.params = block, _split(block, self.param_shapes)
        self.ws = Workspace(dtype)

    def init_params(self, rng):
        """Initial values of the parameters, float64, drawn from ``rng`` (tuple of arrays)."""
        return ()

    def output_shape(self, input_shape):
        """Shape of one sample's output, given one sample's input shape (no batch dimension)."""
        return tuple(input_shape)

    def macs(self, input_shape):
        """Multiply-adds of the forward pass per sample (0 for layers without a GEMM)."""
        return 0

    def describe(self):
        """One line for humans: the layer's type and hyper-parameters."""
        return type(self).__name__


def _split(block, param_shapes):
    """Views of ``block`` (1-D) as the arrays of ``param_shapes``, back to back."""
    views, start = [], 0
    for _, shape in param_shapes:
        size = math.prod(shape)
        views.append(block[start : start + size].reshape(shape))
        start += size
    if start != block.size:
        raise ValueError(f"parameter block has {block.size} elements, the layer needs {start}")
    return tuple(views)


def _uniform_fan_in(rng, fan_in, *shapes):
    """PyTorch's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for each shape, float64."""
    bound = 1.0 / math.sqrt(fan_in)
    return tuple(rng.uniform(-bound, bound, size=shape) for shape in shapes)


class Dense(Layer):
    """Fully connected layer ``y = x @ W + b``.

    Parameters
    ----------
    din, dout : int
        Input and output features. W is (din, dout), b is (dout,).

    Notes
    -----
    Forward ``(n, din) -> (n, dout)``: n*din*dout multiply-adds; backward twice that (dW and dx).
    """

    kind = "dense"

    def __init__(self, din, dout):
        if din < 1 or dout < 1:
            raise ValueError(f"Dense sizes must be >= 1, got din={din}, dout={dout}")
        self.din, self.dout = int(din), int(dout)
        self.param_shapes = (("W", (self.din, self.dout)), ("b", (self.dout,)))

    def init_params(self, rng):
        return _uniform_fan_in(rng, self.din, (self.din, self.dout), (self.dout,))

    def output_shape(self, input_shape):
        if tuple(input_shape) != (self.din,):
            raise ValueError(
                f"Dense({self.din}, {self.dout}) needs inputs of shape "
                f"({self.din},), got {tuple(input_shape)}"
            )
        return (self.dout,)

    def macs(self, input_shape):
        return self.din * self.dout

    def describe(self):
        return f"Dense({self.din} -> {self.dout})"

    def forward(self, x, train=True):
        W, b = self.params
        self._x = x
        y = self.ws.get("y", (x.shape[0], self.dout))
        np.matmul(x, W, out=y)
        y += b
        return y

    def backward(self, dy, grad, need_dx=True):
        (W, _), (dW, db), x = self.params, _split(grad, self.param_shapes), self._x
        np.matmul(x.T, dy, out=dW)
        # NOTE: performance: ones @ dy (a GEMV) is much faster than dy.sum(axis=0) in numpy 2.4.
        np.matmul(self.ws.get("ones", (dy.shape[0],), fill=1.0), dy, out=db)
        if not need_dx:
            return None
        dx = self.ws.get("dx", x.shape)
        np.matmul(dy, W.T, out=dx)
        return dx


class ReLU(Layer):
    """Rectifier ``y = max(x, 0)``; its gradient is taken as 0 at x = 0 (as PyTorch does)."""

    kind = "relu"

    def describe(self):
        return "ReLU"

    def forward(self, x, train=True):
        # NOTE: performance: maximum against a zero array (one sample's worth, broadcast over
        # the batch) runs the SIMD loop; against the scalar 0 numpy 2.4 is 2-3x slower.
        zeros = self.ws.get("zeros", x.shape[1:], fill=0.0)
        y = self.ws.get("y", x.shape)
        np.maximum(x, zeros, out=y)
        self._y = y
        return y

    def backward(self, dy, grad=None, need_dx=True):
        mask = self.ws.get("mask", dy.shape, dtype=np.bool_)
        np.greater(self._y, 0, out=mask)
        dx = self.ws.get("dx", dy.shape)
        np.multiply(dy, mask, out=dx)
        return dx


class Flatten(Layer):
    """``(n, H, W, C) -> (n, H*W*C)`` in C order, so feature ``(h*W + w)*C + c`` is pixel (h, w, c).

    Note that PyTorch flattens NCHW tensors in (c, h, w) order: a Dense layer after this one has its
    rows in (h, w, c) order.
    """

    kind = "flatten"

    def output_shape(self, input_shape):
        return (math.prod(input_shape),)

    def describe(self):
        return "Flatten"

    def forward(self, x, train=True):
        self._shape = x.shape
        return x.reshape(x.shape[0], -1)

    def backward(self, dy, grad=None, need_dx=True):
        return dy.reshape(self._shape) if need_dx else None


class MaxPool2D(Layer):
    """2x2 max pooling with stride 2, by reshaping: no Python loop over pixels.

    Input ``(n, H, W, C)`` with H and W even (ValueError otherwise), output ``(n, H/2, W/2, C)``.
    The maximum is taken in two stages, over row pairs (``x.reshape(n, H/2, 2, W*C)``) and then
    over column pairs, and each stage remembers which of its two inputs won. The backward pass
    routes each output's gradient through those two choices to exactly one input of the window
    (on ties: the upper row, then the left column; PyTorch picks the first maximum in scan order,
    which differs only on ties, a set of measure zero for continuous inputs).

    It also accepts its input in the phase order of a `Conv2D` with ``pool_order`` set:
    ``(n, 2, 2, H/2, W/2, C)``, element ``[n, a, b, h, w]`` being pixel ``(2h + a, 2w + b)``. Then
    the four inputs of every window are four contiguous images, compared within each row first
    (b = 0 wins ties) and then across rows (a = 0 wins ties): the first maximum in scan order, as
    PyTorch picks it. Its input gradient comes back in the same layout.
    """

    kind = "pool"

    def output_shape(self, input_shape):
        H, W, C = input_shape
        if H % 2 or W % 2:
            raise ValueError(f"MaxPool2D(2x2) needs even height and width, got {H}x{W}")
        return (H // 2, W // 2, C)

    def describe(self):
        return "MaxPool2D(2x2, stride 2)"

    def forward(self, x, train=True):
        self._phases = x.ndim == 6
        if self._phases:
            return self._forward_phases(x)
        n, H, W, C = x.shape
        h, w, _ = self.output_shape((H, W, C))
        # NOTE: performance: two stages of elementwise maximum over strided views are about 8x
        # faster than x.reshape(n, h, 2, w, 2, C).max(axis=(2, 4)) in numpy 2.4.
        x4 = np.reshape(x, (n, h, 2, W * C))
        rows = self.ws.get("rows", (n, h, W * C))
        r5 = rows.reshape(n, h, w, 2, C)
        y = self.ws.get("y", (n, h, w, C))
        self._first_wins = self._max2(x4[:, :, 0], x4[:, :, 1], rows, "top_wins")
        self._second_wins = self._max2(r5[:, :, :, 0], r5[:, :, :, 1], y, "left_wins")
        return y

    def _forward_phases(self, x):
        n, _, _, h, w, C = x.shape
        y, top = self.ws.get("y", (n, h, w, C)), self.ws.get("rows", (2, n, h, w, C))
        self._phase_wins = [self._max2(x[:, a, 0], x[:, a, 1], top[a], f"wins{a}") for a in (0, 1)]
        self._second_wins = self._max2(top[0], top[1], y, "left_wins")
        return y

    def _max2(self, first, second, out, key):
        """out = max(first, second); returns the scratch mask ``first >= second``."""
        np.maximum(first, second, out=out)
        wins = self.ws.get(key, out.shape, dtype=np.bool_)
        np.greater_equal(first, second, out=wins)
        return wins

    @staticmethod
    def _route(d, wins, first, second):
        """Undo one stage: the winner of each pair gets d, the other 0 (d - d is exact)."""
        np.multiply(d, wins, out=first)
        np.subtract(d, first, out=second)

    def backward(self, dy, grad=None, need_dx=True):
        if self._phases:
            return self._backward_phases(dy)
        n, h, w, C = dy.shape
        drows = self.ws.get("drows", (n, h, w, 2, C))
        self._route(dy, self._second_wins, drows[:, :, :, 0], drows[:, :, :, 1])
        dx = self.ws.get("dx", (n, 2 * h, 2 * w, C))
        dx4, dr = dx.reshape(n, h, 2, 2 * w * C), drows.reshape(n, h, 2 * w * C)
        self._route(dr, self._first_wins, dx4[:, :, 0], dx4[:, :, 1])
        return dx

    def _backward_phases(self, dy):
        n, h, w, C = dy.shape
        dtop = self.ws.get("drows", (2, n, h, w, C))
        self._route(dy, self._second_wins, dtop[0], dtop[1])
        dx = self.ws.get("dx", (n, 2, 2, h, w, C))
        for a in (0, 1):
            self._route(dtop[a], self._phase_wins[a], dx[:, a, 0], dx[:, a, 1])
        return dx


class LogSoftmaxNLL(Layer):
    """Log-softmax fused with the negative log-likelihood loss, averaged over the batch.

    ``loss = -mean_i log softmax(x_i)[y_i]``; its gradient with respect to the logits is
    ``(softmax(x) - onehot(y)) / n``. Fusing the two avoids the unstable exp(log(p)) round trip.
    """

    kind = "logsoftmax"

    def describe(self):
        return "LogSoftmax + NLL loss (mean over the batch)"

    def log_probs(self, x):
        """Log-probabilities ``(n, k)`` of logits ``x (n, k)`` (a scratch array; copy to keep)."""
        n, k = x.shape
        logp = self.ws.get("logp", (n, k))
        np.subtract(x, x.max(axis=1, keepdims=True), out=logp)
        prob = self.ws.get("prob", (n, k))
        np.exp(logp, out=prob)
        total = prob.sum(axis=1, keepdims=True)
        logp -= np.log(total)
        prob /= total
        self._prob = prob
        return logp

    def forward(self, x, y):
        """Mean NLL loss (float) of logits ``x (n, k)`` for labels ``y (n,)``."""
        logp = self.log_probs(x)
        self._y = y
        return -float(logp[np.arange(len(y)), y].mean(dtype=np.float64))

    def backward(self):
        """Gradient of the loss with respect to the logits, ``(n, k)``."""
        prob, y = self._prob, self._y
        n = len(y)
        dx = self.ws.get("dx", prob.shape)
        np.copyto(dx, prob)
        dx[np.arange(n), y] -= 1.0
        dx *= 1.0 / n
        return dx
