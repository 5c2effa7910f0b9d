"""The simulated timeline's notes: a run log that notes its own charges (`RunLog`, one call a
charge) and one wrapped to note them (`TracedLog`) lay out the same events."""

import math
from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.timeline import Timeline, Trace, TracedLog, traced
from twinsgd.run.runfolder import RunFolder, json_bytes
from twinsgd.run.runlog import Charges, RunLog, chrome_trace, chrome_trace_json


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


# a timeline's times: seconds of every scale (µs rounded to 3 places: tiny, fixed, exponent
# forms), names that need JSON's escapes, and the non-finite and numpy values the slow path takes
_SECONDS = st.one_of(
    st.floats(0.0, 1e-6),
    st.floats(0.0, 1e3),
    st.floats(1e-12, 1e12),
    st.sampled_from([0.0, -0.0, 1e-9, 1.5e-11, 1e10, 123.4567891]),
)
_EVENT = st.tuples(
    st.sampled_from(["comm", "allreduce ring", "local", 'a "name"\n', "é"]),
    st.sampled_from(["compute", "comm", "wait"]),
    _SECONDS,
    _SECONDS,
)


@settings(max_examples=300)
@given(st.dictionaries(st.integers(0, 300), st.lists(_EVENT, max_size=20), max_size=6))
def test_timeline_json_is_the_chrome_traces_json_byte_for_byte(per_rank):
    """`chrome_trace_json` (times rounded and written all at once, an event joined from its
    head and its two numbers) writes the bytes `RunFolder.write_json` wrote for `chrome_trace`'s
    document: json.dumps on one line."""
    expected = json_bytes(chrome_trace(per_rank, "gossip", "simulated"))
    assert chrome_trace_json(per_rank, "gossip", "simulated") == expected
    if per_rank and any(per_rank.values()):  # an infinity (null) and numpy's floats alike
        rank = next(r for r, events in per_rank.items() if events)
        name, kind, start, _ = per_rank[rank][0]
        for end in (math.inf, np.float64(start) + np.float64(0.25)):
            per_rank[rank][0] = (name, kind, start, end)
            expected = json_bytes(chrome_trace(per_rank, "gossip", "wall"))
            assert chrome_trace_json(per_rank, "gossip", "wall") == expected
