"""Collectives through the in-process lockstep backend: sums, bytes and alpha-beta times.

The driver (`programs.lockstep.run_lockstep`) runs the generators of all ranks in one process and
delivers their messages; it also keeps a clock per rank on the alpha-beta model, so the closed
forms of `alpha_beta_time` are checked against the very messages the programs send.
"""

import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from twinsgd.programs import lockstep
from twinsgd.programs.collectives import (
    _rabenseifner_span,
    allreduce_bytes,
    alpha_beta_time,
    binomial_bcast,
    binomial_bcast_bytes,
    mpich_allreduce,
    rabenseifner_allreduce,
    rabenseifner_bytes,
    recursive_doubling_allreduce,
    recursive_doubling_bytes,
    reduce_bcast_allreduce,
    reduce_bcast_bytes,
    ring_allreduce,
    ring_allreduce_bytes,
)
from twinsgd.programs.lockstep import Deadlock
from twinsgd.programs.mpi_choices import allreduce_algorithm, alltoall_algorithm
from twinsgd.programs.ops import Recv, Send
from twinsgd.run.runlog import Charges

ALPHA, BETA = 3.0, 8.0  # seconds per message, bytes per second: round numbers, visible in failures
SIZES = range(1, 10)
UNIT_ROUNDOFF = 2.0**-24  # float32


def run_lockstep(programs, alpha=ALPHA, beta=BETA, buffered=False):
    """`programs.lockstep.run_lockstep` on this module's round alpha and beta."""
    return lockstep.run_lockstep(programs, alpha, beta, buffered)


def _allreduce(collective, bufs, **times):
    size = len(bufs)
    return run_lockstep([collective(buf, rank, size) for rank, buf in enumerate(bufs)], **times)


def _assert_bit_identical(bufs):
    for buf in bufs[1:]:
        assert buf.tobytes() == bufs[0].tobytes()


def _assert_sum_within_roundoff(result, contributions):
    """Any order of summing p float32 terms is within (p-1) u sum|x| of the exact sum (Higham
    2002, §4.2; u = 2**-24): a relative error under 1e-6 for p <= 16 unless terms cancel."""
    wide = contributions.astype(np.float64)
    exact = wide.sum(axis=0)
    bound = (len(wide) - 1) * UNIT_ROUNDOFF * np.abs(wide).sum(axis=0)
    error = np.abs(result.astype(np.float64) - exact)
    assert np.all(error <= bound * (1 + 1e-9)), (error - bound).max()


# -- the driver itself ---------------------------------------------------------------------------


def test_driver_detects_a_deadlock():
    def both_receive_first(rank):
        buf = np.zeros(2, np.float32)
        yield Recv(source=1 - rank, buf=buf)
        yield Send(dest=1 - rank, payload=buf)

    with pytest.raises(Deadlock, match=r"ranks \[0, 1\] wait"):
        run_lockstep([both_receive_first(0), both_receive_first(1)])


def test_driver_sends_are_synchronous():
    def both_send_first(rank):
        buf = np.zeros(2, np.float32)
        yield Send(dest=1 - rank, payload=buf)
        yield Recv(source=1 - rank, buf=buf)

    with pytest.raises(Deadlock):
        run_lockstep([both_send_first(0), both_send_first(1)])
    run = run_lockstep([both_send_first(0), both_send_first(1)], buffered=True)  # as Bsend would
    assert run.sent == run.received == [8, 8] and run.finished == [ALPHA + 8 / BETA] * 2

    def sends_one_too_many(rank):
        yield from [Send(dest=1, payload=np.zeros(1))] if rank == 0 else []
        return rank

    with pytest.raises(Deadlock, match=r"ranks \[0\] wait: 0: Send"):
        run_lockstep([sends_one_too_many(0), sends_one_too_many(1)])


