"""The simulated timeline (timeline.json): at most about `TIMELINE_RANKS` nodes drawn, evenly
spaced, each operation's charges laid end to end as its events, so a node's events tile its time.

Kept out of the simulator's driver loop: a drawn node's run log notes each charge of the
operation in progress (`TracedLog`), and the driver hands the operation over when it ends
(`Timeline.trace`); nodes not drawn cost nothing.
"""

import math

TIMELINE_RANKS = 64  # timeline.json draws at most about this many nodes, evenly spaced


class TracedLog:
    """A node's run log that also notes each charge (kind, seconds) of the operation in
    progress, so the timeline can lay them end to end as that operation's events."""

    def __init__(self, log):
        self._log, self.charges = log, []
        if hasattr(log, "end_step"):  # NOTE: once a step: no `__getattr__` call for it
            self.end_step = log.end_step

    def charge(self, kind, seconds, bytes_sent=0, bytes_recv=0):
        self.charges.append((kind, seconds))
        self._log.charge(kind, seconds, bytes_sent, bytes_recv)

    def charge_collective(self, wait, comm, bytes_sent, bytes_recv):
        self.charges += (("wait", wait), ("comm", comm))
        self._log.charge_collective(wait, comm, bytes_sent, bytes_recv)

    def __getattr__(self, name):
        return getattr(self._log, name)


class Timeline:
    """The drawn nodes' events, ``events[rank]``: ``(name, kind, start s, end s)`` in order.

    Made with the list of every node's run log, whose drawn entries it replaces by `TracedLog`s.
    """

    def __init__(self, logs):
        every = max(1, math.ceil(len(logs) / TIMELINE_RANKS))
        self.events = {rank: [] for rank in range(0, len(logs), every)}
        for rank in self.events:
            logs[rank] = TracedLog(logs[rank])

    def __contains__(self, rank):
        return rank in self.events

    def trace(self, log, rank, name, start):
        """Lay the charges ``log`` (a `TracedLog`) noted for ``rank``'s operation that began at
        ``start`` end to end as its events (the program's own code first, as it ran before
        the operation); a stretch that goes on the last event of the same name and kind
        extends it."""
        events, charges = self.events[rank], log.charges
        last = events[-1] if events else (None, None, None, None)
        for kind, seconds in charges:  # NOTE: per operation of a drawn node: kept lean
            if seconds > 0:
                event_name = name
                if kind == "local":
                    event_name, kind = "local", "compute"
                end = start + seconds
                if last[3] == start and last[1] == kind and last[0] == event_name:
                    last = events[-1] = (event_name, kind, last[2], end)  # one stretch
                else:
                    last = (event_name, kind, start, end)
                    events.append(last)
                start = end
        charges.clear()
