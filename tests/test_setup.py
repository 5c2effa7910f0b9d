"""Setting up a rank: its shard, its slice of the weights, its optimizer and schedule."""

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from models import build_model
from twinsgd.data import load_dataset, shard_indices
from twinsgd.programs import attach_optimizer, make_node
from twinsgd.programs.ghost import GhostDataset
from twinsgd.programs.node import Node
from twinsgd.run.config import RunConfig


@pytest.fixture(scope="module")
def dataset():
    return load_dataset("mnist-subset")


def _node(dataset, rank, size, **options):
    cfg = RunConfig(dataset="mnist-subset", out="unused", progress=False, **options).validate()
    node = make_node(rank, size, cfg, dataset, build_model("mlp", (28, 28, 1), 10))
    attach_optimizer(node)
    return node


def test_the_cosine_schedule_spans_an_async_servers_pushes(dataset):
    """3 workers x 10 steps = 30 server updates: at update 11 the rate is still high."""
    server = _node(dataset, 0, 4, algorithm="ps", mode="async", iterations=10)
    assert server.optimizer.schedule(11) > 0.7 and server.optimizer.schedule(30) < 0.01
    worker = _node(dataset, 1, 4, algorithm="ps", mode="async", iterations=10)
    assert worker.optimizer.schedule(10) < 0.03


def test_sharded_servers_own_balanced_slices_and_workers_share_the_data(dataset):
    nodes = [_node(dataset, rank, 5, algorithm="ps", servers=2) for rank in range(5)]
    slices = [nodes[s].owned for s in (0, 1)]
    assert slices[0].stop == slices[1].start and slices[1].stop == nodes[0].model.n_params
    assert abs((slices[0].stop - slices[0].start) - (slices[1].stop - slices[1].start)) <= 1
    assert [n.optimizer.n_params for n in nodes[:2]] == [s.stop - s.start for s in slices]
    assert [(n.computes, n.shard, n.shards) for n in nodes[2:]] == [
        (True, 0, 3),
        (True, 1, 3),
        (True, 2, 3),
    ]
    assert not nodes[0].computes and {n.reporter for n in nodes} == {2}
    assert nodes[2].steps_per_epoch == 10_000 // (3 * 100)


class _IndexData:
    """A data set whose batches are their own row numbers: what `Node.steps` reads, no more."""

    def __init__(self, n_train):
        self.n_train = n_train

    def shard(self, rank, size, epoch, seed):
        return shard_indices(self.n_train, rank, size, epoch, seed)

    def train_batch(self, indices):
        return indices, indices


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 400),
    size=st.integers(1, 6),
    batch=st.integers(1, 9),
    iterations=st.integers(1, 30),
    start=st.integers(0, 30),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_node_steps_walk_the_epochs_batch_by_batch_from_any_resumed_step(
    n, size, batch, iterations, start, seed, data
):
    """Step i (from a resumed run's start + 1 to the last) is batch k = (i-1) mod E of epoch
    (i-1) div E of the node's shard, E = n // (size x batch) steps an epoch; a ghost data set
    (its shard and batch made once) walks the same epochs and steps."""
    per_epoch = n // (size * batch)
    assume(per_epoch >= 1)
    rank = data.draw(st.integers(0, size - 1))
    cfg = SimpleNamespace(
        batch_size=batch, iterations=iterations, epochs=None, seed=seed, compress="none"
    )
    for dataset in (_IndexData(n), GhostDataset("test", n, (2, 2, 1), 10)):
        node = Node(rank, size, cfg, dataset, model=None, optimizer=None)
        node.start_iteration = start
        steps = list(node.steps())
        assert [s.iteration for s in steps] == list(range(start + 1, iterations + 1))
        for step in steps:
            epoch, k = divmod(step.iteration - 1, per_epoch)
            assert (step.epoch, step.last_in_epoch) == (epoch, k == per_epoch - 1)
            assert step.last_in_run == (step.iteration == iterations)
            assert len(step.y) == batch
            if isinstance(dataset, _IndexData):
                mine = shard_indices(n, rank, size, epoch, seed)
                np.testing.assert_array_equal(step.y, mine[k * batch : (k + 1) * batch])
