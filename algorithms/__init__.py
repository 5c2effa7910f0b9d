"""Operations, node programs, the run configuration and the run-folder writer of both backends.

`node_program` picks the generator function for a configuration and `make_node` hands each rank its
part (which data shard, whether it computes), so both backends set up a run the same way.
"""

from algorithms.allreduce import allreduce_sgd, local_sgd
from algorithms.node import Node
from algorithms.parameter_server import SERVER, parameter_server
from algorithms.serial import serial_sgd


def node_program(cfg):
    """The node program (a generator function of one `Node`) that ``cfg`` asks for."""
    if cfg.algorithm == "ps":
        return parameter_server
    if cfg.algorithm == "allreduce":
        return local_sgd if cfg.local_steps > 1 else allreduce_sgd
    return serial_sgd


def make_node(rank, size, cfg, dataset, model, optimizer):
    """The `Node` of ``rank``: every rank trains on a shard, but a parameter server that does not
    compute; the workers' shards are then numbered from 0."""
    if cfg.algorithm == "ps" and not cfg.server_computes:
        if rank == SERVER:
            return Node(rank, size, cfg, dataset, model, optimizer, shard=0, shards=size - 1,
                        computes=False)
        return Node(rank, size, cfg, dataset, model, optimizer, shard=rank - 1, shards=size - 1)
    return Node(rank, size, cfg, dataset, model, optimizer)