def test_driver_times_a_ping_pong_as_two_messages():
    def ping_pong(rank):
        buf = np.arange(4, dtype=np.float32) * (rank == 0)
        if rank == 0:
            yield Send(dest=1, payload=buf)
            yield Recv(source=1, buf=buf)
        else:
            yield Recv(source=0, buf=buf)
            yield Send(dest=0, payload=buf)
        return buf

    run = run_lockstep([ping_pong(0), ping_pong(1)])
    assert run.finished == [2 * (ALPHA + 16 / BETA)] * 2  # rank 1's Send ends on delivery
    assert run.sent == run.received == [16, 16]
    np.testing.assert_array_equal(run.results[1], [0, 1, 2, 3])


# -- ring allreduce: a cross-check of the driver -------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 7, 36])
@pytest.mark.parametrize("size", SIZES)
def test_ring_allreduce_through_the_driver(size, n):
    contributions = np.random.default_rng([size, n]).standard_normal((size, n)).astype(np.float32)
    bufs = list(contributions.copy())
    run = _allreduce(ring_allreduce, bufs)
    _assert_bit_identical(bufs)
    _assert_sum_within_roundoff(bufs[0], contributions)
    for rank in range(size):
        assert (run.sent[rank], run.received[rank]) == ring_allreduce_bytes(n, 4, rank, size)
    closed_form = alpha_beta_time("ring", 4 * n, size, ALPHA, BETA, itemsize=4)
    if n % size == 0:
        assert max(run.finished) == pytest.approx(closed_form, rel=1e-12)
    else:  # the closed form charges the largest chunk in every step
        assert max(run.finished) <= closed_form * (1 + 1e-12)


# -- recursive doubling --------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 5, 64])
@pytest.mark.parametrize("size", SIZES)
def test_recursive_doubling_sums_bytes_and_time(size, n):
    contributions = np.random.default_rng([size, n]).standard_normal((size, n)).astype(np.float32)
    bufs = list(contributions.copy())
    run = _allreduce(recursive_doubling_allreduce, bufs)
    assert all(result is buf for result, buf in zip(run.results, bufs, strict=True))
    _assert_bit_identical(bufs)
    _assert_sum_within_roundoff(bufs[0], contributions)
    for rank in range(size):
        assert (run.sent[rank], run.received[rank]) == recursive_doubling_bytes(n, 4, rank, size)
    expected = alpha_beta_time("recursive-doubling", 4 * n, size, ALPHA, BETA)
    assert max(run.finished) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("size", SIZES)
def test_recursive_doubling_is_exact_on_integers(size):
    rng = np.random.default_rng(size)
    contributions = rng.integers(-1000, 1000, (size, 33)).astype(np.float32)
    bufs = list(contributions.copy())
    _allreduce(recursive_doubling_allreduce, bufs)
    for buf in bufs:
        np.testing.assert_array_equal(buf, contributions.sum(axis=0, dtype=np.int64))


def test_recursive_doubling_follows_mpich_on_six_ranks():
    """p' = 4, r = 2: ranks 0 and 2 fold into 1 and 3; newranks 0..3 are ranks 1, 3, 4, 5."""
    programs = [recursive_doubling_allreduce(np.zeros(1), rank, 6) for rank in range(6)]
    first = [next(program) for program in programs]
    assert [type(op).__name__ for op in first] == [
        "Send",
        "Recv",
        "Send",
        "Recv",
        "SendRecv",
        "SendRecv",
    ]
    assert [first[0].dest, first[1].source, first[4].dest, first[5].dest] == [1, 0, 5, 4]
    assert programs[1].send((0, None)).dest == 3  # newrank 0 ^ 1 = newrank 1 = rank 3
    assert programs[1].send(np.zeros(1)).dest == 4  # newrank 0 ^ 2 = newrank 2 = rank 4
    assert programs[1].send(np.zeros(1)).dest == 0  # fold out


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 16).flatmap(
        lambda size: st.integers(0, 50).flatmap(
            lambda n: hnp.arrays(
                np.float32,
                (size, n),
                elements=st.floats(-1e6, 1e6, width=32, allow_subnormal=False),
            )
        )
    )
)
def test_recursive_doubling_property(contributions):
    size, n = contributions.shape
    bufs = list(contributions.copy())
    run = _allreduce(recursive_doubling_allreduce, bufs)
    _assert_bit_identical(bufs)
    _assert_sum_within_roundoff(bufs[0], contributions)
    assert sum(run.sent) == sum(run.received)
    for rank in range(size):
        assert (run.sent[rank], run.received[rank]) == recursive_doubling_bytes(n, 4, rank, size)


