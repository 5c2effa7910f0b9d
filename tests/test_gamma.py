"""The reduction's arithmetic (gamma, seconds per byte combined): charged by the simulator where a
collective's program combines what it receives, equal to Thakur, Rabenseifner and Gropp's
alpha-beta-gamma formulas in closed form and message by message."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from sim.backend import Simulator
from sim.cluster_profile import InLibrary
from sim.compute import ComputeModel
from tests.programs import ChargeLog
from twinsgd.calibration.costfit import PiecewiseCost
from twinsgd.programs.collectives import alpha_beta_time
from twinsgd.programs.ops import Allreduce

ALPHA, BETA, GAMMA = 5e-6, 1.25e9, 2e-9


def _simulated(
    algo, size, n, collectives, gamma, finish=None, op="sum", logs=None, library_gamma=None
):
    def program(rank):
        buf = np.random.default_rng(rank).standard_normal(n).astype(np.float32)
        yield Allreduce(buf, op=op, algo=algo)

    nodes = [SimpleNamespace(rank=r, size=size, reporter=0) for r in range(size)]
    logs = [ChargeLog() for _ in range(size)] if logs is None else logs
    sim = Simulator(
        nodes,
        logs,
        ALPHA,
        BETA,
        ComputeModel(seconds_per_sample=0.0),
        collectives,
        gamma=gamma,
        finish=finish,
        library_gamma=library_gamma,
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
    [
        ("ring", 2),
        ("ring", 5),
        ("recursive-doubling", 4),
        ("recursive-doubling", 8),
        ("reduce-bcast", 2),
        ("reduce-bcast", 8),
    ],
)
def test_message_level_charges_gamma_as_the_closed_form(algo, size):
    """Exact cases (ring: p divides n; recursive doubling and reduce + broadcast: p a power of
    two): the message level
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


# an allreduce's finishing pass measured in situ: dearer per byte on small buffers than large
FINISH = PiecewiseCost.from_dict(
    {
        "min_bytes": [0.0, 65536.0],
        "max_bytes": [65536.0, math.inf],
        "latency_s": [1e-6, 20e-6],
        "bandwidth_Bps": [2e9, 8e9],
    }
)


@pytest.mark.parametrize("size", [2, 4])
@pytest.mark.parametrize("collectives", ["message", "closed-form"])
def test_a_mean_pays_one_pass_more_measured_in_situ_or_at_gamma(size, collectives):
    """An allreduce of a mean pays, past the ring and its adds at gamma, one pass over its n
    bytes: the in-situ finishing pass ``finish(n)`` where measured, else ``gamma n``; as comm
    (the real backend's comm pays ``finish_reduction`` too); both levels agree; a sum pays none."""
    n = 30000 * size  # floats: 120,000 bytes a rank, the second segment
    plain = alpha_beta_time("ring", 4 * n, size, ALPHA, BETA, itemsize=4, gamma=GAMMA)
    whole = 4 * n
    assert _simulated("ring", size, n, collectives, GAMMA, FINISH) == pytest.approx(plain, rel=1e-9)
    logs = [ChargeLog() for _ in range(size)]
    mean = _simulated("ring", size, n, collectives, GAMMA, FINISH, op="mean", logs=logs)
    assert mean - plain == pytest.approx(FINISH.seconds(whole), rel=1e-9)
    for log in logs:  # every second of it charged, the division as comm
        assert sum(log.seconds.values()) == pytest.approx(mean, rel=1e-9)
    assert _simulated("ring", size, n, collectives, GAMMA, op="mean") - plain == pytest.approx(
        GAMMA * whole, rel=1e-9
    )


# an add measured by size: 0.04 ns a byte while the operands sit in the caches, 0.17 past 1 MiB
REDUCTION = PiecewiseCost.from_dict(
    {
        "min_bytes": [0.0, 2.0**20],
        "max_bytes": [2.0**20, math.inf],
        "latency_s": [0.5e-6, -120e-6],
        "bandwidth_Bps": [25e9, 1 / 0.17e-9],
    }
)


