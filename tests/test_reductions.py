"""Reduce to one root as MPICH and Open MPI run it (`programs.reductions`): the root ends with
the sum, in every rank count, from every root and in any segment size, bytes and times against
the alpha-beta formulas (the lockstep driver's synchronous sends), and which one each library
picks; `sim.osu osu_reduce` runs them."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.closed_form import allreduce_program
from twinsgd.programs import lockstep
from twinsgd.programs.broadcasts import BCASTS
from twinsgd.programs.mpi_choices import allreduce_algorithm, bcast_algorithm, reduce_algorithm
from twinsgd.programs.reductions import (
    REDUCES,
    binomial_reduce,
    in_order_binary_tree,
    in_order_binomial_tree,
    library_reduce_bcast,
    reduce_scatter_gather,
)

ROOT = Path(__file__).resolve().parents[1]
ALPHA, BETA = 3.0, 8.0  # seconds per message, bytes per second


def _reduce(program, n, root, size, *segment_bytes):
    """Run ``program`` to ``root`` on ``size`` ranks in lockstep on integer-valued floats
    (every order of adding gives the same bits); the run, after checking the root's sum."""
    rng = np.random.default_rng([n, root, size])
    bufs = [rng.integers(-50, 50, n).astype(np.float32) for _ in range(size)]
    total = np.sum(bufs, axis=0, dtype=np.float32)
    programs = [program(b, root, r, size, *segment_bytes) for r, b in enumerate(bufs)]
    run = lockstep.run_lockstep(programs, ALPHA, BETA)
    assert bufs[root].tobytes() == total.tobytes()
    return run


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 13), st.data())
def test_the_root_gets_the_sum_from_any_root_and_rank_count(size, data):
    root = data.draw(st.integers(0, size - 1))
    pof2 = 1 << (size.bit_length() - 1)
    n = data.draw(st.integers(pof2, 4 * pof2 + 3))
    _reduce(binomial_reduce, data.draw(st.integers(1, 40)), root, size)
    _reduce(reduce_scatter_gather, n, root, size)


@pytest.mark.parametrize("size", [2, 4, 8, 16])
def test_times_and_bytes_are_thakurs(size):
    """A power of two p, n = 64 p floats: the binomial tree log2 p (alpha + n/beta), the root
    receiving log2 p n bytes; the reduce-scatter and gather 2 log2 p alpha + 2 (p-1)/p n/beta,
    the root receiving (p-1)/p n in each half, every rank sending as much in all as it gets."""
    n = 64 * size
    nbytes, rounds = 4 * n, size.bit_length() - 1
    tree = _reduce(binomial_reduce, n, 0, size)
    assert max(tree.finished) == pytest.approx(rounds * (ALPHA + nbytes / BETA), rel=1e-12)
    assert tree.received[0] == rounds * nbytes
    halving = _reduce(reduce_scatter_gather, n, 0, size)
    expected = 2 * rounds * ALPHA + 2 * (size - 1) / size * nbytes / BETA
    assert max(halving.finished) == pytest.approx(expected, rel=1e-12)
    assert halving.received[0] == 2 * (size - 1) * nbytes // size
    assert sum(halving.sent) == sum(halving.received)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["linear", "in-order-binomial", "binary", "pipeline", "in-order-binary"]),
    st.integers(1, 13),
    st.integers(1, 40),
    st.sampled_from([0, 4, 8, 20, 1024]),
    st.data(),
)
def test_open_mpis_reduces_give_the_root_the_sum_in_any_segments(name, size, n, segment, data):
    root = data.draw(st.integers(0, size - 1))
    run = _reduce(REDUCES[name], n, root, size, segment)
    handed_on = name == "in-order-binary" and root != size - 1  # the tree's top to the root
    # each rank's sum once up its tree, and the whole sum once more where it is handed on
    assert sum(run.sent) == sum(run.received) == (size - 1 + handed_on) * 4 * n
    assert run.sent[root] == 0 or handed_on  # the root only takes
    assert run.received[root] > 0 or size == 1


