"""Gossip SGD: decentralised training, each node averaging with its neighbours through a matrix.

Decentralised SGD in the form of Koloskova et al. 2020 (a unified theory of decentralised SGD,
covering D-PSGD of Lian et al. 2017): every step node i computes its gradient g_i at its own
weights x_i and takes its local optimizer step, then exchanges weights with its neighbours in the
round's graph and mixes them with the doubly stochastic matrix W of ``--topology`` and
``--mixing``: ``x_i <- W_ii x_i + sum_j W_ij x_j``, peers in increasing rank order, so every
backend adds in the same order. On the complete graph (W = J/n) this is allreduce SGD, and with
``--local-steps P`` Local-SGD, for SGD and momentum. With ``--gossip grad`` the nodes mix
gradients instead and step with the mixed one. With ``--local-steps P`` the exchange happens
every P steps (Local-SGD over gossip). Optimizer state stays on each node; the models differ
between exchanges, so evaluation averages them and records their consensus distance.

With ``--compress``: gradients (``--gossip grad``) go compressed and are mixed decoded; weights
go as CHOCO-SGD has them (Koloskova et al. 2019), kept per edge so that partners may change from
round to round (``rotating``): for each partner j, node i keeps ``out[j]``, the copy of x_i that j
holds, and ``in[j]``, its own copy of x_j. It sends ``Q(x_i - out[j])``, both ends add it to
their copy, and ``x_i += gamma * sum_j W_ij (in[j] - out[j])`` (``--consensus-step`` gamma).
The copies start at the common initial weights. On a static topology every ``out[j]`` receives
the same corrections, so this is CHOCO's single public copy; the sum of the models is kept.

Bytes per node per exchange: ``4 * params`` (or the message's ``nbytes``) to each neighbour.
"""

import numpy as np

from twinsgd.programs.ops import Compute, Exchange

MIX = 3


def gossip_sgd(node):
    """The program of ``--algorithm gossip``.

    Yields Compute, Exchange (every ``--local-steps`` steps) and Evaluate (collective, of the
    average model).
    Returns the node's final weights, (params,) float32.
    """
    params, cfg = node.model.params, node.cfg
    mixing = _Mixing(node, params)
    for step in node.steps():
        loss, grad = yield Compute(
            node.model.loss_and_gradient, (step.X, step.y), samples=len(step.y)
        )
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
    """One node's side of the gossip rounds: the round counter, receive buffers, and under
    ``--compress`` its stream and (weights) the per-edge copies of CHOCO.
    """

    def __init__(self, node, like):
        # the rounds before a resumed run's checkpoint, taken at a synchronisation step
        self.round = node.start_iteration // node.cfg.local_steps
        self.schedule, self.rank = node.schedule, node.rank
        self.buffers, self.scratch = {}, np.empty_like(like)
        self.stream, self.step_size = node.compressor(like.size), node.cfg.consensus_step
        self.choco = self.stream is not None and node.cfg.gossip == "weights"
        self.initial = like.copy() if self.choco else None
        self.copy_out, self.copy_in = {}, {}  # partner -> my weights as it sees them / its weights

    def mix(self, x):
        """Mix x with this round's peers, in place: ``W_ii x + sum_j W_ij x_j`` (or CHOCO's step).

        Yields one Exchange; gets back the peers' vectors (or messages).
        """
        peers = self.schedule.neighbours(self.rank, self.round)
        if self.choco:
            yield from self._choco(x, peers)
        elif self.stream is not None:
            sent = self.stream.encode(x)
            received = yield Exchange(dict.fromkeys(peers, sent), dict.fromkeys(peers), tag=MIX)
            x *= self.schedule.self_weight(self.rank, self.round)
            for peer, weight in peers.items():
                self.stream.codec.decode(received[peer], out=self.scratch)
                self.scratch *= weight
                x += self.scratch
        else:
            for peer in peers:
                self.buffers.setdefault(peer, np.empty_like(x))
            received = yield Exchange(
                dict.fromkeys(peers, x), {peer: self.buffers[peer] for peer in peers}, tag=MIX
            )
            x *= self.schedule.self_weight(self.rank, self.round)
            for peer, weight in peers.items():
                np.multiply(received[peer], weight, out=self.scratch)
                x += self.scratch
        self.round += 1

    def _choco(self, x, peers):
        """CHOCO-gossip per edge: send Q(x - out[j]), update both copies, step towards in[j]."""
        codec, sent = self.stream.codec, {}
        for peer in peers:
            out = self.copy_out.setdefault(peer, self.initial.copy())
            self.copy_in.setdefault(peer, self.initial.copy())
            np.subtract(x, out, out=self.scratch)
            sent[peer] = self.stream.encode(self.scratch)
        received = yield Exchange(sent, dict.fromkeys(peers), tag=MIX)
        for peer, weight in peers.items():
            codec.add_into(sent[peer], self.copy_out[peer])
            codec.add_into(received[peer], self.copy_in[peer])
            np.subtract(self.copy_in[peer], self.copy_out[peer], out=self.scratch)
            self.scratch *= self.step_size * weight
            x += self.scratch
