"""Operations, node programs, the run configuration and the run-folder writer of both backends.

`node_program` picks the generator function for a configuration and `make_node` hands each rank its
part (which data shard, whether it computes, which slice of the weights it owns, who reports), so
both backends set up a run the same way.
"""

import functools

from models import cosine_schedule, make_optimizer
from topologies import make_schedule
from twinsgd.algorithms.allreduce import allreduce_sgd, local_sgd
from twinsgd.algorithms.collectives import chunk_bounds
from twinsgd.algorithms.ghost import GhostOptimizer
from twinsgd.algorithms.gossip import gossip_sgd
from twinsgd.algorithms.node import Node
from twinsgd.algorithms.parameter_server import parameter_server
from twinsgd.algorithms.serial import serial_sgd


def node_program(cfg):
    """The node program (a generator function of one `Node`) that ``cfg`` asks for."""
    if cfg.algorithm == "ps":
        return parameter_server
    if cfg.algorithm == "allreduce":
        return local_sgd if cfg.local_steps > 1 else allreduce_sgd
    if cfg.algorithm == "gossip":
        return gossip_sgd
    return serial_sgd


def make_node(rank, size, cfg, dataset, model, optimizer=None):
    """The `Node` of ``rank`` of ``size``.

    Every rank trains on a shard, but the parameter servers (ranks ``0 .. K-1`` with
    ``--servers K``) unless ``--server-computes``; the workers' shards are then numbered from 0.
    Server s owns ``slices[s]`` of the weights, contiguous and balanced by bytes. A gossip node
    gets the ``schedule`` of its topology (TopologyError, a ValueError, for a bad one). The
    reporter, the rank that evaluates and writes the run folder's summary files, is rank 0, or
    the first worker when the weights are sharded over several servers (none holds them all).
    """
    node = Node(rank, size, cfg, dataset, model, optimizer)
    if cfg.algorithm == "gossip":
        node.schedule = _schedule(cfg.topology, size, cfg.mixing, cfg.seed)
    if cfg.algorithm == "ps":
        shards, servers = cfg.servers, cfg.servers * cfg.replicas
        bounds = chunk_bounds(model.n_params, shards)
        node.servers = range(servers)  # every server rank; shard s lives on replicas_of[s]
        node.replicas_of = [[s + j * shards for j in range(cfg.replicas)] for s in range(shards)]
        node.slices = [slice(bounds[s], bounds[s + 1]) for s in range(shards)]
        node.reporter = 0 if servers == 1 else servers
        if rank < servers:
            node.owned = node.slices[rank % shards]
        if not cfg.server_computes:
            node.shards, node.computes = size - servers, rank >= servers
            node.shard = max(rank - servers, 0)
    return node


def prepare_nodes(ranks, size, cfg, dataset, model_of, say):
    """The ready `Node` of each of ``ranks`` (of ``size``): made, ``cfg`` fitted to the data
    found, optimizer attached. Both front ends set a run up here: ``real.train`` its own rank,
    ``sim.run`` every rank (or rank 0 alone for the analytic engine).

    ``model_of(rank)`` gives a rank's model; ``say(note)`` is given each line saying what a
    default chose to fit the data (`RunConfig.fit_data`). ValueError naming the flag: a topology
    that cannot be made or read, a batch larger than a node's shard.
    """
    try:
        nodes = [make_node(rank, size, cfg, dataset, model_of(rank)) for rank in ranks]
    except ValueError as err:
        raise ValueError(f"--topology {cfg.topology}: {err}") from None
    shard = dataset.n_train // nodes[0].shards
    for note in cfg.fit_data(shard):  # before the optimizers: the lr schedule spans the steps
        say(note)
    if nodes[0].steps_per_epoch < 1:
        raise ValueError(
            f"--batch-size {cfg.batch_size} is larger than a node's shard ({shard} "
            f"samples of {dataset.name} over {nodes[0].shards} shards)"
        )
    for node in nodes:
        attach_optimizer(node)
    return nodes


@functools.lru_cache(maxsize=4)
def _schedule(topology, size, mixing, seed):
    """One `Schedule` for all nodes of a process (the simulator's 210 would build 210 graphs);
    a schedule is a pure function of round and rank, so sharing it changes nothing."""
    return make_schedule(topology, size, mixing, seed=seed)


def attach_optimizer(node):
    """Give ``node`` its optimizer: over the weights it updates (a sharded server: its slice),
    with the cosine schedule spanning its own optimizer steps (an async server: every push).
    A ghost model gets a `GhostOptimizer` (no state, no update)."""
    cfg = node.cfg
    if getattr(node.model, "ghost", False):
        node.optimizer = GhostOptimizer()
        return node.optimizer
    owned = node.model.params[node.owned]
    node.optimizer = make_optimizer(cfg.optimizer, owned.size, lr=cfg.lr, momentum=cfg.momentum)
    if cfg.lr_schedule == "cosine":
        steps = node.total_steps * updates_per_step(cfg, node.size, node.rank)
        node.optimizer.schedule = cosine_schedule(max(steps, 1))
    return node.optimizer


def updates_per_step(cfg, size, rank):
    """Iterations of ``rank`` per worker step: an asynchronous server counts every push."""
    if cfg.algorithm == "ps" and cfg.mode == "async" and rank < cfg.servers:
        return size - cfg.servers
    return 1