# -- Rabenseifner (MPICH's long-message allreduce) -----------------------------------------------


@pytest.mark.parametrize("n", [8, 9, 64, 101])
@pytest.mark.parametrize("size", SIZES)
def test_rabenseifner_sums_bytes_and_time(size, n):
    contributions = np.random.default_rng([size, n]).standard_normal((size, n)).astype(np.float32)
    bufs = list(contributions.copy())
    run = _allreduce(rabenseifner_allreduce, bufs)
    assert all(result is buf for result, buf in zip(run.results, bufs, strict=True))
    _assert_bit_identical(bufs)
    _assert_sum_within_roundoff(bufs[0], contributions)
    for rank in range(size):
        assert (run.sent[rank], run.received[rank]) == rabenseifner_bytes(n, 4, rank, size)
    pof2 = 1 << (size.bit_length() - 1)
    expected = alpha_beta_time("rabenseifner", 4 * n, size, ALPHA, BETA, itemsize=4)
    if n % pof2 == 0:  # equal blocks: 2 log2(p') rounds of halving sizes, and the fold
        assert max(run.finished) == pytest.approx(expected, rel=1e-12)
    else:  # the closed form charges each round's largest message
        assert max(run.finished) <= expected * (1 + 1e-12)


@given(n=st.integers(0, 10**9), log_pof2=st.integers(0, 20), data=st.data())
def test_a_span_of_rabenseifners_blocks_is_their_sum_without_making_them(n, log_pof2, data):
    pof2 = 1 << log_pof2
    first = data.draw(st.integers(0, pof2))
    end = data.draw(st.integers(first, pof2))
    counts = [n // pof2] * pof2
    counts[-1] = n - (n // pof2) * (pof2 - 1)  # MPICH's cnts: the remainder in the last
    assert _rabenseifner_span(n, pof2, first, end) == sum(counts[first:end])


def test_rabenseifner_moves_the_rings_bytes_in_log_rounds():
    """p = 8, n = 800 floats: each rank sends 2 (p-1)/p n floats, in 2 log2 p = 6 messages."""
    assert rabenseifner_bytes(800, 4, 3, 8) == (2 * 7 * 100 * 4, 2 * 7 * 100 * 4)
    assert alpha_beta_time("rabenseifner", 3200, 8, 1.0, 1.0, 4) == pytest.approx(
        6 * 1.0 + 2 * 7 / 8 * 3200
    )


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 16).flatmap(
        lambda size: st.integers(size, 60).flatmap(
            lambda n: hnp.arrays(
                np.float32,
                (size, n),
                elements=st.floats(-1e6, 1e6, width=32, allow_subnormal=False),
            )
        )
    )
)
def test_rabenseifner_property(contributions):
    size, n = contributions.shape
    bufs = list(contributions.copy())
    run = _allreduce(rabenseifner_allreduce, bufs)
    _assert_bit_identical(bufs)
    _assert_sum_within_roundoff(bufs[0], contributions)
    assert sum(run.sent) == sum(run.received)
    for rank in range(size):
        assert (run.sent[rank], run.received[rank]) == rabenseifner_bytes(n, 4, rank, size)


@pytest.mark.parametrize(
    ("n", "size", "picked"),
    [
        (2, 8, "recursive-doubling"),  # 8 bytes: short (MPICH 4+; MPICH 3: 2,048)
        (8, 8, "rabenseifner"),  # 32 bytes, p' elements
        (7, 8, "recursive-doubling"),  # fewer elements than p'
        (512, 8, "rabenseifner"),
        (1000, 1024, "recursive-doubling"),  # fewer elements than p'
        (167_560, 16, "rabenseifner"),  # the MLP's gradient
    ],
)
def test_mpi_is_simulated_as_what_mpich_picks(n, size, picked):
    assert mpich_allreduce(n, 4, size) == picked
    assert allreduce_bytes("mpi", n, 4, 1, size) == allreduce_bytes(picked, n, 4, 1, size)
    assert alpha_beta_time("mpi", 4 * n, size, 1e-6, 1e9, 4) == alpha_beta_time(
        picked, 4 * n, size, 1e-6, 1e9, 4
    )


