"""Gossip SGD: decentralised training, each node averaging with its neighbours through a matrix.

Decentralised SGD in the form of Koloskova et al. 2020 (a unified theory of decentralised SGD,
covering D-PSGD of Lian et al. 2017): every step node i computes its gradient g_i at its own
weights x_i and takes its local optimizer step, then exchanges weights with its neighbours in the
round's graph and mixes them with the doubly stochastic matrix W of ``--topology`` and
``--mixing``: ``x_i <- W_ii x_i + sum_j W_ij x_j``, peers in increasing rank order, so every
backend adds in the same order. On the complete graph (W = J/n) this is allreduce SGD, and with
``--local-steps P`` Local-SGD, for SGD and momentum. With ``--gossip grad`` the nodes mix
gradients instead and step with the mixed one.
With ``--local-steps P`` the exchange happens every P steps (Local-SGD over gossip). Optimizer
state stays on each node; the models differ between exchanges, so evaluation averages them and
records their consensus distance.

Bytes per node per exchange: ``4 * params`` to each neighbour of the round.
"""

import numpy as np

from algorithms.ops import Compute, Exchange

MIX = 3


def gossip_sgd(node):
    """The program of ``--algorithm gossip``.

    Yields Compute, Exchange (every ``--local-steps`` steps) and Evaluate (collective, of the
    average model).
    Returns the node's final weights, (params,) float32.
    """
    params, cfg = node.model.params, node.cfg
    mixing = _Mixing(node.schedule, node.rank, params)
    for step in node.steps():
        loss, grad = yield Compute(node.model.loss_and_gradient, (step.X, step.y),
                                   samples=len(step.y))
        exchange = step.iteration % cfg.local_steps == 0 or step.iteration == node.total_steps
        if exchange and cfg.gossip == "grad":
            yield from mixing.mix(grad)
        node.optimizer.step(params, grad)
        if exchange and cfg.gossip == "weights":
            yield from mixing.mix(params)
        node.end_step(step, loss)
        yield from node.maybe_evaluate(step, average=True)
    return params


class _Mixing:
    """One node's side of the gossip rounds: receive buffers per peer, the round counter."""

    def __init__(self, schedule, rank, like):
        self.schedule, self.rank, self.round = schedule, rank, 0
        self.buffers, self.scratch = {}, np.empty_like(like)

    def mix(self, x):
        """Replace x, in place, by ``W_ii x + sum_j W_ij x_j`` over this round's peers.

        Yields one Exchange; gets back the peers' vectors.
        """
        peers = self.schedule.neighbours(self.rank, self.round)
        for peer in peers:
            self.buffers.setdefault(peer, np.empty_like(x))
        received = yield Exchange(dict.fromkeys(peers, x),
                                  {peer: self.buffers[peer] for peer in peers}, tag=MIX)
        x *= self.schedule.self_weight(self.rank, self.round)
        for peer, weight in peers.items():
            np.multiply(received[peer], weight, out=self.scratch)
            x += self.scratch
        self.round += 1
