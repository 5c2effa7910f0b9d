"""The node: all a node program is handed (rank, size, data shard, model, optimizer, schedule).

A node program never touches the outside world; all it knows comes in through its `Node`. The
backend builds the node and installs one hook, ``on_step_end``, through which step boundaries reach
the backend's time accounting without the program having to say anything about them.
"""

from dataclasses import dataclass

import numpy as np

from algorithms.ops import Evaluate
from data import shard_indices


@dataclass
class Step:
    """One training step of one node.

    Attributes
    ----------
    epoch : int
        0-based pass over the training set.
    iteration : int
        1-based count of this node's steps over the whole run.
    X : (b, H, W, C) float32
        The node's batch for this step.
    y : (b,) int64
        Its labels.
    last_in_epoch : bool
        True on the epoch's final step.
    """

    epoch: int
    iteration: int
    X: np.ndarray
    y: np.ndarray
    last_in_epoch: bool


class Node:
    """What a node program gets.

    Parameters
    ----------
    rank, size : int
        This node's index and the number of nodes taking part in training.
    cfg : algorithms.config.RunConfig
        Batch size (per node), epochs or iterations, evaluation period, seed.
    dataset : data.Dataset
        The training and test sets (every node holds the whole set and reads its own shard).
    model : models.Model
        The node's model; ``model.params`` is the flat float32 weight buffer.
    optimizer
        Updates ``model.params`` in place from a gradient.
    """

    def __init__(self, rank, size, cfg, dataset, model, optimizer):
        self.rank, self.size, self.cfg = rank, size, cfg
        self.dataset, self.model, self.optimizer = dataset, model, optimizer
        self.on_step_end = lambda step, loss: None  # the backend's hook for time accounting
        self._losses = []

    @property
    def steps_per_epoch(self):
        """Steps every node takes per epoch: ``n_train // (size * batch_size)``.

        Every node takes the same number, so synchronous algorithms stay in lockstep; the few
        samples past the last whole global batch are left out of that epoch (the next epoch
        reshuffles).
        """
        return self.dataset.n_train // (self.size * self.cfg.batch_size)

    @property
    def total_steps(self):
        """Steps of the whole run: ``--iterations`` if given, else epochs x steps per epoch."""
        return self.cfg.iterations or self.cfg.epochs * self.steps_per_epoch

    def steps(self):
        """Yield this node's `Step`s in order, epoch by epoch, over its shard.

        Batch k of node r is ``shard[k*b:(k+1)*b]`` with ``shard = perm[r::size]``, so the batches
        of all nodes at step k together are exactly batch k (of size ``size*b``) of a one-node run.
        """
        b, iteration, per_epoch = self.cfg.batch_size, 0, self.steps_per_epoch
        for epoch in range(-(-self.total_steps // per_epoch)):
            shard = shard_indices(self.dataset.n_train, self.rank, self.size, epoch, self.cfg.seed)
            for k in range(per_epoch):
                iteration += 1
                X, y = self.dataset.train_batch(shard[k * b:(k + 1) * b])
                yield Step(epoch, iteration, X, y, last_in_epoch=k == per_epoch - 1)
                if iteration == self.total_steps:
                    return

    def end_step(self, step, loss):
        """Close ``step`` (its training loss in hand) for the backend's accounting."""
        self._losses.append(float(loss))
        self.on_step_end(step, loss)

    def evaluation_due(self, step):
        """True when ``step`` ends an evaluation period (``--eval-every`` steps, else an epoch)."""
        if step.iteration == self.total_steps:
            return True
        if self.cfg.eval_every:
            return step.iteration % self.cfg.eval_every == 0
        return step.last_in_epoch

    def maybe_evaluate(self, step):
        """Yield an `Evaluate` of the current model if one is due after ``step``.

        Yields at most one Evaluate; gets back ``(test_loss, test_accuracy)``.
        Returns that pair, or None when no evaluation was due.
        """
        if not self.evaluation_due(step):
            return None
        train_loss = float(np.mean(self._losses)) if self._losses else float("nan")
        self._losses.clear()
        return (yield Evaluate(self.evaluate_test, epoch=step.epoch, iteration=step.iteration,
                               train_loss=train_loss, final=step.iteration == self.total_steps))

    def evaluate_test(self):
        """``(test_loss, test_accuracy)`` of the node's current model on the whole test set."""
        X, y = self.dataset.test_arrays()
        return self.model.evaluate(X, y)
