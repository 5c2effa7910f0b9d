"""The libraries' long-message broadcasts (`programs.broadcasts`): every rank ends with the
root's bits, bytes as counted, times against the alpha-beta formulas (the lockstep driver's
synchronous sends, Thakur et al.'s assumption), and which one each library picks."""

import math

import numpy as np
import pytest

from twinsgd.programs import lockstep
from twinsgd.programs.broadcasts import (
    BCASTS,
    binary_tree,
    pipeline_bcast,
    scatter_allgather_bcast,
    scatter_blocks,
    split_binary_bcast,
)
from twinsgd.programs.mpi_choices import bcast_algorithm

ALPHA, BETA = 3.0, 8.0  # seconds per message, bytes per second


def _bcast(program, n, root, size, **kwargs):
    """Run ``program`` from ``root`` on ``size`` ranks in lockstep; (run, the root's values)."""
    values = np.random.default_rng([n, root, size]).standard_normal(n).astype(np.float32)
    bufs = [values.copy() if r == root else np.zeros(n, np.float32) for r in range(size)]
    programs = [program(bufs[r], root, r, size, **kwargs) for r in range(size)]
    run = lockstep.run_lockstep(programs, ALPHA, BETA)
    for buf in bufs:
        assert buf.tobytes() == values.tobytes()
    return run


def received_in_scatter_allgather(nbytes, rank, root, size):
    """What a rank must receive in a scatter + allgather broadcast, from what it must hold:
    in the scatter, the blocks of its binomial subtree (relative rank r: blocks r .. r + m - 1,
    m the lowest bit of r; nothing at the root); in the allgather, every block but its own."""
    bounds, r = scatter_blocks(nbytes, size), (rank - root) % size
    lowest = r & -r
    subtree = bounds[min(r + lowest, size)] - bounds[r] if r else 0
    return subtree + nbytes - (bounds[r + 1] - bounds[r])


@pytest.mark.parametrize("size", range(1, 10))
@pytest.mark.parametrize("n", [0, 1, 5, 64, 101])
def test_scatter_ring_allgather_bcast_delivers_and_moves_what_each_rank_lacks(size, n):
    for root in {0, size // 2, size - 1}:
        run = _bcast(scatter_allgather_bcast, n, root, size, allgather="ring")
        expected = [received_in_scatter_allgather(4 * n, r, root, size) for r in range(size)]
        assert run.received == expected
        assert sum(run.sent) == sum(expected)


@pytest.mark.parametrize("size", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("n", [0, 3, 64, 100])
def test_scatter_recursive_doubling_bcast_delivers_and_moves_what_each_rank_lacks(size, n):
    root = size - 1
    run = _bcast(scatter_allgather_bcast, n, root, size, allgather="recursive-doubling")
    expected = [received_in_scatter_allgather(4 * n, r, root, size) for r in range(size)]
    assert run.received == expected
    assert sum(run.sent) == sum(expected)


@pytest.mark.parametrize("size", [2, 4, 8, 16])
def test_scatter_allgather_bcast_times_are_thakurs(size):
    """n = 64 p floats (equal blocks): the scatter log2 p alpha + (p-1)/p n/beta, then the
    recursive doubling the same again, or the ring's (p-1)(alpha + n/(p beta))."""
    n = 64 * size
    nbytes, rounds = 4 * n, math.log2(size)
    scatter = rounds * ALPHA + (size - 1) / size * nbytes / BETA
    doubling = _bcast(scatter_allgather_bcast, n, 0, size, allgather="recursive-doubling")
    assert max(doubling.finished) == pytest.approx(2 * scatter, rel=1e-12)
    ring = _bcast(scatter_allgather_bcast, n, 0, size, allgather="ring")
    expected = scatter + (size - 1) * (ALPHA + nbytes / size / BETA)
    assert max(ring.finished) == pytest.approx(expected, rel=1e-12)


def test_scatter_allgather_bcast_refuses_recursive_doubling_off_a_power_of_two():
    with pytest.raises(ValueError, match="power of two"):
        scatter_allgather_bcast(np.zeros(4), 0, 0, 6, "recursive-doubling")


@pytest.mark.parametrize("size", range(1, 8))
def test_pipeline_bcast_takes_p_minus_2_plus_k_segment_steps(size):
    """k = 5 segments of 16 floats down a chain of p ranks: the last rank has the last segment
    after (k + p - 2) steps of alpha + 64 bytes / beta; every rank but the last sends it all."""
    n, k = 80, 5
    run = _bcast(pipeline_bcast, n, 0, size, segment_bytes=64)
    steps = k + size - 2 if size > 1 else 0
    assert max(run.finished) == pytest.approx(steps * (ALPHA + 64 / BETA), rel=1e-12)
    assert run.received == [0] + [4 * n] * (size - 1)
    assert run.sent == [4 * n] * (size - 1) + [0]


def test_binary_tree_is_open_mpis():
    """Open MPI's picture for 7 ranks (coll_base_topo.c): 0 -> 1, 2; 1 -> 3, 5; 2 -> 4, 6."""
    tree = {r: binary_tree(r, 0, 7) for r in range(7)}
    assert tree == {
        0: (None, [1, 2]),
        1: (0, [3, 5]),
        2: (0, [4, 6]),
        3: (1, []),
        4: (2, []),
        5: (1, []),
        6: (2, []),
    }
    shifted = binary_tree(4, 3, 7)  # rooted at 3: shifted rank 1
    assert shifted == (3, [6, 1])


@pytest.mark.parametrize("size", range(1, 10))
@pytest.mark.parametrize("segment_bytes", [8, 64, 4096])
def test_split_binary_bcast_delivers_each_byte_once_to_each_rank(size, segment_bytes):
    """The halves go down the two subtrees and are swapped: every rank but the root receives
    the n floats once, and the bytes sent are the bytes received (4096-byte segments: longer
    than a half, the pipeline instead)."""
    for root in {0, size - 1}:
        run = _bcast(split_binary_bcast, 101, root, size, segment_bytes=segment_bytes)
        assert run.received == [0 if r == root else 404 for r in range(size)]
        assert sum(run.sent) == sum(run.received)


@pytest.mark.parametrize("library", ["mpich", "openmpi"])
@pytest.mark.parametrize("nbytes", [100, 2048, 12288, 400_000, 600_000, 4 << 20])
@pytest.mark.parametrize("size", [2, 8, 12, 16, 64])
def test_every_picked_broadcast_runs(library, nbytes, size):
    """Whatever a library picks at this size and rank count is a program that delivers."""
    algorithm, segment_bytes = bcast_algorithm(library, nbytes, size)
    n = nbytes // 4 // 64  # the same shape of choice, a smaller buffer to run
    _bcast(BCASTS[algorithm], n, 0, size, segment_bytes=max(1, segment_bytes // 64), tag=0)
