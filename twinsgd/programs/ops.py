"""Operations: what a node program yields when it needs the world.

A node program is a generator. It does its own math and yields one of these whenever it needs a
backend to do something whose duration or effect lies outside the program: run a piece of compute
whose time matters, evaluate the model (time kept apart from training), and, from the MPI issue on,
communicate. The backend sends the result back as the value of the ``yield``.

Operations are dataclasses with keyword fields (h11's events are the model); they carry data and
never act, and no backend writes to one. They are slotted rather than frozen: a node program makes
two or three per step, and a frozen dataclass takes 1.5 us to build against 0.4 us, a sixth of a
simulated node-step at 10,000 nodes.
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(slots=True)
class Compute:
    """Run ``fn(*args)`` and send back its result; its duration is compute time.

    ``samples`` (how many training samples the call processes) lets a simulated backend charge time
    from a profile (seconds per sample) instead of running ``fn``'s clock.
    """

    fn: Callable
    args: tuple = ()
    samples: int = 0


@dataclass(slots=True)
class Evaluate:
    """Evaluate the model on the test set; its time is excluded from training time.

    Collective in a multi-node run (unless ``collective`` is False: a node evaluating alone, such
    as an asynchronous parameter server): every rank yields it at the same step. The backend
    averages ``params`` over the ranks when ``average`` is true (decentralised runs, where each
    node has its own model; it also measures the consensus distance, mean ``||w_i - w_mean||``),
    evaluates ``fn(params)`` -> ``(test_loss, test_accuracy)`` once, on rank 0, averages
    ``train_loss`` (the mean loss of the node's steps since the last evaluation) over the ranks
    that trained, records one metrics row, and sends ``(test_loss, test_accuracy)`` back to every
    rank.
    """

    fn: Callable
    params: np.ndarray
    epoch: int
    iteration: int
    train_loss: float
    average: bool = False
    collective: bool = True
    final: bool = False


ANY_SOURCE = -1


@dataclass(slots=True)
class Send:
    """Send ``payload`` to rank ``dest``; gets back None.

    An ndarray payload goes as a raw buffer (the receiver names a ``buf`` of the same size and
    dtype); any other payload is a compressed `Message`, sent as its wire bytes
    (`compression.wire`) and received without a ``buf``. Bytes on the wire: ``payload.nbytes``.

    ``buffered`` (MPI's Bsend): the message is copied aside and the send returns at once, however
    busy the receiver. A server replying to many workers that may themselves be blocked sending to
    other servers needs it, or the sends can wait on each other in a cycle.
    """

    dest: int
    payload: object
    tag: int = 0
    buffered: bool = False


@dataclass(slots=True)
class Recv:
    """Receive one message from ``source`` (or `ANY_SOURCE`) with ``tag``; gets back
    ``(source, payload)``.

    With ``buf`` (an ndarray) the message lands in ``buf`` and the payload sent back is ``buf``
    itself; without, the payload is the object sent. ``reduces``: the program adds what arrives
    into its own buffer (a reduction's step); a simulator charges the arithmetic, gamma seconds a
    byte received, as MPI's collectives spend it inside the call.
    """

    source: int
    tag: int = 0
    buf: np.ndarray | None = None
    reduces: bool = False


@dataclass(slots=True)
class SendRecv:
    """Send ``payload`` to ``dest`` while receiving from ``source`` into ``buf``; gets back ``buf``.

    One step of a ring: both transfers proceed together, so no ordering of the ranks deadlocks.
    ``reduces``: as `Recv`'s (the program adds what arrives into its own buffer).
    ``rewrites_sent``: ``buf`` holds bytes this rank sent earlier in the same collective (an
    allreduce's allgather receives into the blocks its reduce-scatter sent away); through
    shared memory their receiver read them from this rank's memory, so the receive writes into
    lines another core has just read (a simulator charges that write, `sim.backend`).
    """

    dest: int
    payload: np.ndarray
    source: int
    buf: np.ndarray
    tag: int = 0
    reduces: bool = False
    rewrites_sent: bool = False


@dataclass(slots=True)
class Allreduce:
    """Reduce ``buf`` over all ranks in place (``op`` "sum" or "mean"); gets back ``buf``.

    ``algo`` "mpi" uses the MPI library's own Allreduce (simulated as what MPICH picks for the
    message, `programs.collectives.mpich_allreduce`); "ring", "recursive-doubling" and
    "rabenseifner" the project's own (`programs.collectives`), whose order of additions is
    fixed, so a simulated run adds in the same order as the real one. Collective: every rank
    yields it.
    """

    buf: np.ndarray
    op: str = "mean"
    algo: str = "ring"


@dataclass(slots=True)
class Exchange:
    """Send ``payloads[peer]`` to every peer and receive one message from each; gets back
    ``{peer: payload}``, what each peer sent, the same way in every backend: with a ``bufs[peer]``
    array for every peer, those arrays, filled (as a Recv fills its ``buf``); with ``bufs`` of
    None (compressed `Message` payloads, which travel as their wire bytes), the messages
    themselves, to be read only.

    The neighbour exchange of gossip: all transfers proceed together, so no ordering of the nodes
    deadlocks. Every peer must name this node in its own Exchange of the same round.
    """

    payloads: dict
    bufs: dict
    tag: int = 0


@dataclass(slots=True)
class Allgather:
    """Every rank's ``payload``, in rank order, to every rank; gets back that list. Collective.

    For compressed gradients (`Message`, whose sizes may differ from rank to rank; they travel
    as their wire bytes, an Allgatherv after an Allgather of the sizes). Bytes counted as each rank
    sending its payload to each other rank: ``(size - 1) * payload.nbytes`` sent, the others'
    ``nbytes`` received.
    """

    payload: object


class PeerFailed(Exception):
    """Raised into a node program at the operation that can never complete because nodes failed.

    A backend that models failures (the simulator's ``--faults``, ``--fail``) throws it when the
    program waits for a message or a collective that a failed node will never take part in, as
    ULFM MPI reports ``MPI_ERR_PROC_FAILED``. A program that can go on without the failed nodes
    (an asynchronous parameter server) catches it; in any other it ends the run.

    Attributes
    ----------
    failed : tuple of (rank, time_s)
        The failed nodes and when they failed (seconds of the run's clock).
    why : tuple of str
        What happened to each, as the run folder's status says it (``rank 3 killed at step 40``).
    """

    def __init__(self, failed, why=None):
        self.failed = tuple(failed)
        self.why = (
            tuple(why)
            if why is not None
            else tuple(f"rank {rank} failed at {time_s:g} s" for rank, time_s in self.failed)
        )
        super().__init__(self.failed, self.why)  # args rebuild it (SimPy re-raises a copy)

    @property
    def ranks(self):
        """The failed nodes' ranks, a set."""
        return {rank for rank, _ in self.failed}

    def __str__(self):
        return "; ".join(self.why)
