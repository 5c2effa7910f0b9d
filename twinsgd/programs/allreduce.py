"""Data-parallel SGD over allreduce, and Local-SGD (average the weights every P local steps)."""

import numpy as np

from twinsgd.programs.ops import Allreduce, Compute


def allreduce_sgd(node):
    """Data-parallel SGD: one gradient allreduce (mean) per step, then the same update everywhere.

    Every node keeps its own optimizer state; since all of them see the same averaged gradient, the
    states and weights stay identical. Bytes per node per step with ``--allreduce ring``:
    ``2(N-1)/N * 4 * params``.

    With ``--compress`` the gradients travel compressed: every rank's message goes to every rank
    (Allgather, since sparse messages cannot be summed on the way) and each decodes the sum.

    Yields Compute and Allreduce (or Allgather); gets back the gradient and the averaged gradient.
    Returns the final weights, (params,) float32.
    """
    compressor = node.compressor(node.model.n_params)
    for step in node.steps():
        loss, grad = yield Compute(
            node.model.loss_and_gradient, (step.X, step.y), samples=len(step.y)
        )
        if compressor is None:
            grad = yield Allreduce(grad, op="mean", algo=node.cfg.allreduce)
        else:
            yield from compressor.mean_over_ranks(grad, node.size)
        node.optimizer.step(node.model.params, grad)
        node.end_step(step, loss)
        yield from node.maybe_evaluate(step)
    return node.model.params


def local_sgd(node):
    """Local-SGD (Stich 2019; Lin et al. 2020): P local steps, then average the weights.

    Each node steps its own optimizer on its own gradients; after every ``--local-steps`` P steps
    (and after the last step) the weights are averaged by allreduce. Optimizer state stays local.
    With P=1 and SGD or momentum this is the trajectory of `allreduce_sgd` (averaging is linear);
    with Adam it is not (each node normalises by its own gradient moments).

    With ``--compress`` what travels is each rank's change of weights since the last average,
    compressed (Allgather); the new weights are the old average plus the mean decoded change.

    Yields Compute and, every P steps, Allreduce of the weights (or Allgather of the changes).
    Returns the final weights, (params,) float32.
    """
    period, params = node.cfg.local_steps, node.model.params
    compressor = node.compressor(node.model.n_params)
    anchor = params.copy()  # the weights of the last average
    change = np.empty_like(params)
    for step in node.steps():
        loss, grad = yield Compute(
            node.model.loss_and_gradient, (step.X, step.y), samples=len(step.y)
        )
        node.optimizer.step(params, grad)
        if step.iteration % period == 0 or step.iteration == node.total_steps:
            if compressor is None:
                yield Allreduce(params, op="mean", algo=node.cfg.allreduce)
            else:
                np.subtract(params, anchor, out=change)
                yield from compressor.mean_over_ranks(change, node.size)
                np.add(anchor, change, out=params)
                anchor[:] = params
        node.end_step(step, loss)
        yield from node.maybe_evaluate(step, average=True)
    return params
