"""Every layer's backward against central differences (float64), and forwards against oracles.

Gradient checks: a layer's output y is reduced to the scalar ``L = sum(y * R)`` with a fixed random
R, so ``dL/dy = R`` is what ``backward`` is given. Central differences with step ``H = 1e-6`` have
truncation error O(H**2) and rounding error about 1e-16 / H = 1e-10 relative; the analytic and
numeric gradients are compared with ``rtol=RTOL=1e-6`` and ``atol=ATOL=1e-8``.
Inputs of ReLU and MaxPool are kept at least 1e-3 away from kinks and ties, so the finite
differences never step across one.
"""

import math

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from models.conv import Conv2D
from models.layers import Dense, Flatten, LogSoftmaxNLL, MaxPool2D, ReLU
from models.params import Layout, Workspace

H, RTOL, ATOL = 1e-6, 1e-6, 1e-8


@pytest.fixture(autouse=True)
def _one_blas_thread():
    """Small GEMMs gain nothing from threads, and a busy core makes spinning threads crawl."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def bind(layer, rng, dtype=np.float64):
    """Give ``layer`` its own parameter block, initialised from ``rng``; return the block."""
    size = sum(math.prod(shape) for _, shape in layer.param_shapes)
    block = np.empty(size, dtype=dtype)
    layer.bind(block, dtype)
    values = layer.init_params(rng)
    if values:
        block[:] = np.concatenate([v.ravel() for v in values])
    return block


def numeric_gradient(f, a, coords):
    """Central differences of the scalar f() with respect to the entries ``coords`` of ``a``."""
    flat, out = a.reshape(-1), np.empty(len(coords))
    for k, i in enumerate(coords):
        saved = flat[i]
        flat[i] = saved + H
        plus = f()
        flat[i] = saved - H
        minus = f()
        flat[i] = saved
        out[k] = (plus - minus) / (2 * H)
    return out


def check_layer(layer, x, rng, n_coords=None):
    """Check the input and parameter gradients of ``layer`` at ``x`` by central differences."""
    block = bind(layer, rng)
    y = layer.forward(x)
    R = rng.standard_normal(y.shape)
    grad = np.empty_like(block)
    dx = layer.backward(R, grad, need_dx=True).copy()

    def loss():
        return float(np.sum(layer.forward(x) * R))

    for a, analytic in ((x, dx), (block, grad)):
        coords = np.arange(a.size)
        if n_coords is not None and a.size > n_coords:
            coords = rng.choice(a.size, size=n_coords, replace=False)
        numeric = numeric_gradient(loss, a, coords)
        np.testing.assert_allclose(analytic.reshape(-1)[coords], numeric, rtol=RTOL, atol=ATOL)


def away_from_zero(rng, shape):
    """Normal samples pushed at least 1e-3 away from 0 (no ReLU kink within a step H)."""
    x = rng.standard_normal(shape)
    return x + np.where(x >= 0, 1e-3, -1e-3)


def distinct_values(rng, shape):
    """Values 1e-2 apart in random order: no two inputs of a pooling window tie or swap."""
    return (rng.permutation(math.prod(shape)).reshape(shape) - math.prod(shape) / 2) * 1e-2


# ---------------------------------------------------------------------------------------- Dense
def test_dense_forward_is_x_at_W_plus_b():
    rng = np.random.default_rng(0)
    layer = Dense(5, 3)
    bind(layer, rng)
    x = rng.standard_normal((4, 5))
    W, b = layer.params
    np.testing.assert_allclose(layer.forward(x), x @ W + b, rtol=1e-14)


def test_dense_gradient():
    rng = np.random.default_rng(1)
    check_layer(Dense(6, 4), rng.standard_normal((3, 6)), rng)


def test_dense_first_layer_skips_input_gradient():
    rng = np.random.default_rng(2)
    layer = Dense(6, 4)
    block = bind(layer, rng)
    layer.forward(rng.standard_normal((3, 6)))
    assert layer.backward(np.ones((3, 4)), np.empty_like(block), need_dx=False) is None


def test_dense_init_is_pytorch_uniform_fan_in():
    layer = Dense(400, 300)
    W, b = layer.init_params(np.random.default_rng(0))
    bound = 1 / math.sqrt(400)
    for a in (W, b):
        assert np.abs(a).max() <= bound
        assert np.abs(a).max() > 0.95 * bound  # uses the whole range
    assert abs(W.std() - bound / math.sqrt(3)) < 0.01 * bound  # std of U(-a, a) is a/sqrt(3)


# ----------------------------------------------------------------------------------------- ReLU
def test_relu_gradient():
    rng = np.random.default_rng(3)
    check_layer(ReLU(), away_from_zero(rng, (2, 3, 4, 5)), rng)


def test_relu_gradient_at_zero_is_zero_like_pytorch():
    layer = ReLU()
    bind(layer, np.random.default_rng(0))
    layer.forward(np.array([[-1.0, 0.0, 2.0]]))
    np.testing.assert_array_equal(layer.backward(np.array([[5.0, 5.0, 5.0]])), [[0.0, 0.0, 5.0]])


# -------------------------------------------------------------------------------------- Flatten
def test_flatten_is_c_order_and_its_gradient_reshapes_back():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 4, 5))
    layer = Flatten()
    bind(layer, rng)
    np.testing.assert_array_equal(layer.forward(x)[1, (2 * 4 + 3) * 5 + 4], x[1, 2, 3, 4])
    check_layer(Flatten(), x, rng)


# ------------------------------------------------------------------------------------- Conv2D
def conv_oracle(x, W, b, stride, padding):
    """Direct loops over every output and every kernel tap::

    y[n, ho, wo, co] = b[co] + sum_{i, j, c} xpad[n, s*ho + i, s*wo + j, c] * W[i, j, c, co]
    """
    n, Hx, Wx, cin = x.shape
    k, _, _, cout = W.shape
    xp = np.zeros((n, Hx + 2 * padding, Wx + 2 * padding, cin))
    xp[:, padding : padding + Hx, padding : padding + Wx] = x
    Ho, Wo = (Hx + 2 * padding - k) // stride + 1, (Wx + 2 * padding - k) // stride + 1
    y = np.empty((n, Ho, Wo, cout))
    for s in range(n):
        for ho in range(Ho):
            for wo in range(Wo):
                for co in range(cout):
                    window = xp[s, stride * ho : stride * ho + k, stride * wo : stride * wo + k, :]
                    y[s, ho, wo, co] = b[co] + sum(
                        window[i, j, c] * W[i, j, c, co]
                        for i in range(k)
                        for j in range(k)
                        for c in range(cin)
                    )
    return y


CONV_CASES = [  # (k, stride, padding, H, W)
    (3, 1, 0, 5, 6),
    (3, 1, 1, 5, 5),
    (5, 1, 2, 6, 5),
    (3, 2, 0, 7, 6),
    (3, 2, 1, 6, 7),
    (5, 2, 2, 7, 7),
    (1, 2, 0, 4, 4),
]


@pytest.mark.parametrize(("k", "stride", "padding", "h", "w"), CONV_CASES)
def test_conv2d_forward_matches_direct_loops(k, stride, padding, h, w):
    rng = np.random.default_rng(5)
    layer = Conv2D(3, 4, k, stride=stride, padding=padding)
    bind(layer, rng)
    x = rng.standard_normal((2, h, w, 3))
    W, b = layer.params
    np.testing.assert_allclose(
        layer.forward(x), conv_oracle(x, W, b, stride, padding), rtol=1e-12, atol=1e-12
    )


@pytest.mark.parametrize(("k", "stride", "padding", "h", "w"), CONV_CASES)
def test_conv2d_gradient(k, stride, padding, h, w):
    rng = np.random.default_rng(6)
    check_layer(
        Conv2D(3, 4, k, stride=stride, padding=padding),
        rng.standard_normal((2, h, w, 3)),
        rng,
        n_coords=60,
    )


def test_conv2d_output_shape_and_weight_layout():
    layer = Conv2D(3, 16, 5, padding=2)
    assert dict(layer.param_shapes) == {"W": (5, 5, 3, 16), "b": (16,)}
    assert layer.output_shape((32, 32, 3)) == (32, 32, 16)
    assert Conv2D(3, 8, 3, stride=2).output_shape((7, 7, 3)) == (3, 3, 8)
    assert layer.macs((32, 32, 3)) == 32 * 32 * 16 * 5 * 5 * 3


def test_conv2d_rejects_wrong_channels_and_bad_arguments():
    with pytest.raises(ValueError, match="needs 3 input channels, got 1"):
        Conv2D(3, 4, 3).output_shape((8, 8, 1))
    with pytest.raises(ValueError, match="stride must be an integer >= 1, got 0"):
        Conv2D(3, 4, 3, stride=0)
    with pytest.raises(ValueError, match="does not fit"):
        Conv2D(3, 4, 5).output_shape((3, 3, 3))


def test_conv2d_repeated_calls_reuse_buffers_and_give_the_same_result():
    rng = np.random.default_rng(7)
    layer = Conv2D(2, 3, 3, padding=1)
    bind(layer, rng)
    x1, x2 = rng.standard_normal((2, 2, 5, 5, 2))
    first = layer.forward(x1).copy()
    layer.forward(x2)  # overwrites the interior of the padded scratch input, not its border
    np.testing.assert_array_equal(layer.forward(x1), first)


# ----------------------------------------------------------------------------------- MaxPool2D
def test_maxpool_forward_matches_window_maxima():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 4, 6, 3))
    layer = MaxPool2D()
    bind(layer, rng)
    expected = np.array(
        [
            [
                [
                    [x[n, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2, c].max() for c in range(3)]
                    for j in range(3)
                ]
                for i in range(2)
            ]
            for n in range(2)
        ]
    )
    np.testing.assert_array_equal(layer.forward(x), expected)


def test_maxpool_gradient():
    rng = np.random.default_rng(9)
    check_layer(MaxPool2D(), distinct_values(rng, (2, 4, 6, 3)), rng)


def test_maxpool_routes_each_gradient_to_exactly_one_input_on_ties():
    layer = MaxPool2D()
    bind(layer, np.random.default_rng(0))
    layer.forward(np.zeros((1, 2, 2, 1)))  # all four inputs tie
    dx = layer.backward(np.full((1, 1, 1, 1), 3.0))
    assert dx.sum() == 3.0 and np.count_nonzero(dx) == 1
    assert dx[0, 0, 0, 0] == 3.0  # upper row, left column first


@pytest.mark.parametrize("stride", [1, 2])
def test_conv_in_pool_order_then_pool_equals_the_plain_pair(stride):
    """A Conv2D emitting phase order and the MaxPool2D reading it: same output, same gradients."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((3, 8, 8, 2))
    results = []
    for pool_order in (False, True):
        conv, pool = Conv2D(2, 3, 3, stride=stride, padding=1), MaxPool2D()
        block = bind(conv, np.random.default_rng(0))
        bind(pool, rng)
        conv.pool_order = pool_order
        h = conv.forward(x)
        assert h.ndim == (6 if pool_order else 4)
        y = pool.forward(h).copy()
        R = np.random.default_rng(1).standard_normal(y.shape)
        grad = np.empty_like(block)
        dx = conv.backward(pool.backward(R), grad).copy()
        results.append((y, grad, dx))
    for plain, phased in zip(*results, strict=True):
        np.testing.assert_allclose(phased, plain, rtol=1e-12, atol=1e-12)


