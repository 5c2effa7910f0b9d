"""The simulated timeline (timeline.json): at most about `TIMELINE_RANKS` nodes drawn, evenly
spaced, each operation's charges laid end to end as its events, so a node's events tile its time.

Kept out of the simulator's driver loop: a drawn node's run log notes each charge of the
operation in progress (a `run.runlog.RunLog` itself, into its ``noted`` list; any other log
wrapped, `TracedLog`), and the driver marks where each operation ends (`Trace.trace`); the
charges are laid out as events in batches (`Trace.lay_out`, in numpy, kept as arrays), not per
operation: on the message path a drawn node's operation costs two appends. Nodes not drawn cost
nothing.
"""

import math

import numpy as np

from twinsgd.run.runlog import EventColumns

TIMELINE_RANKS = 64  # timeline.json draws at most about this many nodes, evenly spaced
LAYOUT_OPS = 4096  # operations noted before a drawn node's charges are laid out as events


class Trace:
    """A drawn node's notes, laid out as its timeline's events.

    ``charges``: flat, kind then seconds, of the operations not yet laid out (and the one in
    progress), as the node's log notes them; ``marks``: flat, of each operation traced since,
    its name, its start (s) and the end of its charges in ``charges`` (one flat list, not a
    tuple an operation: one extend a trace, and no tuple to take apart when laid out);
    ``columns``: those laid out, as `run.runlog.EventColumns` (``events``: the same as
    ``(name, kind, start s, end s)``), in order."""

    def __init__(self, charges=None):
        self.charges = [] if charges is None else charges
        self.marks, self._chunks = [], []  # laid out: EventColumns of each batch

    def note_local(self):
        """The last charge was the program's own code (``local``), not a compute operation."""
        self.charges[-2] = "local"

    def trace(self, name, start):
        """The operation ``name`` that began at ``start`` (s) ends now: its charges are those
        noted since the last one ended."""
        self.marks += (name, start, len(self.charges))
        if len(self.marks) >= 3 * LAYOUT_OPS:
            self.lay_out()

    @property
    def events(self):
        """Every traced operation's events so far, laid out: ``(name, kind, start s, end s)``."""
        return list(self.columns)

    @property
    def columns(self):
        """Every traced operation's events so far, laid out, as `EventColumns` (what
        timeline.json is written from: no tuple an event)."""
        self.lay_out()
        return EventColumns.joined(self._chunks)

    def lay_out(self):
        """Lay the charges of the traced operations end to end as their events, each from its
        operation's start (the program's own code first, as it ran before the operation); a
        stretch that goes on the last event of the same name and kind extends it.

        In numpy, a batch at a time (a ping-pong's drawn ranks lay out three events a message:
        0.6 us an event in a Python loop, 2026-12-04). An event's end is its start plus its
        seconds, added in the same order as one at a time (each operation's k-th charges
        together, k = 0, 1, ...), so every time is the same float."""
        marks, charges = self.marks, self.charges
        if not marks:
            return
        end_index = marks[-1]
        names = np.array(marks[0::3], dtype=object)
        starts = np.array(marks[1::3], dtype=np.float64)
        ends = np.zeros(len(names) + 1, dtype=np.intp)
        ends[1:] = marks[2::3]
        marks.clear()
        seconds = np.array(charges[1:end_index:2], dtype=np.float64)
        kinds = np.array(charges[0:end_index:2], dtype=object)
        del charges[:end_index]  # the operation in progress keeps its charges
        if not len(seconds):
            return
        counts = np.diff(ends) // 2  # charges of each operation
        op_of = np.repeat(np.arange(len(names)), counts)  # each charge's operation
        first = np.cumsum(counts) - counts  # each operation's first charge
        added = np.where(seconds > 0, seconds, 0.0)  # (a charge of no time moves nothing on)
        begin, finish = np.empty_like(added), np.empty_like(added)
        base = starts[counts > 0]
        for k in range(int(counts.max())):  # the k-th charge of every operation that has one
            at = first[counts > k] + k
            if k:
                base = finish[at - 1]
            begin[at] = base
            finish[at] = base + added[at]
        local = kinds == "local"  # the program's own code: its own name, a compute
        event_names = names[op_of]
        event_names[local] = "local"
        kinds[local] = "compute"
        kept = np.flatnonzero(seconds > 0)
        if not len(kept):
            return
        event_names, kinds = event_names[kept], kinds[kept]
        begin, finish = begin[kept], finish[kept]
        # a stretch: an event that begins where the one before ends, of its name and kind
        goes_on = np.empty(len(kept), dtype=bool)
        goes_on[1:] = (
            (begin[1:] == finish[:-1])
            & (kinds[1:] == kinds[:-1])
            & (event_names[1:] == event_names[:-1])
        )
        chunks = self._chunks
        last = chunks[-1] if chunks else None  # its last event: the one laid out before
        goes_on[0] = (
            last is not None
            and last.ends[-1] == begin[0]
            and last.kinds[-1] == kinds[0]
            and last.names[-1] == event_names[0]
        )
        heads = np.flatnonzero(~goes_on)  # the first event of each stretch
        tails = np.append(heads[1:], len(kept))[: len(heads)] - 1  # ... and its last
        if goes_on[0]:  # the first stretch extends the last event laid out before
            last.ends[-1] = finish[heads[0] - 1 if len(heads) else len(kept) - 1]
        if len(heads):
            chunks.append(
                EventColumns(event_names[heads], kinds[heads], begin[heads], finish[tails])
            )


