"""Parameter servers: rank 0 owns weights and optimizer, workers push gradients and pull weights.

Three ways for the server to treat the pushes (``--mode``):

- ``sync`` (the MNIST parameter-server study): every step the server receives every worker's
  gradient, averages them in rank order, takes one optimizer step and sends every worker the new
  weights. With ``--server-computes`` the server also trains on a shard of its own (the study's
  suggested fix for its idle server).
- ``async`` (Dean et al. 2012's Downpour; the Ray study): the server applies each gradient as it
  arrives, from whichever worker, and sends that worker the current weights. An iteration is one
  push. Staleness, the server updates between the weights a gradient was computed on and its
  application, is recorded per update.
- ``ssp`` (stale-synchronous parallel, Ho et al. 2013): a worker may run at most ``--staleness S``
  steps ahead of the slowest. The server averages the gradients of each step (clock) over the
  workers, in rank order, and applies the steps in order; a worker that would get more than S steps
  ahead waits for its weights. Every applied gradient is at most S updates stale, and S = 0 is the
  synchronous trajectory exactly.

Optimizer state lives on the server only; workers hold weights and no optimizer.
Bytes per worker per step: ``4 * params`` up (gradient) and ``4 * params`` down (weights).
"""

import numpy as np

from algorithms.ops import ANY_SOURCE, Compute, Recv, Send

SERVER = 0
GRADIENT, WEIGHTS = 1, 2


def parameter_server(node):
    """The program of ``--algorithm ps``: the server of ``--mode`` on rank 0, workers elsewhere."""
    if node.rank != SERVER:
        return ps_worker(node)
    return {"sync": sync_ps_server, "async": async_ps_server, "ssp": ssp_ps_server}[
        node.cfg.mode](node)


def ps_worker(node):
    """Compute a gradient, push it to the server, pull the weights; every step, in every mode.

    Yields Compute, Send (the gradient), Recv (the weights, straight into ``model.params``) and,
    in sync mode, the collective Evaluate.
    Returns the final weights, (params,) float32.
    """
    for step in node.steps():
        loss, grad = yield Compute(node.model.loss_and_gradient, (step.X, step.y),
                                   samples=len(step.y))
        yield Send(dest=SERVER, payload=grad, tag=GRADIENT)
        yield Recv(source=SERVER, tag=WEIGHTS, buf=node.model.params)
        node.end_step(step, loss)
        if node.cfg.mode == "sync":
            yield from node.maybe_evaluate(step)
    return node.model.params


def sync_ps_server(node):
    """Average the workers' gradients (and its own, with ``--server-computes``), update, send back.

    Yields Compute (only with ``--server-computes``), Recv from every worker in rank order, Send of
    the weights to every worker in rank order, Evaluate (collective).
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


def async_ps_server(node):
    """Apply each gradient as it arrives and send its worker the current weights.

    Yields Recv from any worker, Send of the weights back to it, Evaluate (the server's alone).
    Returns the final weights, (params,) float32.
    """
    params, incoming = node.model.params, np.empty_like(node.model.params)
    copy_of = dict.fromkeys(range(1, node.size), 0)  # worker -> version of the weights it holds
    for version, step in enumerate(node.updates(per_step=node.size - 1), start=1):
        worker, grad = yield Recv(source=ANY_SOURCE, tag=GRADIENT, buf=incoming)
        staleness = version - 1 - copy_of[worker]  # updates applied since its copy
        node.optimizer.step(params, grad)
        yield Send(dest=worker, payload=params, tag=WEIGHTS)
        copy_of[worker] = version
        node.end_step(step, float("nan"), staleness)
        yield from node.maybe_evaluate(step, collective=False)
    return params


def ssp_ps_server(node):
    """Average each step's gradients over the workers, apply steps in order, hold fast workers.

    A worker that has pushed c gradients is sent weights only once ``c - version <= S`` (version:
    steps applied), so the gradient it computes next is at most S updates stale when applied.

    Yields Recv from any worker, Send of the weights (possibly deferred), Evaluate (the server's).
    Returns the final weights, (params,) float32.
    """
    params, bound = node.model.params, node.cfg.staleness
    workers = range(1, node.size)
    total, incoming = np.empty_like(params), np.empty_like(params)
    clock, copy_of = dict.fromkeys(workers, 0), dict.fromkeys(workers, 0)
    pending = {}  # step c -> {worker: (gradient, version it was computed on)}
    held, version, updates = [], 0, node.updates(per_step=1)
    while version < node.total_steps or held:
        worker, grad = yield Recv(source=ANY_SOURCE, tag=GRADIENT, buf=incoming)
        pending.setdefault(clock[worker], {})[worker] = (grad.copy(), copy_of[worker])
        clock[worker] += 1
        held.append(worker)
        while len(pending.get(version, ())) == len(workers):  # step `version` is complete
            arrived = pending.pop(version)
            total.fill(0.0)
            for w in workers:
                total += arrived[w][0]
            total /= len(workers)
            node.optimizer.step(params, total)
            staleness = max(version - computed_on for _, computed_on in arrived.values())
            version += 1
            step = next(updates)
            node.end_step(step, float("nan"), staleness)
            yield from node.maybe_evaluate(step, collective=False)
        for w in [w for w in held if clock[w] - version <= bound]:
            yield Send(dest=w, payload=params, tag=WEIGHTS)
            copy_of[w] = version
            held.remove(w)
    return params