def test_maxpool_in_phase_order_gradient_and_ties():
    rng = np.random.default_rng(13)
    x = distinct_values(rng, (2, 2, 2, 3, 2, 4))  # (n, a, b, h, w, C)
    check_layer(MaxPool2D(), x, rng)
    layer = MaxPool2D()
    bind(layer, rng)
    layer.forward(np.zeros((1, 2, 2, 1, 1, 1)))
    dx = layer.backward(np.full((1, 1, 1, 1), 2.0))
    assert dx.shape == (1, 2, 2, 1, 1, 1) and dx[0, 0, 0, 0, 0, 0] == 2.0 and dx.sum() == 2.0


def test_maxpool_rejects_odd_sizes():
    layer = MaxPool2D()
    bind(layer, np.random.default_rng(0))
    with pytest.raises(ValueError, match="even height and width, got 5x4"):
        layer.forward(np.zeros((1, 5, 4, 2)))


# ------------------------------------------------------------------------------ LogSoftmaxNLL
def test_logsoftmax_nll_loss_matches_formula_and_is_stable():
    rng = np.random.default_rng(10)
    head = LogSoftmaxNLL()
    bind(head, rng)
    x, y = rng.standard_normal((5, 4)), np.array([0, 3, 1, 1, 2])
    naive = -np.mean(x[np.arange(5), y] - np.log(np.exp(x).sum(axis=1)))
    assert head.forward(x, y) == pytest.approx(naive, rel=1e-14)
    # Logits of 1000 overflow a naive exp; the shifted form gives the exact answer.
    assert head.forward(np.array([[1000.0, 0.0]]), np.array([1])) == pytest.approx(1000.0)