class TracedLog(Trace):
    """A node's log that does not note its charges itself (any log with ``charge`` and
    ``charge_collective``; a `run.runlog.RunLog` does, `traced`), wrapped so that it does."""

    def __init__(self, log):
        super().__init__()
        self._log = log
        if hasattr(log, "end_step"):  # NOTE: once a step: no `__getattr__` call for it
            self.end_step = log.end_step

    def charge(self, kind, seconds, bytes_sent=0, bytes_recv=0):
        self.charges += (kind, seconds)
        self._log.charge(kind, seconds, bytes_sent, bytes_recv)

    def charge_collective(self, wait, comm, bytes_sent, bytes_recv):
        if wait > 0:  # (a charge of no time is no event: one pair fewer to lay out)
            self.charges += ("wait", wait, "comm", comm)
        else:
            self.charges += ("comm", comm)
        self._log.charge_collective(wait, comm, bytes_sent, bytes_recv)

    def __getattr__(self, name):
        return getattr(self._log, name)


def traced(log):
    """(the log to charge in ``log``'s place, its `Trace`) for a drawn node: a log with a
    ``noted`` list slot (`run.runlog.RunLog`) notes its own charges into the trace's list and
    stays as it is; any other is wrapped (`TracedLog`)."""
    if getattr(log, "noted", False) is None:
        trace = Trace()
        log.noted = trace.charges
        return log, trace
    wrapped = TracedLog(log)
    return wrapped, wrapped


class Timeline:
    """The drawn nodes' events, ``events[rank]``: ``(name, kind, start s, end s)`` in order.

    Made with the list of every node's run log; ``traced[rank]`` is a drawn node's `Trace`, and
    its entry in the list the log that notes its charges (`traced`).
    """

    def __init__(self, logs):
        every = max(1, math.ceil(len(logs) / TIMELINE_RANKS))
        self.traced = {}
        for rank in range(0, len(logs), every):
            logs[rank], self.traced[rank] = traced(logs[rank])

    @property
    def events(self):
        """{rank: [(name, kind, start s, end s), ...]} of every drawn node, laid out."""
        return {rank: log.events for rank, log in self.traced.items()}

    @property
    def columns(self):
        """{rank: `EventColumns`} of every drawn node, laid out (for `chrome_trace_json`)."""
        return {rank: log.columns for rank, log in self.traced.items()}
