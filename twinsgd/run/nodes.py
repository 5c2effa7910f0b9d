"""The front ends' shared set-up of a run's nodes: ``real.train`` makes its own rank's, ``sim.run``
every rank's, the same way."""

from twinsgd.programs import attach_optimizer, make_node


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