def test_logsoftmax_nll_gradient():
    rng = np.random.default_rng(11)
    head = LogSoftmaxNLL()
    bind(head, rng)
    x, y = rng.standard_normal((3, 5)), np.array([4, 0, 2])
    head.forward(x, y)
    analytic = head.backward().copy()
    numeric = numeric_gradient(lambda: head.forward(x, y), x, np.arange(x.size))
    np.testing.assert_allclose(analytic.ravel(), numeric, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(analytic.sum(axis=1), 0.0, atol=1e-15)  # softmax - onehot


def test_log_probs_rows_normalise():
    head = LogSoftmaxNLL()
    bind(head, np.random.default_rng(0))
    logp = head.log_probs(np.random.default_rng(1).standard_normal((4, 7)) * 30)
    np.testing.assert_allclose(np.exp(logp).sum(axis=1), 1.0, rtol=1e-12)


# --------------------------------------------------------------------------- params.Workspace
def test_layout_offsets_and_views_share_memory():
    layout = Layout([("a.W", (2, 3)), ("a.b", (3,)), ("b.W", (3, 1))])
    assert layout.size == 12 and layout.offsets == {"a.W": 0, "a.b": 6, "b.W": 9}
    buffer = np.zeros(12, np.float32)
    views = layout.views(buffer)
    views["b.W"][2, 0] = 7.0
    assert buffer[11] == 7.0
    with pytest.raises(ValueError, match="appears twice"):
        Layout([("x", (1,)), ("x", (2,))])
    with pytest.raises(ValueError, match=r"buffer must have shape \(12,\), got \(11,\)"):
        layout.views(np.zeros(11))


def test_workspace_keeps_two_shapes_per_key():
    ws = Workspace(np.float32)
    a = ws.get("y", (100, 3))
    b = ws.get("y", (1000, 3))
    assert ws.get("y", (100, 3)) is a and ws.get("y", (1000, 3)) is b
    ws.get("y", (7, 3))  # a third shape evicts the least recently used, (100, 3)
    assert ws.get("y", (1000, 3)) is b and ws.get("y", (100, 3)) is not a
    assert ws.get("ones", (4,), fill=1.0).tolist() == [1.0] * 4
