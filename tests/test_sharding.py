"""shard_indices: disjoint seeded shards whose per-rank batches make up the 1-node run's batches."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twinsgd.data import shard_indices

seeds = st.integers(0, 2**63 - 1)


def all_shards(n, size, epoch, seed):
    return [shard_indices(n, rank, size, epoch, seed) for rank in range(size)]


def test_pinned_values():
    # The permutation scheme is part of the contract: real and simulated runs, and runs made with
    # older versions, must deal out the same examples. Changing it changes every result.
    assert shard_indices(10, 0, 1, 0, 0).tolist() == [4, 6, 2, 7, 3, 5, 9, 0, 8, 1]
    assert shard_indices(10, 1, 3, 0, 0).tolist() == [6, 3, 0]  # perm[1::3]
    assert shard_indices(10, 0, 1, 1, 0).tolist() != [4, 6, 2, 7, 3, 5, 9, 0, 8, 1]


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 600), size=st.integers(1, 24), epoch=st.integers(0, 10), seed=seeds)
def test_shards_are_disjoint_and_cover_the_range(n, size, epoch, seed):
    shards = all_shards(n, size, epoch, seed)
    union = np.concatenate(shards)
    assert len(union) == n  # disjoint: no index twice ...
    np.testing.assert_array_equal(np.sort(union), np.arange(n))  # ... and every index once
    lengths = [len(s) for s in shards]
    assert max(lengths) - min(lengths) <= 1
    assert all(s.dtype == np.int64 and s.ndim == 1 for s in shards)


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 600),
    size=st.integers(1, 16),
    batch=st.integers(1, 12),
    epoch=st.integers(0, 5),
    seed=seeds,
)
def test_rank_batches_together_are_the_one_node_batch(n, size, batch, epoch, seed):
    one_node = shard_indices(n, 0, 1, epoch, seed)
    shards = all_shards(n, size, epoch, seed)
    big = size * batch
    for k in range(n // big):
        together = np.concatenate([s[k * batch : (k + 1) * batch] for s in shards])
        np.testing.assert_array_equal(np.sort(together), np.sort(one_node[k * big : (k + 1) * big]))


@settings(max_examples=50, deadline=None)
@given(size=st.integers(1, 8), epoch=st.integers(0, 100), seed=seeds)
def test_epochs_reshuffle(size, epoch, seed):
    n = 200  # two equal permutations of 200 items: probability 1/200!
    for rank in range(size):
        this = shard_indices(n, rank, size, epoch, seed)
        np.testing.assert_array_equal(this, shard_indices(n, rank, size, epoch, seed))
        assert not np.array_equal(this, shard_indices(n, rank, size, epoch + 1, seed))
        assert not np.array_equal(this, shard_indices(n, rank, size, epoch, seed + 1))


def test_more_ranks_than_examples():
    shards = all_shards(3, 5, 0, 7)
    assert [len(s) for s in shards] == [1, 1, 1, 0, 0]
    assert sorted(np.concatenate(shards).tolist()) == [0, 1, 2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((10, 0, 0, 0, 0), "size must be >= 1, got 0"),
        ((10, 2, 2, 0, 0), r"rank must be in 0..1, got 2"),
        ((10, -1, 2, 0, 0), r"rank must be in 0..1, got -1"),
        ((-1, 0, 1, 0, 0), "n, epoch and seed must be >= 0"),
        ((10, 0, 1, -1, 0), "n, epoch and seed must be >= 0"),
        ((10, 0, 1, 0, -5), "n, epoch and seed must be >= 0"),
        ((10.0, 0, 1, 0, 0), "n must be an integer, got 10.0"),
        ((10, True, 2, 0, 0), "rank must be an integer, got True"),
    ],
)
def test_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        shard_indices(*args)


def test_numpy_integers_are_accepted():
    got = shard_indices(np.int64(10), np.int32(1), np.int64(3), np.uint8(0), np.int64(0))
    assert got.tolist() == [6, 3, 0]  # perm[1::3]
