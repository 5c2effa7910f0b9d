"""Setting up a rank: its shard, its slice of the weights, its optimizer and schedule."""

import pytest

from models import build_model
from twinsgd.data import load_dataset
from twinsgd.programs import attach_optimizer, make_node
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
