"""Synchronous parameter server: rank 0 owns the weights and the optimizer, workers send gradients.

As in the MNIST parameter-server study: every step each worker computes a gradient on its own shard
and sends it to the server; the server averages the gradients (in rank order, so the sum is the same
in every backend), takes one optimizer step and sends every worker the new weights. With
``--server-computes`` the server also trains on a shard of its own (the study's suggested fix for
its idle server). Optimizer state lives on the server only; workers hold weights, no optimizer.

Bytes per worker per step: ``4 * params`` up (gradient) and ``4 * params`` down (weights).
"""

import numpy as np

from algorithms.ops import Compute, Recv, Send

SERVER = 0
GRADIENT, WEIGHTS = 1, 2


def sync_ps(node):
    """The program of ``--algorithm ps --mode sync``: the server on rank 0, workers elsewhere."""
    return sync_ps_server(node) if node.rank == SERVER else sync_ps_worker(node)


def sync_ps_worker(node):
    """Compute a gradient, push it to the server, pull the new weights; every step.

    Yields Compute, Send (the gradient), Recv (the weights, straight into ``model.params``).
    Returns the final weights, (params,) float32.
    """
    for step in node.steps():
        loss, grad = yield Compute(node.model.loss_and_gradient, (step.X, step.y),
                                   samples=len(step.y))
        yield Send(dest=SERVER, payload=grad, tag=GRADIENT)
        yield Recv(source=SERVER, tag=WEIGHTS, buf=node.model.params)
        node.end_step(step, loss)
        yield from node.maybe_evaluate(step)
    return node.model.params


def sync_ps_server(node):
    """Average the workers' gradients (and its own, with ``--server-computes``), update, send back.

    Yields Compute (only with ``--server-computes``), Recv from every worker in rank order, Send of
    the weights to every worker in rank order.
    Returns the final weights, (params,) float32.
    """
    params = node.model.params
    total, incoming = np.empty_like(params), np.empty_like(params)
    workers = range(1, node.size)
    contributors = len(workers) + node.computes
    for step in node.steps():
        loss = float("nan")
        if node.computes:
            loss, grad = yield Compute(node.model.loss_and_gradient, (step.X, step.y),
                                       samples=len(step.y))
            total[:] = grad
        else:
            total.fill(0.0)
        for worker in workers:
            yield Recv(source=worker, tag=GRADIENT, buf=incoming)
            total += incoming
        total /= contributors
        node.optimizer.step(params, total)
        for worker in workers:
            yield Send(dest=worker, payload=params, tag=WEIGHTS)
        node.end_step(step, loss)
        yield from node.maybe_evaluate(step)
    return params
