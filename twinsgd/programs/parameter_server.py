"""Parameter servers: servers own weights and optimizer, workers push gradients and pull weights.

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

With ``--servers K`` the weights are sharded: server s (rank s < K) owns a contiguous slice,
balanced by bytes, and runs the mode's program on it alone; workers (ranks K..N-1) push each
server its slice of the gradient and pull its slice of the weights. The bytes through each server
fall as 1/K.

With ``--replicas R`` (sync mode) each shard s lives on R servers, ranks s, s+K, ..., s+(R-1)K
(the workers are ranks KR..N-1), as a replicated parameter server keeps a shard on several
machines: every replica receives every gradient, applies the same update and sends the weights;
a worker takes them from each live replica (the same bits) and, when one fails, goes on with the
others. A killed server loses no update. Bytes through the workers grow R-fold.

Optimizer state lives on the servers only (each for its slice); workers hold weights, no optimizer.
Bytes per worker per step: ``4 * params`` up (gradient) and ``4 * params`` down (weights), split
over the servers. With ``--compress`` each gradient slice goes up compressed (its own
error-feedback residual per server); the weights come back dense.
"""

import numpy as np

from twinsgd.programs.ops import ANY_SOURCE, Compute, PeerFailed, Recv, Send

GRADIENT, WEIGHTS = 1, 2


def parameter_server(node):
    """The program of ``--algorithm ps``: the ``--mode`` server on ranks below ``--servers``,
    workers on the others."""
    if node.rank not in node.servers:
        return ps_worker(node)
    return {"sync": sync_ps_server, "async": async_ps_server, "ssp": ssp_ps_server}[node.cfg.mode](
        node
    )


def ps_worker(node):
    """Compute a gradient, push each server its slice, pull every slice back; every step.

    Yields Compute, Send (gradient slices), Recv (weight slices, straight into ``model.params``)
    and Evaluate (collective in sync mode; in the other modes only if this rank reports).
    Returns the final weights, (params,) float32.
    """
    params = node.model.params
    streams = [node.compressor(len(params[part])) for part in node.slices]
    live = [list(replicas) for replicas in node.replicas_of]  # each shard's servers still up
    for step in node.steps():
        loss, grad = yield Compute(
            node.model.loss_and_gradient, (step.X, step.y), samples=len(step.y)
        )
        for shard, stream in enumerate(streams):
            part = grad[node.slices[shard]]
            payload = part if stream is None else stream.encode(part)
            for server in live[shard]:
                yield Send(dest=server, payload=payload, tag=GRADIENT)
        for shard, servers in enumerate(live):
            yield from _pull(node, shard, servers, params[node.slices[shard]])
        node.end_step(step, loss)
        if node.cfg.mode == "sync":
            yield from node.maybe_evaluate(step)
        elif node.rank == node.reporter:
            yield from node.maybe_evaluate(step, collective=False)
    return params


def _pull(node, shard, servers, buf):
    """Receive the weights of ``shard`` from each of its live ``servers`` (replicas send the
    same bits) into ``buf``; a replica that failed (`PeerFailed`) is dropped from ``servers``,
    and the run goes on while one is left. Yields Recv."""
    for server in list(servers):
        try:
            yield Recv(source=server, tag=WEIGHTS, buf=buf)
        except PeerFailed as failure:
            gone = failure.ranks
            servers[:] = [s for s in servers if s not in gone]
            if not servers:
                raise


def _workers(node):
    return range(len(node.servers), node.size)


def _gradient(node, source, incoming):
    """Receive one gradient (slice) from ``source`` into ``incoming``, decoding it if compressed.

    Yields one Recv. Returns ``(worker, incoming)``.
    """
    codec = node.codec
    worker, payload = yield Recv(
        source=source, tag=GRADIENT, buf=incoming if codec is None else None
    )
    if codec is not None:
        codec.decode(payload, out=incoming)
    return worker, incoming