@pytest.mark.parametrize("size, segments", [(2, 1), (3, 4), (5, 2), (8, 6)])
def test_a_pipeline_takes_p_plus_k_minus_2_segment_steps_and_linear_p_minus_1(size, segments):
    """The chain of p ranks with k segments of s bytes: the root has its last segment after
    (p - 1 + k - 1) (alpha + s/beta), each inner rank sending one segment up while it takes the
    next; the linear reduce: the root takes p - 1 messages of n bytes one after another."""
    n = 4 * segments  # 16-byte segments of 4 floats
    run = _reduce(REDUCES["pipeline"], n, 0, size, 16)
    assert max(run.finished) == pytest.approx((size + segments - 2) * (ALPHA + 16 / BETA))
    linear = _reduce(REDUCES["linear"], n, size - 1, size)
    assert max(linear.finished) == pytest.approx((size - 1) * (ALPHA + 4 * n / BETA))
    assert linear.received[size - 1] == (size - 1) * 4 * n


def test_the_in_order_binary_tree_has_every_rank_once_below_size_minus_1():
    """Rooted at size - 1, whatever the reduce's root: every other rank has one parent, which
    lists it among its at most two children."""
    for size in range(1, 40):
        trees = {r: in_order_binary_tree(r, size) for r in range(size)}
        assert trees[size - 1][0] is None
        for rank, (parent, children) in trees.items():
            assert len(children) <= 2
            assert all(trees[c][0] == rank for c in children)
            if rank != size - 1:
                assert rank in trees[parent][1]


def test_the_in_order_binomial_tree_is_open_mpis_picture():
    """ompi_coll_base_topo_build_in_order_bmtree's own comment: 8 ranks, 0 over 1, 2, 4; 2 over
    3; 4 over 5 and 6; 6 over 7 (and every rank but the root has one parent)."""
    trees = {r: in_order_binomial_tree(r, 0, 8) for r in range(8)}
    assert {r: c for r, (_, c) in trees.items() if c} == {0: [1, 2, 4], 2: [3], 4: [5, 6], 6: [7]}
    assert [trees[r][0] for r in range(8)] == [None, 0, 0, 2, 0, 4, 4, 6]


def test_reduce_scatter_gather_refuses_fewer_elements_than_the_power_of_two():
    with pytest.raises(ValueError, match=">= 4 elements"):
        next(reduce_scatter_gather(np.zeros(3, np.float32), 0, 0, 5))


@pytest.mark.parametrize(
    "count, size, expected",
    [(512, 8, "binomial"), (513, 8, "reduce-scatter-gather"), (600, 1024, "binomial")],
)
def test_mpich_picks_as_its_built_in_selection(count, size, expected):
    """Binomial up to 2,048 bytes (inclusive) or with fewer elements than p', else the
    reduce-scatter and gather."""
    assert reduce_algorithm("mpich", count, 4, size) == (expected, 0)
    assert expected in REDUCES