# -- reduce + broadcast (Open MPI's nonoverlapping) ----------------------------------------------


@pytest.mark.parametrize("n", [0, 7, 64])
@pytest.mark.parametrize("size", SIZES)
def test_reduce_bcast_sums_bytes_and_time(size, n):
    contributions = np.random.default_rng([size, n, 2]).standard_normal((size, n))
    bufs = list(contributions.astype(np.float32))
    run = _allreduce(reduce_bcast_allreduce, bufs)
    _assert_bit_identical(bufs)
    _assert_sum_within_roundoff(bufs[0], contributions.astype(np.float32))
    for rank in range(size):
        assert (run.sent[rank], run.received[rank]) == reduce_bcast_bytes(n, 4, rank, size)
    expected = alpha_beta_time("reduce-bcast", 4 * n, size, ALPHA, BETA, itemsize=4)
    if size & (size - 1) == 0:  # a power of two: log2 p rounds each way, exactly
        assert max(run.finished) == pytest.approx(expected, rel=1e-12)
    else:
        assert max(run.finished) <= expected * (1 + 1e-12)


def test_reduce_bcast_moves_the_buffer_log_p_times_through_rank_0():
    """p = 8: rank 0 receives from 1, 2 and 4 and sends to them again; a leaf once each way."""
    assert reduce_bcast_bytes(100, 4, 0, 8) == (3 * 400, 3 * 400)
    assert reduce_bcast_bytes(100, 4, 7, 8) == (400, 400)
    assert alpha_beta_time("reduce-bcast", 400, 8, 1.0, 100.0, 4, gamma=0.01) == pytest.approx(
        3 * (2 * (1.0 + 4.0) + 4.0)
    )


@pytest.mark.parametrize(
    ("library", "count", "size", "picked"),
    [  # v4.1.x coll_tuned_decision_fixed.c, float32 sums, read off its table
        ("openmpi-4.1", 1, 2, "recursive-doubling"),  # < 8 B: the ring, but 1 element < 2 ranks
        ("openmpi-4.1", 1023, 2, "recursive-doubling"),  # < 4,096 B
        ("openmpi-4.1", 1500, 2, "ring"),  # 4,096 .. 8,191 B
        ("openmpi-4.1", 65535, 2, "ring"),  # 65,536 .. 262,143 B: the segmented ring
        ("openmpi-4.1", 65536, 2, "rabenseifner"),
        ("openmpi-4.1", 65535, 64, "recursive-doubling"),  # 64 .. 127 ranks: < 262,144 B
        ("openmpi-4.1", 65536, 64, "rabenseifner"),
        ("openmpi-4.1", 32767, 200, "reduce-bcast"),  # 128 .. 255 ranks: < 131,072 B
        ("openmpi-4.1", 32768, 200, "recursive-doubling"),
        ("openmpi-4.1", 511, 5000, "reduce-bcast"),  # 4,096+ ranks: < 2,048 B
        ("openmpi-4.1", 512, 5000, "recursive-doubling"),  # the segmented ring: fewer than p
        ("openmpi-4.1", 8192, 5000, "rabenseifner"),  # 32,768 B: 8,192 >= p' = 4,096
        ("openmpi", 2500, 64, "ring"),  # v4.0.x: 10,000 B and more elements than ranks
        ("openmpi", 2500, 2500, "reduce-bcast"),  # ... not more: nonoverlapping
    ],
)
def test_open_mpi_picks_as_its_fixed_rules_say(library, count, size, picked):
    assert allreduce_algorithm(library, count, 4, size) == picked


