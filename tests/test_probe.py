"""`real.backend.probe`: MPI's Probe as a loop of Iprobe that gives the core up between polls
(MPICH's Probe keeps it, so ranks that share cores wait a whole turn for a peer in it)."""

import real.backend as backend


class _Comm:
    """An Iprobe that finds the message on its ``after``-th poll, and records its arguments."""

    def __init__(self, after):
        self.after, self.polls, self.args = after, 0, None

    def Iprobe(self, source, tag, status):  # mpi4py's name
        self.polls += 1
        self.args = (source, tag, status)
        return self.polls >= self.after


def test_probe_yields_between_polls_until_the_message_is_there(monkeypatch):
    yields = []
    monkeypatch.setattr(backend.os, "sched_yield", lambda: yields.append(1))
    comm, status = _Comm(after=4), object()
    backend.probe(comm, 3, 9, status)
    assert comm.polls == 4 and len(yields) == 3  # a yield after each empty poll, none after
    assert comm.args == (3, 9, status)  # the source, tag and status passed on


def test_probe_of_a_message_already_there_does_not_yield(monkeypatch):
    yields = []
    monkeypatch.setattr(backend.os, "sched_yield", lambda: yields.append(1))
    comm = _Comm(after=1)
    backend.probe(comm, -1, 0, None)
    assert comm.polls == 1 and yields == []
