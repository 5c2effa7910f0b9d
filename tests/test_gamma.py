"""The reduction's arithmetic (gamma, seconds per byte combined): charged by the simulator where a
collective's program combines what it receives, equal to Thakur, Rabenseifner and Gropp's
alpha-beta-gamma formulas in closed form and message by message."""

from types import SimpleNamespace

import numpy as np
import pytest

from sim.backend import Simulator
from sim.compute import ComputeModel
from twinsgd.programs.collectives import alpha_beta_time
from twinsgd.programs.ops import Allreduce

ALPHA, BETA, GAMMA = 5e-6, 1.25e9, 2e-9


class _Log:
    def charge(self, kind, seconds, bytes_sent=0, bytes_recv=0):
        pass

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def _simulated(algo, size, n, collectives, gamma):
    def program(rank):
        buf = np.random.default_rng(rank).standard_normal(n).astype(np.float32)
        yield Allreduce(buf, op="sum", algo=algo)

    nodes = [SimpleNamespace(rank=r, size=size, reporter=0) for r in range(size)]
    sim = Simulator(
        nodes,
        [_Log() for _ in range(size)],
        ALPHA,
        BETA,
        ComputeModel(seconds_per_sample=0.0),
        collectives,
        gamma=gamma,
    )
    sim.run([program(r) for r in range(size)])
    return sim.env.now


def test_the_ring_formula_adds_p_minus_1_chunks_of_gamma():
    n, p = 4000 * 4, 4
    plain = alpha_beta_time("ring", n, p, ALPHA, BETA, itemsize=4)
    with_gamma = alpha_beta_time("ring", n, p, ALPHA, BETA, itemsize=4, gamma=GAMMA)
    assert with_gamma - plain == pytest.approx((p - 1) * (n / p) * GAMMA, rel=1e-12)
    with pytest.raises(ValueError, match="gamma"):
        alpha_beta_time("ring", n, p, ALPHA, BETA, gamma=-1.0)


@pytest.mark.parametrize(
    ("algo", "size"),
    [("ring", 2), ("ring", 5), ("recursive-doubling", 4), ("recursive-doubling", 8)],
)
def test_message_level_charges_gamma_as_the_closed_form(algo, size):
    """Exact cases (ring: p divides n; recursive doubling: p a power of two): the message level
    with gamma takes the formula's time, and gamma adds exactly its term."""
    n = 1000 * size
    message = _simulated(algo, size, n, "message", GAMMA)
    closed = _simulated(algo, size, n, "closed-form", GAMMA)
    formula = alpha_beta_time(algo, 4 * n, size, ALPHA, BETA, itemsize=4, gamma=GAMMA)
    assert message == pytest.approx(formula, rel=1e-9)
    assert closed == pytest.approx(formula, rel=1e-9)
    assert message > _simulated(algo, size, n, "message", 0.0)


def test_rabenseifner_charges_only_its_reduce_scatter_half():
    """Power of two: gamma over the halving steps' received bytes, (p-1)/p n in all, and none in
    the allgather half."""
    size, n = 8, 8000
    extra = _simulated("rabenseifner", size, n, "message", GAMMA) - _simulated(
        "rabenseifner", size, n, "message", 0.0
    )
    assert extra == pytest.approx((size - 1) / size * 4 * n * GAMMA, rel=1e-9)