@pytest.mark.parametrize(
    ("library", "block", "size", "picked"),
    [  # MPICH's MPIR_Alltoall_intra_auto defaults; Open MPI v4.0.x and v4.1.x fixed rules
        ("mpich", 256, 8, "bruck"),
        ("mpich", 256, 7, "linear"),  # Bruck's from 8 ranks
        ("mpich", 32768, 64, "linear"),
        ("mpich", 32769, 64, "pairwise"),
        ("openmpi", 199, 13, "bruck"),
        ("openmpi", 199, 12, "linear"),  # Bruck's on more than 12 ranks
        ("openmpi", 2999, 64, "linear"),
        ("openmpi", 3000, 64, "pairwise"),
        ("openmpi", 10, 2, "pairwise"),  # two_procs
        ("openmpi-4.1", 511, 32, "bruck"),  # 32 .. 63 ranks: < 512 B
        ("openmpi-4.1", 524287, 32, "linear"),
        ("openmpi-4.1", 524288, 32, "linear"),  # linear_sync, simulated as linear
        ("openmpi-4.1", 262144, 64, "pairwise"),  # 64 .. 127 ranks: from 262,144 B
        ("openmpi-4.1", 100, 4, "linear"),  # 3 .. 7 ranks: linear_sync below 8,192 B
        ("openmpi-4.1", 600_000, 4, "pairwise"),  # 524,288 .. 1,048,575 B
        ("openmpi-4.1", 100, 5000, "bruck"),
    ],
)
def test_alltoall_is_picked_as_each_librarys_rules_say(library, block, size, picked):
    assert alltoall_algorithm(library, block, size) == picked


# -- binomial broadcast --------------------------------------------------------------------------


def _bcast(root, size, n, seed=0):
    data = np.random.default_rng([seed, size, n]).standard_normal(n).astype(np.float32)
    bufs = [data.copy() if rank == root else np.full(n, np.nan, np.float32) for rank in range(size)]
    run = run_lockstep([binomial_bcast(buf, root, rank, size) for rank, buf in enumerate(bufs)])
    return data, bufs, run


@pytest.mark.parametrize("n", [0, 3, 40])
@pytest.mark.parametrize("size", SIZES)
def test_binomial_bcast_copies_bytes_and_rounds(size, n):
    for root in range(size):
        data, bufs, run = _bcast(root, size, n)
        for buf in bufs:
            assert buf.tobytes() == data.tobytes()
        for rank in range(size):
            assert (run.sent[rank], run.received[rank]) == binomial_bcast_bytes(
                n, 4, rank, root, size
            )
        rounds = math.ceil(math.log2(size))
        assert max(run.finished) == pytest.approx(rounds * (ALPHA + 4 * n / BETA), rel=1e-12)
        assert max(run.finished) == pytest.approx(
            alpha_beta_time("binomial-bcast", 4 * n, size, ALPHA, BETA), rel=1e-12
        )


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 16).flatmap(
        lambda size: st.tuples(st.just(size), st.integers(0, size - 1), st.integers(0, 50))
    )
)
def test_binomial_bcast_property(case):
    size, root, n = case
    data, bufs, run = _bcast(root, size, n, seed=1)
    for buf in bufs:
        assert buf.tobytes() == data.tobytes()
    assert sum(run.sent) == sum(run.received) == 4 * n * (size - 1)
    assert run.received[root] == 0


def test_binomial_bcast_tree_on_six_ranks_from_root_two():
    """vrank = rank - 2 mod 6: the root sends to vranks 4, 2, 1 (ranks 0, 4, 3), vrank 4 to 5
    (rank 0 to 1), vrank 2 to 3 (rank 4 to 5)."""
    buf = np.zeros(1)
    dests = {
        rank: [op.dest for op in binomial_bcast(buf, 2, rank, 6) if isinstance(op, Send)]
        for rank in range(6)
    }
    assert dests == {0: [1], 1: [], 2: [0, 4, 3], 3: [], 4: [5], 5: []}


# -- alpha_beta_time -----------------------------------------------------------------------------


