"""The simulated timeline's notes: a run log that notes its own charges (`RunLog`, one call a
charge) and one wrapped to note them (`TracedLog`) lay out the same events."""

from types import SimpleNamespace

from sim.timeline import Timeline, Trace, TracedLog, traced
from twinsgd.run.runfolder import RunFolder
from twinsgd.run.runlog import Charges, RunLog


class _Kept(Charges):
    """A log that keeps its charges as given (any log but a RunLog)."""

    def __init__(self):
        self.kept = []

    def charge(self, kind, seconds, bytes_sent=0, bytes_recv=0):
        self.kept.append((kind, seconds, bytes_sent, bytes_recv))


def _operations(log, trace):
    """A compute, the program's own code, a send that waited, a receive that did not."""
    log.charge("compute", 0.5)
    trace.trace("compute", 0.0)
    log.charge("compute", 0.25)
    trace.note_local()
    log.charge_collective(0.125, 0.0625, 32, 0)
    trace.trace("send", 0.5)
    log.charge_collective(0.0, 0.0625, 0, 32)
    trace.trace("recv", 0.9375)


def test_a_runlog_notes_its_own_charges_and_lays_out_what_a_wrapped_log_does(tmp_path):
    folder = RunFolder(tmp_path / "run")
    runlog = RunLog(folder, {"config": {}})
    log, trace = traced(runlog)
    assert log is runlog and type(trace) is Trace and runlog.noted is trace.charges
    wrapped, wrapped_trace = traced(_Kept())
    assert type(wrapped) is TracedLog and wrapped_trace is wrapped
    _operations(log, trace)
    _operations(wrapped, wrapped_trace)
    assert (
        trace.events
        == wrapped_trace.events
        == [
            ("compute", "compute", 0.0, 0.5),
            ("local", "compute", 0.5, 0.75),
            ("send", "wait", 0.75, 0.875),
            ("send", "comm", 0.875, 0.9375),
            ("recv", "comm", 0.9375, 1.0),
        ]
    )
    untraced = RunLog(RunFolder(tmp_path / "untraced"), {"config": {}})
    nothing = SimpleNamespace(trace=lambda name, start: None, note_local=lambda: None)
    _operations(untraced, nothing)  # the same charges, not noted: the same step
    assert runlog._current == untraced._current and untraced.noted is None
    runlog.steps.close()
    untraced.steps.close()


def test_the_timeline_draws_every_kth_log_and_puts_wrapped_ones_in_its_place():
    logs = [_Kept() for _ in range(130)]
    timeline = Timeline(logs)
    assert sorted(timeline.traced) == list(range(0, 130, 3))
    assert all(logs[rank] is timeline.traced[rank] for rank in timeline.traced)
    assert type(logs[1]) is _Kept
