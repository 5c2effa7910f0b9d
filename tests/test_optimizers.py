"""SGD, momentum and Adam against hand-computed steps and straightforward reference loops."""

import math
import tracemalloc

import numpy as np
import pytest

from models import make_optimizer
from models.optimizers import Adam, Momentum


def grads(n, steps, seed=0):
    return np.random.default_rng(seed).standard_normal((steps, n))


def test_sgd_one_step_by_hand():
    params = np.array([1.0, -2.0, 0.5])
    make_optimizer("sgd", 3, lr=0.1, dtype=np.float64).step(params, np.array([1.0, 2.0, -4.0]))
    np.testing.assert_allclose(params, [0.9, -2.2, 0.9], rtol=1e-15)


def test_momentum_first_steps_by_hand():
    """v1 = g1 (as PyTorch: the buffer starts as the first gradient), v2 = mu*v1 + g2."""
    params = np.array([1.0, 1.0])
    opt = make_optimizer("momentum", 2, lr=0.5, momentum=0.9, dtype=np.float64)
    opt.step(params, np.array([1.0, -2.0]))
    np.testing.assert_allclose(params, [0.5, 2.0], rtol=1e-15)
    opt.step(params, np.array([1.0, 0.0]))  # v = (1.9, -1.8)
    np.testing.assert_allclose(params, [0.5 - 0.95, 2.0 + 0.9], rtol=1e-15)


def test_momentum_matches_reference_loop():
    g, lr, mu = grads(50, 20), 0.05, 0.8
    params, opt = np.ones(50), make_optimizer("momentum", 50, lr=lr, momentum=mu, dtype=np.float64)
    w, v = np.ones(50), np.zeros(50)
    for t in range(20):
        opt.step(params, g[t])
        v = mu * v + g[t]
        w = w - lr * v
    np.testing.assert_allclose(params, w, rtol=1e-13)


def test_adam_first_step_is_lr_times_sign():
    """At t = 1, m_hat = g and v_hat = g**2, so the step is lr * g / (|g| + eps)."""
    g = np.array([3.0, -0.5, 1e-3])
    params = np.zeros(3)
    make_optimizer("adam", 3, lr=0.01, dtype=np.float64).step(params, g)
    np.testing.assert_allclose(params, -0.01 * g / (np.abs(g) + 1e-8), rtol=1e-12)


def test_adam_matches_kingma_ba_algorithm_1():
    """Twenty steps against the paper's form (bias-corrected m_hat and v_hat), eps after sqrt."""
    g, lr, (b1, b2), eps = grads(40, 20, seed=1), 1e-2, (0.8, 0.99), 1e-6
    params = np.linspace(-1, 1, 40)
    opt = make_optimizer("adam", 40, lr=lr, betas=(b1, b2), eps=eps, dtype=np.float64)
    w, m, v = params.copy(), np.zeros(40), np.zeros(40)
    for t in range(1, 21):
        opt.step(params, g[t - 1])
        m = b1 * m + (1 - b1) * g[t - 1]
        v = b2 * v + (1 - b2) * g[t - 1] ** 2
        m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
        w = w - lr * m_hat / (np.sqrt(v_hat) + eps)
    np.testing.assert_allclose(params, w, rtol=1e-12)
    assert opt.state_dict()["t"] == 20
    np.testing.assert_allclose(opt.state_dict()["m"], m, rtol=1e-13)


def test_adam_defaults_are_pytorchs():
    opt = make_optimizer("adam", 5, lr=1e-3)
    assert isinstance(opt, Adam) and opt.betas == (0.9, 0.999) and opt.eps == 1e-8


@pytest.mark.parametrize("name", ["sgd", "momentum", "adam"])
def test_float32_step_agrees_with_float64(name):
    g = grads(100, 5, seed=2)
    w32, w64 = np.ones(100, np.float32), np.ones(100)
    o32 = make_optimizer(name, 100, lr=1e-2, dtype=np.float32)
    o64 = make_optimizer(name, 100, lr=1e-2, dtype=np.float64)
    for t in range(5):
        o32.step(w32, g[t].astype(np.float32))
        o64.step(w64, g[t])
    assert w32.dtype == np.float32
    np.testing.assert_allclose(w32, w64, rtol=1e-6)


