"""The MLP and CNN end to end: layout, gradients (central differences), dtypes, learning."""

import time
import tracemalloc

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from models import Model, build_model, make_optimizer

# Central differences on whole models, float64. The step is small because ReLU and max pooling
# make the loss piecewise smooth: a step must not cross a kink (with 1e-6, one of the coordinates
# checked below does). Rounding error is then about 1e-16 / 1e-7 = 1e-9, far below ATOL + RTOL*|g|.
STEP, RTOL, ATOL = 1e-7, 1e-5, 1e-8


@pytest.fixture(autouse=True)
def _one_blas_thread():
    """Small GEMMs gain nothing from threads, and a busy core makes spinning threads crawl."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def batch(input_shape, n, n_classes=10, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, *input_shape)), rng.integers(0, n_classes, size=n)


# ------------------------------------------------------------------------------------ layout
def test_mlp_layout():
    model = build_model("mlp", (28, 28, 1), 10)
    shapes = {name: v.shape for name, v in model.views.items()}
    assert shapes == {
        "dense1.W": (784, 200),
        "dense1.b": (200,),
        "dense2.W": (200, 50),
        "dense2.b": (50,),
        "dense3.W": (50, 10),
        "dense3.b": (10,),
    }
    assert model.n_params == 784 * 200 + 200 + 200 * 50 + 50 + 50 * 10 + 10 == 167_560
    assert model.params.shape == (model.n_params,) and model.params.dtype == np.float32


@pytest.mark.parametrize(
    ("input_shape", "n_classes", "n_params"),
    [
        ((28, 28, 1), 10, 416 + 12_832 + 1568 * 10 + 10),
        ((32, 32, 3), 10, 1216 + 12_832 + 2048 * 10 + 10),
        ((32, 32, 3), 100, 1216 + 12_832 + 2048 * 100 + 100),
    ],
)
def test_cnn_layout(input_shape, n_classes, n_params):
    model = build_model("cnn", input_shape, n_classes)
    C = input_shape[2]
    assert [(name, v.shape) for name, v in model.views.items()] == [
        ("conv1.W", (5, 5, C, 16)),
        ("conv1.b", (16,)),
        ("conv2.W", (5, 5, 16, 32)),
        ("conv2.b", (32,)),
        ("dense1.W", (32 * input_shape[0] // 4 * input_shape[1] // 4, n_classes)),
        ("dense1.b", (n_classes,)),
    ]
    assert model.n_params == n_params


def test_views_share_memory_with_params_in_layout_order():
    model = build_model("cnn", (28, 28, 1), 10)
    offset = 0
    for name, view in model.views.items():
        assert np.shares_memory(view, model.params), name
        assert model.layout.offsets[name] == offset
        offset += view.size
    assert offset == model.n_params


def test_writing_params_changes_the_model():
    model = build_model("mlp", (28, 28, 1), 10, seed=0)
    X, _ = batch((28, 28, 1), 3)
    before = model.log_probs(X)
    model.params[:] = build_model("mlp", (28, 28, 1), 10, seed=1).params
    assert not np.allclose(model.log_probs(X), before)
    np.testing.assert_array_equal(model.views["dense3.b"], model.params[-10:])
    with pytest.raises(AttributeError):
        model.params = np.zeros(model.n_params, np.float32)  # rebinding would orphan the views


def test_named_arrays_are_copies():
    model = build_model("mlp", (28, 28, 1), 10)
    arrays = model.named_arrays()
    arrays["dense1.W"][:] = 0
    assert np.abs(model.views["dense1.W"]).max() > 0
    assert list(arrays) == list(model.views)


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_same_seed_same_weights_other_seed_other_weights(name):
    a, b, c = (build_model(name, (28, 28, 1), 10, seed=s) for s in (7, 7, 8))
    np.testing.assert_array_equal(a.params, b.params)
    assert not np.any(a.params == c.params)


def test_build_model_rejects_bad_arguments():
    with pytest.raises(ValueError, match=r"^model must be one of mlp, cnn, got 'resnet'$"):
        build_model("resnet", (28, 28, 1), 10)
    with pytest.raises(ValueError, match="divisible by 4, got 30x30"):
        build_model("cnn", (30, 30, 1), 10)
    with pytest.raises(ValueError, match="input_shape must be"):
        build_model("mlp", (784,), 10)
    with pytest.raises(ValueError, match="n_classes must be an integer >= 2"):
        build_model("mlp", (28, 28, 1), 1)


def test_bad_batches_are_rejected_with_one_line():
    model = build_model("mlp", (28, 28, 1), 10)
    X, y = batch((28, 28, 1), 4)
    with pytest.raises(ValueError, match=r"X must have shape \(n, 28, 28, 1\), got \(4, 784\)"):
        model.loss_and_gradient(X.reshape(4, 784), y)
    with pytest.raises(ValueError, match=r"labels must be in \[0, 10\)"):
        model.loss_and_gradient(X, y + 10)
    with pytest.raises(ValueError, match="y must be an integer array"):
        model.loss_and_gradient(X, y.astype(float))
    with pytest.raises(ValueError, match="out must be a C-contiguous"):
        model.loss_and_gradient(X, y, out=np.empty(model.n_params, np.float64))


# --------------------------------------------------------------------------------- gradients
@pytest.mark.parametrize(
    ("name", "input_shape", "n_classes"),
    [("mlp", (28, 28, 1), 10), ("cnn", (28, 28, 1), 10), ("cnn", (8, 12, 3), 5)],
)
def test_model_gradient_against_central_differences(name, input_shape, n_classes):
    """Every parameter array, 12 random coordinates each, float64, 3 samples."""
    model = build_model(name, input_shape, n_classes, seed=3, dtype=np.float64)
    X, y = batch(input_shape, 3, n_classes, seed=4)
    loss, grad = model.loss_and_gradient(X, y)
    rng = np.random.default_rng(5)
    for pname, view in model.views.items():
        start = model.layout.offsets[pname]
        for i in start + rng.choice(view.size, size=min(12, view.size), replace=False):
            saved = model.params[i]
            model.params[i] = saved + STEP
            plus = model.loss_and_gradient(X, y)[0]
            model.params[i] = saved - STEP
            minus = model.loss_and_gradient(X, y)[0]
            model.params[i] = saved
            np.testing.assert_allclose(
                grad[i],
                (plus - minus) / (2 * STEP),
                rtol=RTOL,
                atol=ATOL,
                err_msg=f"{pname}, flat index {i}",
            )
    assert model.loss_and_gradient(X, y)[0] == loss  # restored exactly


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_float32_and_float64_agree(name):
    """Same seed, same batch: loss to 1e-5 relative, gradient to 1e-3 of its largest entry."""
    m32 = build_model(name, (28, 28, 1), 10, seed=2, dtype=np.float32)
    m64 = build_model(name, (28, 28, 1), 10, seed=2, dtype=np.float64)
    np.testing.assert_array_equal(m32.params, m64.params.astype(np.float32))
    X, y = batch((28, 28, 1), 8)
    (l32, g32), (l64, g64) = m32.loss_and_gradient(X, y), m64.loss_and_gradient(X, y)
    assert g32.dtype == np.float32 and g64.dtype == np.float64
    assert l32 == pytest.approx(l64, rel=1e-5)
    np.testing.assert_allclose(g32, g64, rtol=0, atol=1e-3 * np.abs(g64).max())


def test_fresh_gradient_without_out_and_in_place_with_out():
    model = build_model("cnn", (28, 28, 1), 10)
    (X1, y1), (X2, y2) = batch((28, 28, 1), 4, seed=1), batch((28, 28, 1), 4, seed=2)
    _, g1 = model.loss_and_gradient(X1, y1)
    kept = g1.copy()
    _, g2 = model.loss_and_gradient(X2, y2)
    assert g2 is not g1
    np.testing.assert_array_equal(g1, kept)  # the caller's array was not reused
    out = np.full(model.n_params, np.nan, np.float32)
    _, g = model.loss_and_gradient(X1, y1, out=out)
    assert g is out
    np.testing.assert_array_equal(out, kept)


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_training_step_reuses_its_buffers(name):
    """After a warm-up call, loss_and_gradient(out=...) holds under 256 kB of new memory at any
    moment (numpy's casting buffers, small per-row arrays); its reused scratch takes megabytes."""
    model = build_model(name, (28, 28, 1), 10)
    X, y = batch((28, 28, 1), 100)
    X = X.astype(np.float32)
    out = np.empty(model.n_params, np.float32)
    model.loss_and_gradient(X, y, out=out)
    scratch = sum(layer.ws.nbytes() for _, layer in model.layers)
    tracemalloc.start()
    try:
        model.loss_and_gradient(X, y, out=out)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024 < scratch
    assert sum(layer.ws.nbytes() for _, layer in model.layers) == scratch


# ------------------------------------------------------------------------------- inference
def test_evaluate_matches_log_probs_and_does_not_depend_on_chunking():
    model = build_model("cnn", (28, 28, 1), 10, dtype=np.float64)
    X, y = batch((28, 28, 1), 23)
    logp = model.log_probs(X)
    np.testing.assert_allclose(np.exp(logp).sum(axis=1), 1.0, rtol=1e-12)
    loss = -logp[np.arange(23), y].mean()
    accuracy = np.mean(logp.argmax(axis=1) == y)
    for batch_size in (1000, 5):
        got_loss, got_accuracy = model.evaluate(X, y, batch_size=batch_size)
        assert got_loss == pytest.approx(loss, rel=1e-12)
        assert got_accuracy == accuracy
    assert model.loss_and_gradient(X, y)[0] == pytest.approx(loss, rel=1e-12)


def test_layer_specs_and_flops():
    model = build_model("cnn", (28, 28, 1), 10)
    assert len(model.layer_specs) == len(model.layers)
    assert model.layer_specs[0].startswith("conv1")
    macs = 28 * 28 * 16 * 25 * 1 + 14 * 14 * 32 * 25 * 16 + 1568 * 10
    assert model.flops_per_sample == 2 * macs
    assert isinstance(model, Model)


# -------------------------------------------------------------------------------- learning
def test_mlp_with_adam_fits_a_separable_problem_quickly():
    """200 points, 3 classes given by a random linear teacher; 150 full-batch Adam steps must
    cut the loss at least 20-fold and reach 100% training accuracy, in under 2 s."""
    start = time.perf_counter()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 4, 4, 1)).astype(np.float32)
    y = np.argmax(X.reshape(200, 16) @ rng.standard_normal((16, 3)), axis=1)
    model = build_model("mlp", (4, 4, 1), 3, seed=0)
    opt = make_optimizer("adam", model.n_params, lr=1e-2)
    grad = np.empty(model.n_params, np.float32)
    first = model.loss_and_gradient(X, y, out=grad)[0]
    for _ in range(150):
        model.loss_and_gradient(X, y, out=grad)
        opt.step(model.params, grad)
    final, accuracy = model.evaluate(X, y)
    assert final < first / 20
    assert accuracy == 1.0
    assert time.perf_counter() - start < 2.0