def test_alpha_beta_time_formulas():
    step = ALPHA + 4000 / BETA
    assert alpha_beta_time("binomial-bcast", 4000, 1, ALPHA, BETA) == 0
    assert alpha_beta_time("recursive-doubling", 4000, 1, ALPHA, BETA) == 0
    assert alpha_beta_time("ring", 4000, 1, ALPHA, BETA) == 0
    assert alpha_beta_time("recursive-doubling", 4000, 8, ALPHA, BETA) == 3 * step
    assert alpha_beta_time("recursive-doubling", 4000, 9, ALPHA, BETA) == 5 * step
    assert alpha_beta_time("binomial-bcast", 4000, 9, ALPHA, BETA) == 4 * step
    assert alpha_beta_time("ring", 4000, 4, ALPHA, BETA) == 6 * (ALPHA + 1000 / BETA)
    assert alpha_beta_time("ring", 20, 4, ALPHA, BETA, itemsize=4) == 6 * (ALPHA + 8 / BETA)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("tree", 8, 2, 1.0, 1.0), "algorithm must be"),
        (("ring", 6, 2, 1.0, 1.0, 4), "multiple of itemsize=4"),
        (("ring", -4, 2, 1.0, 1.0), "n_bytes must be"),
        (("ring", 8, 0, 1.0, 1.0), "size must be >= 1, got 0"),
        (("ring", 8, 2, -1.0, 1.0), "alpha must be >= 0"),
        (("ring", 8, 2, 1.0, 0.0), "beta must be > 0"),
    ],
)
def test_alpha_beta_time_rejects_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        alpha_beta_time(*args)


def test_bad_ranks_fail_at_the_call():
    with pytest.raises(ValueError, match=r"rank must be in \[0, size=4\), got 4"):
        recursive_doubling_allreduce(np.zeros(1), 4, 4)
    with pytest.raises(ValueError, match=r"root must be in \[0, size=4\), got -1"):
        binomial_bcast(np.zeros(1), -1, 0, 4)
    with pytest.raises(ValueError, match="size must be >= 1"):
        recursive_doubling_bytes(1, 4, 0, 0)


# -- the same programs on the simulator ----------------------------------------------------------


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 7, 8])
def test_simulator_runs_the_same_messages(size):
    """SimPy backend: same bits and bytes as the driver. Its sends return once their bytes have
    left (latency overlaps the next send), so the closed forms are exact for powers of two and
    upper bounds otherwise."""
    from sim.backend import Simulator
    from sim.compute import ComputeModel

    alpha, beta, n = 5e-6, 1.25e9, 1000
    contributions = np.random.default_rng(size).standard_normal((size, n)).astype(np.float32)
    cases = {
        "recursive-doubling": lambda bufs: [
            recursive_doubling_allreduce(b, r, size) for r, b in enumerate(bufs)
        ],
        "binomial-bcast": lambda bufs: [
            binomial_bcast(b, size - 1, r, size) for r, b in enumerate(bufs)
        ],
    }
    for algorithm, programs in cases.items():
        logs = [_Log() for _ in range(size)]
        nodes = [SimpleNamespace(rank=r, size=size, reporter=0) for r in range(size)]
        sim = Simulator(nodes, logs, alpha, beta, ComputeModel(seconds_per_sample=0.0))
        simulated = list(contributions.copy())
        sim.run(programs(simulated))
        driven = list(contributions.copy())
        run = run_lockstep(programs(driven))
        for rank in range(size):
            assert simulated[rank].tobytes() == driven[rank].tobytes()
            assert (logs[rank].sent, logs[rank].received) == (run.sent[rank], run.received[rank])
        closed_form = alpha_beta_time(algorithm, 4 * n, size, alpha, beta)
        if size & (size - 1) == 0:
            assert sim.env.now == pytest.approx(closed_form, rel=1e-9, abs=1e-15)
        else:
            assert sim.env.now <= closed_form * (1 + 1e-9)


class _Log(Charges):
    """Counts the bytes the simulator charges."""

    sent = received = 0

    def charge(self, kind, seconds, bytes_sent=0, bytes_recv=0):
        self.sent += bytes_sent
        self.received += bytes_recv