@pytest.mark.parametrize("name", ["sgd", "momentum", "adam"])
def test_step_allocates_nothing_proportional_to_the_model(name):
    n = 100_000
    params, grad = np.zeros(n, np.float32), np.ones(n, np.float32)
    opt = make_optimizer(name, n, lr=1e-3)
    opt.step(params, grad)
    tracemalloc.start()
    try:
        opt.step(params, grad)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024  # one temporary of the model's size would be 400 kB


def test_make_optimizer_rejects_bad_arguments_in_one_line():
    with pytest.raises(ValueError, match=r"^lr must be > 0, got 0$"):
        make_optimizer("sgd", 10, lr=0)
    with pytest.raises(ValueError, match=r"^lr must be > 0, got -0\.1$"):
        make_optimizer("adam", 10, lr=-0.1)
    with pytest.raises(
        ValueError, match=r"^optimizer must be one of sgd, momentum, adam, got 'lbfgs'$"
    ):
        make_optimizer("lbfgs", 10, lr=0.1)
    with pytest.raises(ValueError, match=r"^momentum must be in \[0, 1\), got 1\.0$"):
        make_optimizer("momentum", 10, lr=0.1, momentum=1.0)
    with pytest.raises(ValueError, match="n_params must be an integer >= 1"):
        make_optimizer("sgd", 0, lr=0.1)
    with pytest.raises(ValueError, match="lr must be > 0, got nan"):
        make_optimizer("sgd", 10, lr=math.nan)


def test_momentum_argument_is_accepted_by_every_rule():
    """real.train passes --momentum whatever the optimizer; only momentum uses it."""
    assert make_optimizer("sgd", 3, lr=0.1, momentum=0.5).state_dict() == {
        "name": "sgd",
        "lr": 0.1,
        "t": 0,
    }
    assert isinstance(make_optimizer("momentum", 3, lr=0.1, momentum=0.5), Momentum)


def test_step_rejects_mismatched_buffers():
    opt = make_optimizer("sgd", 4, lr=0.1)
    with pytest.raises(ValueError, match=r"params must be a \(4,\) float32 array, got float64"):
        opt.step(np.zeros(4), np.zeros(4, np.float32))
    with pytest.raises(ValueError, match=r"grad must be a \(4,\) float32 array"):
        opt.step(np.zeros(4, np.float32), np.zeros(5, np.float32))


def test_cosine_schedule_scales_every_step_of_every_rule():
    """Under the schedule, step t moves SGD by lr * f(t) * g, f the cosine factor; other rules scale
    the same way (momentum: the step on the velocity)."""
    from models import cosine_schedule

    factor = cosine_schedule(10)
    assert factor(1) == 1.0 and factor(6) == pytest.approx(0.5) and factor(11) == factor(10)
    params, grad = np.zeros(3, np.float32), np.array([1.0, -2.0, 0.5], np.float32)
    opt = make_optimizer("sgd", 3, lr=0.1, schedule=factor)
    expected = np.zeros(3)
    for t in range(1, 13):
        opt.step(params, grad)
        expected -= 0.1 * factor(t) * grad
        np.testing.assert_allclose(params, expected, rtol=1e-6)
        assert opt.lr_now == pytest.approx(0.1 * factor(t))
    constant = make_optimizer("momentum", 3, lr=0.1)
    scheduled = make_optimizer("momentum", 3, lr=0.1, schedule=lambda t: 0.5)
    a, b = np.zeros(3, np.float32), np.zeros(3, np.float32)
    for _ in range(3):
        constant.step(a, grad)
        scheduled.step(b, grad)
    np.testing.assert_allclose(b, a / 2, rtol=1e-6)