def sync_ps_server(node):
    """Average the workers' gradients (and its own, with ``--server-computes``), update, send back.

    Yields Compute (only with ``--server-computes``), Recv from every worker in rank order, Send of
    the weights to every worker in rank order, Evaluate (collective).
    Returns the weights it owns, float32.
    """
    params = node.model.params[node.owned]
    total, incoming = np.empty_like(params), np.empty_like(params)
    workers = _workers(node)
    contributors = len(workers) + node.computes
    for step in node.steps():
        loss = float("nan")
        if node.computes:
            loss, grad = yield Compute(
                node.model.loss_and_gradient, (step.X, step.y), samples=len(step.y)
            )
            total[:] = grad
        else:
            total.fill(0.0)
        for worker in workers:
            yield from _gradient(node, worker, incoming)
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

    Goes on without workers that fail (`PeerFailed`, when no push can come any more): the run
    ends with the updates the others made, and a final evaluation.

    Yields Recv from any worker, Send of the weights back to it, Evaluate (if it reports).
    Returns the weights it owns, float32.
    """
    params = node.model.params[node.owned]
    incoming = np.empty_like(params)
    copy_of = dict.fromkeys(_workers(node), 0)  # worker -> version of the weights it holds
    applied = None  # the last step applied
    for version, step in enumerate(node.updates(per_step=len(copy_of)), start=1):
        try:
            worker, grad = yield from _gradient(node, ANY_SOURCE, incoming)
        except PeerFailed:  # workers failed; the others have pushed all they had: finish early
            if node.rank == node.reporter and applied and not node.evaluation_due(applied):
                yield from node.maybe_evaluate(applied, collective=False, force=True)
            break
        staleness = version - 1 - copy_of[worker]  # updates applied since its copy
        node.optimizer.step(params, grad)
        yield Send(dest=worker, payload=params, tag=WEIGHTS, buffered=True)
        copy_of[worker] = version
        node.end_step(step, float("nan"), staleness)
        applied = step
        if node.rank == node.reporter:
            yield from node.maybe_evaluate(step, collective=False)
    return params


def ssp_ps_server(node):
    """Average each step's gradients over the workers, apply steps in order, hold fast workers.

    A worker that has pushed c gradients is sent weights only once ``c - version <= S`` (version:
    steps applied), so the gradient it computes next is at most S updates stale when applied.

    Goes on without workers that fail (`PeerFailed`, when the live workers all wait on the bound):
    a step is complete when every live worker has pushed it, and averages what arrived for it
    (a failed worker's earlier pushes included), so the bound holds over the live workers.

    Yields Recv from any worker, Send of the weights (possibly deferred), Evaluate (if it reports).
    Returns the weights it owns, float32.
    """
    params, bound, workers = node.model.params[node.owned], node.cfg.staleness, _workers(node)
    total, incoming = np.empty_like(params), np.empty_like(params)
    clock, copy_of = dict.fromkeys(workers, 0), dict.fromkeys(workers, 0)
    pending = {}  # step c -> {worker: (gradient, version it was computed on)}
    held, version, updates = [], 0, node.updates(per_step=1)
    while version < node.total_steps or held:
        try:
            worker, grad = yield from _gradient(node, ANY_SOURCE, incoming)
        except PeerFailed as failure:  # go on with the live workers
            gone = failure.ranks
            workers = [w for w in workers if w not in gone]
            held = [w for w in held if w not in gone]
            if not workers:
                raise
        else:
            pending.setdefault(clock[worker], {})[worker] = (grad.copy(), copy_of[worker])
            clock[worker] += 1
            held.append(worker)
        applied = []  # (step, staleness) of the steps this push completed
        while all(w in pending.get(version, ()) for w in workers):  # step `version` is complete
            arrived = pending.pop(version)
            total.fill(0.0)
            for w in sorted(arrived):  # in rank order, not arrival order: the same sum twice
                total += arrived[w][0]
            total /= len(arrived)
            node.optimizer.step(params, total)
            applied.append((next(updates), max(version - v for _, v in arrived.values())))
            version += 1
        for w in [w for w in held if clock[w] - version <= bound]:
            yield Send(dest=w, payload=params, tag=WEIGHTS, buffered=True)
            copy_of[w] = version
            held.remove(w)
        for step, staleness in applied:
            node.end_step(step, float("nan"), staleness)
            if node.rank == node.reporter:
                yield from node.maybe_evaluate(step, collective=False)
    return params
