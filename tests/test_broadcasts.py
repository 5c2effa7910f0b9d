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
    bmtree,
    knomial_tree,
    linear_bcast,
    pipeline_bcast,
    scatter_allgather_bcast,
    scatter_blocks,
    split_binary_bcast,
)
from twinsgd.programs.mpi_choices import OPENMPI_41_BCAST, bcast_algorithm

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


@pytest.mark.parametrize("library", ["mpich", "openmpi", "openmpi-4.1"])
@pytest.mark.parametrize("nbytes", [100, 2048, 12288, 400_000, 600_000, 4 << 20])
@pytest.mark.parametrize("size", [2, 3, 6, 8, 12, 16, 24, 64])
def test_every_picked_broadcast_runs(library, nbytes, size):
    """Whatever a library picks at this size and rank count is a program that delivers."""
    algorithm, segment_bytes = bcast_algorithm(library, nbytes, size)
    n = nbytes // 4 // 64  # the same shape of choice, a smaller buffer to run
    segment_bytes = max(1, segment_bytes // 64) if segment_bytes else 0  # 0: unsegmented
    _bcast(BCASTS[algorithm], n, 0, size, segment_bytes=segment_bytes, tag=0)


@pytest.mark.parametrize("tree", [bmtree, knomial_tree, binary_tree])
@pytest.mark.parametrize("size", range(1, 40))
def test_open_mpis_trees_span_the_ranks_once(tree, size):
    """Every rank but the root has one parent, which lists it among its children; from the
    root every rank is reached."""
    for root in {0, size // 2, size - 1}:
        links = {rank: tree(rank, root, size) for rank in range(size)}
        assert links[root][0] is None
        for rank, (parent, children) in links.items():
            assert all(links[child][0] == rank for child in children)
            if rank != root:
                assert rank in links[parent][1]
        reached, frontier = {root}, [root]
        while frontier:
            frontier = [c for r in frontier for c in links[r][1]]
            reached.update(frontier)
        assert reached == set(range(size))


def test_trees_depth_as_open_mpis():
    """Open MPI's binomial tree of 2^k ranks is k deep, its 4-nomial one log4 p deep, and
    the root's children come as its source lists them (nearest first; farthest first)."""

    def depth(tree, rank, size):
        parent = tree(rank, 0, size)[0]
        return 0 if parent is None else 1 + depth(tree, parent, size)

    assert max(depth(bmtree, r, 64) for r in range(64)) == 6
    assert max(depth(knomial_tree, r, 64) for r in range(64)) == 3
    assert bmtree(0, 0, 16)[1] == [1, 2, 4, 8]
    assert knomial_tree(0, 0, 16)[1] == [4, 8, 12, 1, 2, 3]
    assert knomial_tree(5, 1, 16) == (1, [6, 7, 8])  # shifted 4: under 0, over 5, 6, 7
    assert knomial_tree(3, 1, 16) == (1, [])  # shifted 2: a leaf


def test_linear_bcast_root_sends_to_each_in_rank_order():
    """The root's messages go out one after another: the last rank has the buffer after
    p - 1 messages (the lockstep driver's synchronous sends)."""
    run = _bcast(linear_bcast, 64, 2, 5)
    assert run.sent == [0, 0, 4 * 256, 0, 0]
    assert run.received == [256, 256, 0, 256, 256]
    assert max(run.finished) == pytest.approx(4 * (ALPHA + 256 / BETA))


def test_open_mpi_41_bcast_table_as_its_source():
    """Spot checks of v4.1.x ompi_coll_tuned_bcast_intra_dec_fixed, each bound exclusive."""
    assert OPENMPI_41_BCAST[-1][0] == math.inf
    cases = [
        (2, 31, "pipeline"), (2, 32, "binary"), (3, 1023, "knomial"), (3, 1024, "linear"),
        (3, 262144, "linear"), (3, 524288, "bmtree"), (4, 8191, "bmtree"),
        (7, 1048575, "linear"), (7, 1048576, "pipeline"), (8, 7, "knomial"),
        (15, 16384, "bmtree"), (15, 32768, "linear"), (16, 4095, "knomial"),
        (31, 1048575, "bmtree"), (32, 2048, "knomial"), (127, 1, "knomial"),
        (128, 1, "bmtree"), (200, 20000, "linear"), (300, 20000, "split-binary"),
        (1500, 524288, "scatter-ring"), (2048, 262144, "scatter-recursive-doubling"),
        (5000, 10000, "binary"),
    ]  # fmt: skip
    for size, nbytes, name in cases:
        assert bcast_algorithm("openmpi-4.1", nbytes, size) == (name, 0), (size, nbytes)
