"""Every rank's program in one process: the programs layer's own backend for point-to-point
operations (h11's ``ConnectionPair``: the protocol run against itself, no network, no clock but a
model's).

Theory of operation: messages wait in FIFO queues keyed by (source, dest, tag), so two messages on
one key never overtake each other (MPI's rule). A `Send` is synchronous unless ``buffered``: it
completes when the receiver has taken it, so a program that would need MPI to buffer its sends
deadlocks here too. A `SendRecv` posts its message, then takes the incoming one; it completes
when both are done. Each pass over the ranks lets every rank progress as far as it can; a pass
in which nobody progresses while some have not returned is a `Deadlock`.

Time, on the alpha-beta model: a message starts when both its sender and its receiver have
reached it (the later of their clocks; a buffered send's sender does not wait) and takes
``alpha + nbytes / beta``; a rank's clock jumps to the end of each operation. A rank's sends
therefore serialize, and each round of a collective costs one message time: the assumption of
Thakur et al.'s formulas, which the tests hold the collectives' closed forms against.

Two users: the simulator's closed-form collectives (the same additions in the same order as when
their messages travel, without the messages' events), and the tests of the collectives.

Examples
--------
>>> import numpy as np
>>> from twinsgd.programs.collectives import ring_allreduce
>>> bufs = [np.full(6, r, np.float32) for r in range(3)]
>>> run = run_lockstep([ring_allreduce(b, r, 3) for r, b in enumerate(bufs)], alpha=1.0, beta=4.0)
>>> run.results[0].tolist(), run.finished  # 2(p-1) = 4 steps of alpha + 8 bytes / beta
([3.0, 3.0, 3.0, 3.0, 3.0, 3.0], [12.0, 12.0, 12.0])
"""

import math
from collections import defaultdict, deque
from dataclasses import dataclass

import numpy as np

from twinsgd.programs.ops import Recv, Send, SendRecv


class Deadlock(RuntimeError):
    """Every rank that has not returned waits for a message nobody will send."""


@dataclass
class Run:
    """What `run_lockstep` returns."""

    results: list  # each program's return value, rank order
    sent: list  # bytes, rank order
    received: list
    finished: list  # each rank's clock when its program returned, seconds


@dataclass
class _Message:
    payload: np.ndarray  # a copy taken when sent: the sender may reuse its buffer afterwards
    posted: float  # the sender's clock when it sent
    delivered: float | None = None  # set when the receiver takes it


def run_lockstep(programs, alpha=0.0, beta=math.inf, buffered=False):
    """Run one generator per rank to its end, delivering `Send`, `Recv` and `SendRecv`.

    Parameters
    ----------
    programs : list of generators
        Rank r's program at index r; each yields only Send, Recv and SendRecv (with ``buf``).
    alpha, beta : float
        Seconds per message and bytes per second of the clocks' alpha-beta model.
    buffered : bool
        Every Send returns at once (its message waits for its receiver), as MPI's buffered sends
        do: a program that relies on it runs; without, it deadlocks as it could under MPI.

    Returns
    -------
    Run
        The programs' return values, each rank's bytes sent and received, and its clock.

    Raises
    ------
    Deadlock
        Some ranks wait for messages nobody will send.
    ValueError
        A rank yields something else, sends to or receives from a rank out of range or itself,
        or receives into a buffer of another shape or dtype than the message's.
    """
    size = len(programs)
    queues = defaultdict(deque)
    clock = [0.0] * size
    sent, received, results = [0] * size, [0] * size, [None] * size
    ops, outgoing, incoming = [None] * size, [None] * size, [None] * size
    running = set(range(size))

    def advance(rank, reply):
        """Send the reply in; post the next operation's message, if it sends one."""
        try:
            op = ops[rank] = programs[rank].send(reply)
        except StopIteration as stop:
            results[rank] = stop.value
            running.discard(rank)
            return
        incoming[rank] = outgoing[rank] = None
        if not isinstance(op, Send | Recv | SendRecv):
            raise ValueError(f"rank {rank} yielded {op!r}: only Send, Recv and SendRecv here")
        if isinstance(op, Send | SendRecv):
            if not (0 <= op.dest < size and op.dest != rank):
                raise ValueError(f"rank {rank} sends to {op.dest} of {size}")
            message = _Message(np.array(op.payload, copy=True), clock[rank])
            queues[rank, op.dest, op.tag].append(message)
            if not (buffered or getattr(op, "buffered", False)):  # else the sender goes on
                outgoing[rank] = message
            sent[rank] += op.payload.nbytes

    def take(rank, op):
        """Take the incoming message into the receive buffer if it is there; True if taken."""
        if not (0 <= op.source < size and op.source != rank):
            raise ValueError(f"rank {rank} receives from {op.source} of {size}")
        queue = queues[op.source, rank, op.tag]
        if not queue:
            return False
        message = incoming[rank] = queue.popleft()
        if op.buf.shape != message.payload.shape or op.buf.dtype != message.payload.dtype:
            raise ValueError(
                f"rank {rank} receives {message.payload.dtype}{message.payload.shape} into "
                f"{op.buf.dtype}{op.buf.shape}"
            )
        np.copyto(op.buf, message.payload)
        received[rank] += message.payload.nbytes
        start = max(message.posted, clock[rank])
        message.delivered = start + alpha + message.payload.nbytes / beta
        return True

    def progress(rank):
        """Move rank on as far as its messages allow; True if anything happened."""
        op, moved = ops[rank], False
        if isinstance(op, Recv | SendRecv) and incoming[rank] is None:
            moved = take(rank, op)
        waiting_in = isinstance(op, Recv | SendRecv) and incoming[rank] is None
        waiting_out = outgoing[rank] is not None and outgoing[rank].delivered is None
        if waiting_in or waiting_out:
            return moved
        ends = [m.delivered for m in (incoming[rank], outgoing[rank]) if m is not None]
        clock[rank] = max([clock[rank], *ends])
        if isinstance(op, SendRecv):
            reply = op.buf
        elif isinstance(op, Recv):
            reply = (op.source, op.buf)
        else:
            reply = None
        advance(rank, reply)
        return True

    for rank in range(size):
        advance(rank, None)
    while running:
        moved = [progress(rank) for rank in sorted(running)]
        if not any(moved):
            raise Deadlock(
                f"ranks {sorted(running)} wait: "
                + "; ".join(f"{r}: {ops[r]!r:.80}" for r in sorted(running))
            )
    return Run(results, sent, received, clock)