@pytest.mark.parametrize(
    ("algo", "size", "floats"),
    [
        ("ring", 2, 2**17),
        ("ring", 4, 2**20),
        ("recursive-doubling", 4, 2**18),
        ("rabenseifner", 8, 2**19),
    ],
)
def test_a_reduction_measured_by_size_is_charged_at_each_steps_size_at_both_levels(
    algo, size, floats
):
    """``[compute.reduction]`` in place of gamma: each step's add costs the measured seconds of
    the bytes it combines (a ring's chunk of n/p, recursive doubling's whole n, Rabenseifner's
    halves), not gamma times them; message level and closed form agree, and the extra over no
    reduction is what the steps' sizes cost by the table."""
    message = _simulated(algo, size, floats, "message", REDUCTION)
    closed = _simulated(algo, size, floats, "closed-form", REDUCTION)
    none = _simulated(algo, size, floats, "message", 0.0)
    n = 4 * floats
    combined = {
        "ring": (size - 1) * REDUCTION.seconds(n // size),
        "recursive-doubling": 2 * REDUCTION.seconds(n),  # log2(4) rounds of the whole buffer
        "rabenseifner": sum(REDUCTION.seconds(n >> k) for k in (1, 2, 3)),  # n/2, n/4, n/8
    }[algo]
    assert message - none == pytest.approx(combined, rel=1e-9)
    assert closed == pytest.approx(message, rel=1e-9)


@pytest.mark.parametrize("collectives", ["message", "closed-form"])
@pytest.mark.parametrize(("size", "adds"), [(2, 1), (4, 2), (8, 3)])
def test_mpis_own_allreduce_adds_without_pythons_call(collectives, size, adds):
    """The add is timed from Python, as a program adds; MPI's allreduce adds in C: each of
    its adds (Rabenseifner's reduce-scatter, log2 p of them) costs the table less the call,
    and only MPI's: our own ring, whose adds are numpy called from Python, keeps the table."""
    call_s, floats = 0.3e-6, 2**16
    library = InLibrary(REDUCTION, call_s)
    with_call = _simulated("mpi", size, floats, collectives, REDUCTION)
    in_c = _simulated("mpi", size, floats, collectives, REDUCTION, library_gamma=library)
    assert with_call - in_c == pytest.approx(adds * call_s, rel=1e-9)
    ring = _simulated("ring", size, floats, collectives, REDUCTION)
    assert _simulated(
        "ring", size, floats, collectives, REDUCTION, library_gamma=library
    ) == pytest.approx(ring, rel=1e-15)


def test_an_add_in_c_costs_at_least_nothing():
    assert InLibrary(REDUCTION, 1.0).seconds(1024) == 0.0
    assert InLibrary(REDUCTION, 0.2e-6).seconds(4096) == pytest.approx(
        REDUCTION.seconds(4096) - 0.2e-6, rel=1e-12
    )


# a program's Sendrecv after its own code, and one right after another (bytes just written)
FIRST, NEXT = PiecewiseCost.constant(20e-6, 2e9), PiecewiseCost.constant(8e-6, 1e9)


def _measured_ring(algo, size, n, collectives, costs):
    """`_simulated` on a star whose Sendrecvs cost as ``costs`` says (a profile's, measured),
    gamma a byte; (end, each rank's `ChargeLog`)."""

    def program(rank):
        yield Allreduce(np.full(n, float(rank), np.float32), op="sum", algo=algo)

    nodes = [SimpleNamespace(rank=r, size=size, reporter=0) for r in range(size)]
    logs = [ChargeLog() for _ in range(size)]
    sim = Simulator(
        nodes, logs, ALPHA, BETA, ComputeModel(seconds_per_sample=0.0), collectives,
        costs=costs, gamma=GAMMA,
    )  # fmt: skip
    sim.run([program(r) for r in range(size)])
    return sim.env.now, logs


@pytest.mark.parametrize("size", [2, 4, 16])
@pytest.mark.parametrize("collectives", ["message", "closed-form"])
def test_our_ring_pays_its_first_step_in_situ_and_every_later_one_as_measured_after_another(
    size, collectives
):
    """A program's ring allreduce: its first Sendrecv right after the program's own code
    (the in-situ cost), each of its 2(p-1) - 1 later ones right after the last, sending what
    it has just added or received (``sendrecv-written``), and p-1 adds at gamma; at both
    levels, all of it comm. Without the later steps' cost, all 2(p-1) at the first's."""
    n = 1000 * size  # float32: 4,000 bytes a chunk
    chunk = 4 * n / size
    steps = 2 * (size - 1)
    adds = (size - 1) * chunk * GAMMA
    first, later = 20e-6 + chunk / 2e9, 8e-6 + chunk / 1e9
    both = {"sendrecv": FIRST, "sendrecv-written": NEXT}
    end, logs = _measured_ring("ring", size, n, collectives, both)
    assert end == pytest.approx(first + (steps - 1) * later + adds, rel=1e-9)
    for log in logs:
        assert log.seconds["comm"] == pytest.approx(end, rel=1e-9)
    end, _ = _measured_ring("ring", size, n, collectives, {"sendrecv": FIRST})
    assert end == pytest.approx(steps * first + adds, rel=1e-9)


def test_mpi_s_own_allreduce_keeps_its_steps_at_the_measured_sendrecv():
    """MPI's Allreduce is one call of the library: its steps are not a program's, and a
    program's step after another does not price them (recursive doubling of 8 bytes: one
    Sendrecv at 2 ranks)."""
    both = {"sendrecv": FIRST, "sendrecv-written": NEXT}
    for collectives in ("message", "closed-form"):
        end, _ = _measured_ring("mpi", 2, 2, collectives, both)
        assert end == pytest.approx(20e-6 + 8 / 2e9 + 8 * GAMMA, rel=1e-9)