def test_models_that_share_scratch_compute_what_they_compute_alone():
    """The simulator's nodes share one set of scratch arrays: two cnns of different weights,
    taking turns on batches of two sizes, give the gradients they give alone, bit for bit, and
    the second one allocates no scratch of its own."""
    rng = np.random.default_rng(1)
    alone = [build_model("cnn", (32, 32, 3), 10, seed=s) for s in (0, 1)]
    shared = [build_model("cnn", (32, 32, 3), 10, seed=s) for s in (0, 1)]
    shared[1].share_scratch(shared[0])
    for n in (8, 5, 8):
        X = rng.standard_normal((n, 32, 32, 3)).astype(np.float32)
        y = rng.integers(0, 10, n)
        for a, s in zip(alone, shared, strict=True):
            loss_a, grad_a = a.loss_and_gradient(X, y)
            loss_s, grad_s = s.loss_and_gradient(X, y)
            assert loss_a == loss_s and np.array_equal(grad_a, grad_s)
        assert shared[0].evaluate(X, y) == alone[0].evaluate(X, y)
    held = [sum(layer.ws.nbytes() for _, layer in m.layers) for m in (*alone, *shared)]
    assert held[2] == held[0] > 0 and held[3] == held[2]  # one set, seen from both
    assert len({id(layer.ws) for m in shared for _, layer in m.layers}) == len(shared[0].layers)


def test_scratch_is_shared_only_between_the_same_network():
    with pytest.raises(ValueError, match="same layers"):
        build_model("cnn", (32, 32, 3), 10).share_scratch(build_model("mlp", (32, 32, 3), 10))
    with pytest.raises(ValueError, match="same layers"):
        build_model("cnn", (32, 32, 3), 10).share_scratch(build_model("cnn", (28, 28, 1), 10))
