"""The simulated timeline's notes: a run log that notes its own charges (`RunLog`, one call a
charge) and one wrapped to note them (`TracedLog`) lay out the same events."""

import math
from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.timeline import Timeline, Trace, TracedLog, traced
from twinsgd.run.runfolder import RunFolder, json_bytes
from twinsgd.run.runlog import Charges, EventColumns, RunLog, chrome_trace, chrome_trace_json


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
    as_columns = {rank: EventColumns.of(events) for rank, events in per_rank.items()}
    assert chrome_trace_json(as_columns, "gossip", "simulated") == expected  # the timeline's
    assert all(list(as_columns[r]) == [tuple(e) for e in per_rank[r]] for r in per_rank)
    if per_rank and any(per_rank.values()):  # an infinity (null) and numpy's floats alike
        rank = next(r for r, events in per_rank.items() if events)
        name, kind, start, _ = per_rank[rank][0]
        for end in (math.inf, np.float64(start) + np.float64(0.25)):
            per_rank[rank][0] = (name, kind, start, end)
            expected = json_bytes(chrome_trace(per_rank, "gossip", "wall"))
            assert chrome_trace_json(per_rank, "gossip", "wall") == expected


def _laid_out_one_at_a_time(batches):
    """The timeline's events by definition, a charge at a time: each operation's charges end
    to end from its start, charges of no time left out, the program's own code (``local``) an
    event of its own name, and an event that begins where the last one of its name and kind
    ends extending it. ``batches``: lists of operations (name, start, [(kind, seconds), ...])."""
    events = []
    for batch in batches:
        for name, start, charges in batch:
            for kind, seconds in charges:
                if not seconds > 0:
                    continue
                event_name, kind = ("local", "compute") if kind == "local" else (name, kind)
                end = start + seconds
                last = events[-1] if events else None
                if last and last[3] == start and last[1] == kind and last[0] == event_name:
                    events[-1] = (event_name, kind, last[2], end)
                else:
                    events.append((event_name, kind, start, end))
                start = end
    return events


_CHARGE = st.tuples(
    st.sampled_from(["compute", "comm", "wait", "local"]),
    st.one_of(st.sampled_from([0.0, -0.5, 0.25, 0.5, 1e-7]), st.floats(0.0, 10.0)),
)
_OPERATION = st.tuples(  # a start of None: where the operation before ended (a stretch)
    st.sampled_from(["send", "recv", "compute"]),
    st.one_of(st.none(), st.none(), st.sampled_from([0.0, 0.5]), st.floats(0.0, 10.0)),
    st.lists(_CHARGE, max_size=6),
)


def _started(batches):
    """``batches`` with each start of None made the end of the operation before's charges."""
    clock, out = 0.0, []
    for batch in batches:
        out.append([])
        for name, start, charges in batch:
            start = clock if start is None else start
            out[-1].append((name, start, charges))
            clock = start
            for _, seconds in charges:
                clock = clock + seconds if seconds > 0 else clock
    return out


@settings(max_examples=300)
@given(st.lists(st.lists(_OPERATION, max_size=8), min_size=1, max_size=4))
def test_laying_out_in_batches_gives_the_events_of_one_charge_at_a_time(batches):
    """`Trace.lay_out` (numpy, each operation's k-th charges together) lays out, batch after
    batch, the very events and times of adding one charge at a time; a charge noted after the
    last operation traced waits for its operation."""
    batches = _started(batches)
    trace = Trace()
    for batch in batches:
        for name, start, charges in batch:
            for kind, seconds in charges:
                trace.charges += (kind, seconds)
            trace.trace(name, start)
        trace.lay_out()
    trace.charges += ("comm", 0.5)  # the operation in progress
    assert trace.events == _laid_out_one_at_a_time(batches) == list(trace.columns)
    assert trace.charges == ["comm", 0.5]
