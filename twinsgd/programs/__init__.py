"""The programs layer: operations, the node, node programs, collectives, codecs and ghosts.

`node_program` picks the generator function for a configuration and `make_node` hands each rank its
part (which data shard, whether it computes, which slice of the weights it owns, who reports), so
both backends set up a run the same way. Nothing here reads flags, files or clocks: that is the run
layer's (`twinsgd.run`).
"""

import functools

from models import cosine_schedule, make_optimizer
from topologies import make_schedule
from twinsgd.programs.allreduce import allreduce_sgd, local_sgd
from twinsgd.programs.collectives import chunk_bounds
from twinsgd.programs.ghost import GhostOptimizer
from twinsgd.programs.gossip import gossip_sgd
from twinsgd.programs.node import Node
from twinsgd.programs.parameter_server import parameter_server
from twinsgd.programs.serial import serial_sgd


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
