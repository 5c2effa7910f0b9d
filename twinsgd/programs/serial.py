"""The one-node program: minibatch SGD, the baseline every distributed program is held against."""

from twinsgd.programs.ops import Compute


def serial_sgd(node):
    """Minibatch training on one node: gradient, update, evaluate when due.

    Yields Compute (gets back ``(loss, grad)``, grad (params,) float32) and, when an evaluation is
    due, Evaluate (gets back ``(test_loss, test_accuracy)``).
    Returns the final flat weights, shape (params,) float32.
    """
    for step in node.steps():
        loss, grad = yield Compute(
            node.model.loss_and_gradient, (step.X, step.y), samples=len(step.y)
        )
        node.optimizer.step(node.model.params, grad)
        node.end_step(step, loss)
        yield from node.maybe_evaluate(step)
    return node.model.params