@pytest.mark.parametrize(
    "nbytes, size, expected",
    [
        (508, 7, ("linear", 0)),
        (512, 7, ("in-order-binomial", 0)),  # 512 B is past Linear_0K's "< 512"
        (20476, 7, ("in-order-binomial", 0)),
        (2044, 64, ("in-order-binomial", 0)),
        (2048, 64, ("in-order-binomial", 1024)),  # 64 > 0.6016/1024 * 2048 + 1.3496
        (100_000, 64, ("in-order-binomial", 1024)),  # 64 > 0.6016/1024 * 1e5 + 1.3496 = 60.1
        (400_000, 64, ("pipeline", 1024)),  # 64 <= 236.4; 64 > 0.0410/1024 * 4e5 + 9.7128 = 25.7
        (1_400_000, 64, ("binary", 32768)),  # 64 <= 65.8 (pipeline's line), > 58.9
        (4_000_000, 64, ("pipeline", 32768)),  # 64 > 0.0033/1024 * 4e6 + 1.6761 = 14.6
        (40_000_000, 64, ("pipeline", 65536)),
    ],
)
def test_open_mpi_picks_as_its_fixed_decision(nbytes, size, expected):
    """Open MPI 4.0's ``ompi_coll_tuned_reduce_intra_dec_fixed`` (commutative ops), at each
    of its lines."""
    assert reduce_algorithm("openmpi", nbytes // 4, 4, size) == expected
    assert expected[0] in REDUCES


@pytest.mark.parametrize(
    "nbytes, size, expected",
    [
        (4, 2, "linear"),  # Rabenseifner's, which falls back with fewer elements than p'
        (8, 3, "binary"),
        (4096, 3, "linear"),
        (600_000, 3, "pipeline"),  # the chain, its fan-out forced to 1
        (2000, 6, "binary"),
        (100_000, 6, "in-order-binomial"),
        (300_000, 6, "linear"),
        (10_000, 300, "in-order-binary"),
        (1 << 20, 64, "in-order-binomial"),
    ],
)
def test_open_mpi_41_picks_from_its_table_unsegmented(nbytes, size, expected):
    assert reduce_algorithm("openmpi-4.1", nbytes // 4, 4, size) == (expected, 0)
    assert expected in REDUCES


def test_a_reader_that_stops_early_ends_sim_osu_quietly():
    """``sim.osu ... | head -3``: three lines, and no traceback from the closed pipe."""
    command = f"{sys.executable} -m sim.osu osu_reduce --ranks 4 --sizes 4:1MiB | head -3"
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 3 and done.stderr == ""


def test_sim_osu_reduce_prints_a_table_as_either_library_picks():
    run = [sys.executable, "-m", "sim.osu", "osu_reduce", "--ranks", "6", "--sizes", "4:8192"]
    done = subprocess.run(run, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if not line.startswith("#")]
    assert [int(r[0]) for r in rows] == [2**k for k in range(2, 14)]
    assert all(float(r[1]) > 0 for r in rows)
    run[-1] = "4:1MiB"  # Open MPI's linear, in-order binomial, binary tree and pipelines on 6
    ompi = subprocess.run([*run, "--mpi", "openmpi"], capture_output=True, text=True, cwd=ROOT)
    assert ompi.returncode == 0, ompi.stderr
    rows = [line.split() for line in ompi.stdout.splitlines() if not line.startswith("#")]
    assert [int(r[0]) for r in rows] == [2**k for k in range(2, 21)]
    assert all(float(r[1]) > 0 for r in rows)


# -- Open MPI's nonoverlapping allreduce: its own reduce, then its own broadcast ------------------


def _alone(program_of, bufs):
    """Run ``program_of(buf, rank)`` on copies of ``bufs`` in lockstep: (the run, the copies)."""
    copies = [b.copy() for b in bufs]
    run = lockstep.run_lockstep([program_of(b, r) for r, b in enumerate(copies)], ALPHA, BETA)
    return run, copies


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["openmpi", "openmpi-4.1"]), st.integers(1, 13), st.integers(1, 3000))
def test_nonoverlapping_is_the_librarys_reduce_then_its_broadcast(library, size, n):
    """Every rank ends with the bits the library's reduce leaves at rank 0 (its order of adding,
    not the binomial tree's), and moves the bytes of that reduce and that broadcast."""
    rng = np.random.default_rng([size, n])
    bufs = [rng.standard_normal(n).astype(np.float32) for _ in range(size)]
    run, out = _alone(lambda b, r: library_reduce_bcast(b, r, size, library), bufs)
    reduce, segment = reduce_algorithm(library, n, 4, size)
    reduced, summed = _alone(lambda b, r: REDUCES[reduce](b, 0, r, size, segment), bufs)
    bcast, segment = bcast_algorithm(library, 4 * n, size, count=n)
    spread, _ = _alone(lambda b, r: BCASTS[bcast](b, 0, r, size, segment), summed)
    assert {b.tobytes() for b in out} == {summed[0].tobytes()}
    assert run.sent == [a + b for a, b in zip(reduced.sent, spread.sent, strict=True)]
    assert run.received == [a + b for a, b in zip(reduced.received, spread.received, strict=True)]


def test_mpi_on_open_mpi_41_runs_its_nonoverlapping_through_its_own_tables():
    """200 ranks, 4 KiB: Open MPI 4.1 picks nonoverlapping; the simulator runs its reduce and
    broadcast (not the binomial trees of ``--allreduce reduce-bcast``)."""
    size, n = 200, 1024
    assert allreduce_algorithm("openmpi-4.1", n, 4, size) == "reduce-bcast"
    bufs = [np.full(n, float(r), np.float32) for r in range(size)]
    ours, out = _alone(lambda b, r: allreduce_program("mpi", b, r, size, "openmpi-4.1"), bufs)
    named, _ = _alone(lambda b, r: allreduce_program("reduce-bcast", b, r, size), bufs)
    library, _ = _alone(lambda b, r: library_reduce_bcast(b, r, size, "openmpi-4.1"), bufs)
    assert ours.sent == library.sent != named.sent
    assert {b.tobytes() for b in out} == {np.full(n, sum(range(size)), np.float32).tobytes()}
