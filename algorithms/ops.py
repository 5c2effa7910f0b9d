"""Operations: what a node program yields when it needs the world.

A node program is a generator. It does its own math and yields one of these whenever it needs a
backend to do something whose duration or effect lies outside the program: run a piece of compute
whose time matters, evaluate the model (time kept apart from training), and, from the MPI issue on,
communicate. The backend sends the result back as the value of the ``yield``.

Operations are frozen dataclasses with keyword fields (h11's events are the model); they carry data
and never act.
"""

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Compute:
    """Run ``fn(*args)`` and send back its result; its duration is compute time.

    ``samples`` (how many training samples the call processes) lets a simulated backend charge time
    from a profile (seconds per sample) instead of running ``fn``'s clock.
    """

    fn: Callable
    args: tuple = ()
    samples: int = 0


@dataclass(frozen=True)
class Evaluate:
    """Evaluate the node's model on the test set; its time is excluded from training time.

    The backend calls ``fn()`` -> ``(test_loss, test_accuracy)``, records one metrics row with
    ``epoch``, ``iteration`` and ``train_loss`` (mean loss of the steps since the last evaluation)
    and sends ``(test_loss, test_accuracy)`` back.
    """

    fn: Callable
    epoch: int
    iteration: int
    train_loss: float
    final: bool = field(default=False)
