"""The node: all a node program is handed (rank, size, data shard, model, optimizer, schedule).

A node program never touches the outside world; all it knows comes in through its `Node`. The
backend builds the node and installs one hook, ``on_step_end``, through which step boundaries reach
the backend's time accounting without the program having to say anything about them.
"""

import functools
import math
from dataclasses import dataclass

import numpy as np

from twinsgd.programs.compression import make_codec
from twinsgd.programs.ops import Evaluate
from twinsgd.programs.streams import CompressedStream


@dataclass(slots=True)
class Step:
    """One training step of one node.

    Attributes
    ----------
    epoch : int
        0-based pass over the training set.
    iteration : int
        1-based count of this node's steps over the whole run.
    X : (b, H, W, C) float32, or None for a node that holds no shard (a server that only serves)
        The node's batch for this step.
    y : (b,) int64, or None
        Its labels.
    last_in_epoch : bool
        True on the epoch's final step.
    last_in_run : bool
        True on the node's final step (or final update, for a server): it is evaluated.
    """

    epoch: int
    iteration: int
    X: np.ndarray | None
    y: np.ndarray | None
    last_in_epoch: bool
    last_in_run: bool


class Node:
    """What a node program gets.

    Parameters
    ----------
    rank, size : int
        This process's rank and the number of ranks (MPI's ``COMM_WORLD``).
    cfg : run.config.RunConfig
        Batch size (per node), epochs or iterations, evaluation period, seed, algorithm options.
    dataset : data.Dataset
        The training and test sets (every node holds the whole set and reads its own shard).
    model : models.Model
        The node's model; ``model.params`` is the flat float32 weight buffer.
    optimizer
        Updates ``model.params`` in place from a gradient.
    shard, shards : int or None
        Which of how many data shards this node trains on (default: ``rank`` of ``size``).
    computes : bool
        False for a node that computes no gradients (a parameter server without
        ``--server-computes``): it follows the same schedule without reading data.
    """

    def __init__(
        self, rank, size, cfg, dataset, model, optimizer, shard=None, shards=None, computes=True
    ):
        self.rank, self.size, self.cfg = rank, size, cfg
        self.dataset, self.model, self.optimizer = dataset, model, optimizer
        self.shard = rank if shard is None else shard
        self.shards = size if shards is None else shards
        self.computes = computes
        self.owned = slice(None)  # the part of the weights this node updates (sharded servers)
        self.schedule = None  # gossip: the topology's `topologies.Schedule` of partners and weights
        self.servers = range(0)  # parameter server: every server rank
        self.slices = []  # ... the slice of the weights each shard s of the servers owns
        self.replicas_of = []  # ... and the ranks that hold shard s (its replicas)
        self.reporter = 0  # the rank that evaluates and writes the run's summary files
        self.codec = None if cfg.compress == "none" else make_codec(cfg.compress)  # to decode
        self._updates_per_step = 1  # a server counting every push sets it (see `updates`)
        self.on_step_end = lambda step, loss, staleness: None  # the backend's time accounting
        self.pending_losses = []  # training losses since the last evaluation
        self.start_iteration = 0  # steps already taken (a resumed run: its checkpoint's)
        self.streams = []  # the compressed streams of its program, in the order it made them
        self.restored_residuals = {}  # stream number -> error-feedback residual to resume with
        self.checkpointer = None  # an run.checkpoint.Checkpointer under --checkpoint-every

    @functools.cached_property
    def rng(self):
        """The node's own randomness (compression's random rounding), made on first use: 20 us a
        node, a fifth of the start-up of a 10,000-node simulation that never draws from it."""
        return np.random.default_rng([self.cfg.seed, self.rank])

    @property
    def steps_per_epoch(self):
        """Steps every node takes per epoch: ``n_train // (shards * batch_size)``.

        Every node takes the same number, so synchronous algorithms stay in lockstep; the few
        samples past the last whole global batch are left out of that epoch (the next epoch
        reshuffles).
        """
        return self.dataset.n_train // (self.shards * self.cfg.batch_size)

    @property
    def total_steps(self):
        """Steps of the whole run: ``--iterations`` if given, else epochs x steps per epoch."""
        return self.cfg.iterations or self.cfg.epochs * self.steps_per_epoch

    @property
    def last_iteration(self):
        """The iteration number of this node's final step (or final update, for a server)."""
        return self.total_steps * self._updates_per_step

    def steps(self):
        """Yield this node's `Step`s in order, epoch by epoch, over its shard.

        Batch k of shard r is ``shard[k*b:(k+1)*b]`` with ``shard = perm[r::shards]``, so the
        batches of all shards at step k together are exactly batch k (of size ``shards*b``) of a
        one-node run with the same seed.

        A ghost data set (`programs.ghost`: sizes, no values) has one shard for every epoch and
        batches all alike, so they are made once: a 10,000-node ghost run takes a step an epoch,
        and the shard and batch made afresh each step cost 5,400 of the 49,600 instructions of
        a closed-form node-step (2026-12-03).
        """
        b, per_epoch, total = self.cfg.batch_size, self.steps_per_epoch, self.total_steps
        dataset, computes = self.dataset, self.computes
        alike = getattr(dataset, "ghost", False)
        X = y = mine = None  # a node that computes nothing has no batches
        # a resumed run starts after its checkpoint's step
        for iteration in range(self.start_iteration + 1, total + 1):
            epoch, k = divmod(iteration - 1, per_epoch)
            if computes and not (alike and X is not None):
                if k == 0 or mine is None:
                    mine = dataset.shard(self.shard, self.shards, epoch, self.cfg.seed)
                X, y = dataset.train_batch(mine[k * b : (k + 1) * b])
            yield Step(epoch, iteration, X, y, k == per_epoch - 1, iteration == total)

    def updates(self, per_step):
        """Yield the `Step`s (no data) of a server applying ``per_step`` updates per worker step.

        An asynchronous parameter server applies one update per push, ``per_step`` = number of
        workers: its iteration counts pushes, and its epoch is every worker's pass over its shard.
        """
        per_epoch, self._updates_per_step = self.steps_per_epoch * per_step, per_step
        last = self.last_iteration
        for iteration in range(1, last + 1):
            k = (iteration - 1) % per_epoch
            yield Step(
                (iteration - 1) // per_epoch,
                iteration,
                None,
                None,
                last_in_epoch=k == per_epoch - 1,
                last_in_run=iteration == last,
            )

    def compressor(self, n):
        """A `CompressedStream` for vectors of n elements, or None without ``--compress``."""
        if self.cfg.compress == "none":
            return None
        stream = CompressedStream(self.cfg.compress, n, self.cfg.error_feedback, self.rng)
        if len(self.streams) in self.restored_residuals:  # a resumed run's error feedback
            stream.residual[:] = self.restored_residuals[len(self.streams)]
        self.streams.append(stream)
        return stream

    def end_step(self, step, loss, staleness=0):
        """Close ``step``: its training loss (NaN if the node computed none) and the staleness of
        the gradients it applied (server updates since the weights they were computed on)."""
        self.pending_losses.append(float(loss))
        self.on_step_end(step, loss, staleness)

    def checkpoint(self, step):
        """Write this node's checkpoint after ``step`` if one is due (the backends call it when
        the step is logged, before any fault strikes)."""
        if self.checkpointer is not None:
            self.checkpointer.after(self, step)

    def evaluation_due(self, step):
        """True when ``step`` ends an evaluation period (``--eval-every`` steps, else an epoch).
        A ghost model (sizes, no values) has nothing to evaluate: only its last step is due,
        for the row that closes the run's metrics."""
        if step.last_in_run:
            return True
        every = self.cfg.eval_every
        due = step.iteration % every == 0 if every else step.last_in_epoch
        return due and not getattr(self.model, "ghost", False)  # (asked only when due: a step)

    def maybe_evaluate(self, step, average=False, collective=True, force=False):
        """Yield an `Evaluate` of the current model if one is due after ``step``.

        ``force`` evaluates even if none is due (the last step of a run cut short). ``average``
        asks the backend to evaluate the average of the nodes' models (for algorithms
        whose nodes hold different models between synchronisations); ``collective`` False for a
        node that evaluates alone (an asynchronous server), while the others go on training.

        Yields at most one Evaluate; gets back ``(test_loss, test_accuracy)``.
        Returns that pair, or None when no evaluation was due.
        """
        if not (force or self.evaluation_due(step)):
            return ()  # nothing to yield: ``yield from ()`` is None, with no generator to make
        return self._evaluate(step, average, collective, force)

    def _evaluate(self, step, average, collective, force):
        losses = [x for x in self.pending_losses if not math.isnan(x)]
        train_loss = float(np.mean(losses)) if losses else float("nan")
        self.pending_losses.clear()
        return (
            yield Evaluate(
                self.evaluate_test,
                self.model.params,
                epoch=step.epoch,
                iteration=step.iteration,
                train_loss=train_loss,
                average=average,
                collective=collective,
                final=force or step.last_in_run,
            )
        )

    def evaluate_test(self, params):
        """``(test_loss, test_accuracy)`` of weights ``params`` (params,) on the whole test set."""
        X, y = self.dataset.test_arrays()
        if params is self.model.params:
            return self.model.evaluate(X, y)
        saved = self.model.params.copy()
        self.model.params[:] = params
        try:
            return self.model.evaluate(X, y)
        finally:
            self.model.params[:] = saved
