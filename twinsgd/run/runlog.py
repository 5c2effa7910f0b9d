"""Time accounting and results of a run, written into its run folder as the run goes.

Backends charge seconds and bytes to the step in progress (`RunLog.charge`), close steps
(`RunLog.end_step`) and report evaluations (`RunLog.evaluation`); they own the clock (wall or
simulated) and pass times in, so this module is the same for real and simulated runs. Training time
excludes evaluation time, which is recorded apart (DESIGN.md, "Time accounting").

Every rank appends its own rows to steps.csv; one rank, the reporter (rank 0 unless a sharded
parameter server leaves no rank holding the whole model but the workers), creates the files and
alone writes config.json, metrics.csv, summary.json and model.npz, from every rank's totals that
the backend gathers at each evaluation.
"""

import datetime
import errno
import json
import math
import platform
import sys
import time
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter

import numpy as np

import twinsgd
from twinsgd.cli import progress_shown
from twinsgd.run.runfolder import (
    METRICS_COLUMNS,
    STEPS_COLUMNS,
    float_pairs,
    json_bytes,
    rounded_array,
)

KINDS = ("compute", "comm", "wait")
_KEY = {kind: f"{kind}_s" for kind in KINDS}
TOTALS = ("compute_s", "comm_s", "wait_s", "bytes_sent", "bytes_recv")
STEPS_FLUSH_S = 1.0  # steps.csv rows reach the disk at least this often, and at each evaluation
MIN_LOCAL_EVENT_S = 1e-5  # a measured timeline draws the program's own code only when longer
# a measured timeline's parts of an operation on a compressed payload: its wire bytes written
# before the call and read after it (the simulator charges both inside the operation)
WRITE_WIRE, READ_WIRE = "write wire", "read wire"


class Charges:
    """What the simulator asks of a node's log besides ``charge(kind, seconds, bytes_sent=0,
    bytes_recv=0)``: ``charge_collective``, a collective's wait and comm in one call, by default
    two charges. (A test's stand-in log inherits it.)"""

    def charge_collective(self, wait, comm, bytes_sent, bytes_recv):
        self.charge("wait", wait)
        self.charge("comm", comm, bytes_sent, bytes_recv)


class RunLog(Charges):
    """Accumulates the steps, metrics and summary of one rank of a run inside a `RunFolder`.

    Parameters
    ----------
    folder : run.runfolder.RunFolder
    header : dict
        The config.json document (resolved configuration, versions, clock, ...); its ``status`` is
        kept up to date here.
    target_accuracy : float or None
        Test accuracy whose first crossing time goes into the summary.
    steps_per_epoch : int
        For the summary's seconds per epoch.
    reporter : bool
        True on the reporting rank, which creates the files; the other ranks append to
        steps.csv, which must exist by then.
    steps : run.runfolder.CsvLog, optional
        A steps.csv writer shared by the ranks of one process (the simulator's thousands of
        nodes would otherwise hold a file each); its creator closes it.
    write_steps : bool
        False keeps this rank's rows out of steps.csv (``--steps-sample``); its totals still count.
    """

    def __init__(
        self,
        folder,
        header,
        target_accuracy=None,
        steps_per_epoch=1,
        reporter=True,
        steps=None,
        write_steps=True,
        resumed=False,
    ):
        self.folder, self.header = folder, dict(header, status="running")
        self.target_accuracy, self.steps_per_epoch = target_accuracy, steps_per_epoch
        self.root = reporter
        if self.root:  # a resumed run appends to the logs kept up to its checkpoint
            folder.write_json("config.json", self.header)
            self.metrics = folder.log("metrics.csv", METRICS_COLUMNS, append=resumed)
        self._own_steps = steps is None
        self.steps = (
            steps
            if steps is not None
            else folder.log(
                "steps.csv", STEPS_COLUMNS, append=resumed or not self.root, flush_s=STEPS_FLUSH_S
            )
        )
        self.write_steps = write_steps
        self.totals = dict.fromkeys(TOTALS, 0)
        self.overrides = {}  # summary fields a caller knows better (an analytic run's exact means)
        self.all_totals = [self.totals]  # every rank's, as last gathered (rank 0)
        self.eval_s = 0.0
        self.iterations, self.time_s = 0, 0.0
        self.last_eval = None
        self.time_to_target_s = None
        # the step in progress; a rank whose rows are not written charges its totals directly
        self._current = _NEW_STEP.copy() if write_steps else self.totals
        self._summary_written = -math.inf  # time.monotonic() of the last summary.json
        # where a simulated timeline draws this rank, the flat list its charges are noted in
        # (kind, seconds, ...; `sim.timeline`), here rather than by a wrapper: one call a
        # charge on the message path, not two
        self.noted = None

    def charge(self, kind, seconds, bytes_sent=0, bytes_recv=0):
        """Add ``seconds`` of ``kind`` (compute, comm or wait) and bytes to the step in progress."""
        step = self._current
        step[_KEY[kind]] += seconds
        if bytes_sent or bytes_recv:
            step["bytes_sent"] += bytes_sent
            step["bytes_recv"] += bytes_recv
        if self.noted is not None:
            self.noted += (kind, seconds)

    def charge_collective(self, wait, comm, bytes_sent, bytes_recv):
        """`charge` of a collective's ``wait`` and ``comm`` seconds and its bytes, in one call
        (the simulator's closed form charges one per node and collective: at 10,000 nodes, a
        million calls fewer a hundred steps)."""
        step = self._current
        step["wait_s"] += wait
        step["comm_s"] += comm
        step["bytes_sent"] += bytes_sent
        step["bytes_recv"] += bytes_recv
        if self.noted is not None:  # (a wait of no time is no event: one pair fewer)
            self.noted += ("wait", wait, "comm", comm) if wait > 0 else ("comm", comm)

    def end_step(self, rank, epoch, iteration, time_s, loss, staleness=0):
        """Write the step in progress as one steps.csv row; ``time_s`` is the training clock now."""
        if self.write_steps:
            # NOTE: the step's values in `_NEW_STEP`'s order, unpacked once; STEPS_COLUMNS'
            # order; no dict a row; the totals unrolled; the next step a template's copy (a row
            # per message)
            compute, comm, wait, sent, received = self._current.values()
            self.steps.write_values(
                (
                    rank,
                    epoch,
                    iteration,
                    time_s,
                    compute,
                    comm,
                    wait,
                    sent,
                    received,
                    staleness,
                    float(loss),
                )
            )
            totals = self.totals
            totals["compute_s"] += compute
            totals["comm_s"] += comm
            totals["wait_s"] += wait
            totals["bytes_sent"] += sent
            totals["bytes_recv"] += received
            self._current = _NEW_STEP.copy()
        if iteration > self.iterations:
            self.iterations = iteration
        self.time_s = time_s

    def node_totals(self):
        """This rank's totals so far (seconds per kind, bytes), for the gather to rank 0.

        Called by every rank at each evaluation, so it also puts the rank's steps on disk.
        """
        self.steps.flush()
        return dict(self.totals)

    def evaluation(
        self,
        epoch,
        iteration,
        time_s,
        train_loss,
        test_loss,
        test_accuracy,
        eval_s,
        consensus_distance=None,
        node_totals=None,
        moved=None,
    ):
        """Write one metrics.csv row and refresh summary.json (so a killed run keeps it; at most
        once per ``STEPS_FLUSH_S`` of wall time, and always when the run ends).

        ``node_totals`` is every rank's `node_totals` (rank order) when the evaluation was
        collective; ``bytes`` in the row is then the bytes sent by all ranks so far. A node that
        evaluates alone (an asynchronous parameter server) knows only its own traffic: the row
        then holds the bytes it sent and received, which for a parameter server is all of it.
        """
        if node_totals is not None:
            self.all_totals = node_totals
        if moved is None:  # else known from outside (an analytic run: every node's bytes)
            moved = (
                sum(t["bytes_sent"] for t in node_totals)
                if node_totals is not None
                else self.totals["bytes_sent"] + self.totals["bytes_recv"]
            )
        row = {
            "epoch": epoch,
            "iteration": iteration,
            "time_s": time_s,
            "train_loss": train_loss,
            "test_loss": test_loss,
            "test_accuracy": test_accuracy,
            "bytes": moved,
            "eval_s": eval_s,
            "consensus_distance": consensus_distance,
        }
        self.metrics.write_rows([row])
        self.steps.flush()
        self.eval_s += eval_s
        self.last_eval = row
        target = self.target_accuracy
        if target is not None and self.time_to_target_s is None and test_accuracy >= target:
            self.time_to_target_s = time_s
        # At most once a second: with thousands of nodes the document is costly to write.
        if time.monotonic() - self._summary_written >= STEPS_FLUSH_S:
            self._summary_written = time.monotonic()
            self.folder.write_json("summary.json", self.summary())

    def summary(self):
        """Totals and means of the run so far (summary.json).

        Seconds per kind are means over the nodes (``per_node`` lists each); bytes are totals over
        all nodes, ``bytes_per_iteration`` their sum per step.
        """
        t, n, last = self.time_s, self.iterations, self.last_eval or {}
        per_node = {key: [totals[key] for totals in self.all_totals] for key in TOTALS}
        sent = sum(per_node["bytes_sent"])
        return {
            "status": self.header["status"],
            "dataset": self.header.get("dataset"),
            "algorithm": self.header.get("config", {}).get("algorithm"),
            "nodes": len(self.all_totals),
            "iterations": n,
            "epochs": n / self.steps_per_epoch,
            "time_s": t,
            **{f"{kind}_s": float(np.mean(per_node[f"{kind}_s"])) for kind in KINDS},
            "eval_s": self.eval_s,
            "seconds_per_epoch": t / n * self.steps_per_epoch if n else None,
            "iterations_per_s": n / t if t > 0 else None,
            "bytes_sent": sent,
            "bytes_per_iteration": sent / n if n else None,
            "final_train_loss": last.get("train_loss"),
            "final_test_loss": last.get("test_loss"),
            "final_test_accuracy": last.get("test_accuracy"),
            "final_consensus_distance": last.get("consensus_distance"),
            "target_accuracy": self.target_accuracy,
            "time_to_target_s": self.time_to_target_s,
            "per_node": per_node,
            **self.overrides,
        }

    def sample_per_node(self, every):
        """Keep every ``every``-th node's totals for summary.json's ``per_node`` (of a run of
        thousands of nodes); the summary's means and bytes stay those over all nodes, and
        ``per_node_every`` says which nodes are listed. Call once all totals are in."""
        if every <= 1:
            return
        full = self.summary()
        self.overrides.update(
            {
                "nodes": full["nodes"],
                "per_node_every": every,
                **{f"{kind}_s": full[f"{kind}_s"] for kind in KINDS},
                "bytes_sent": full["bytes_sent"],
                "bytes_per_iteration": full["bytes_per_iteration"],
            }
        )
        self.all_totals = self.all_totals[::every]

    def finish(self, status, arrays=None, timeline=None):
        """Close the logs; the reporter saves weights and timeline and marks the run ``status``."""
        if self._own_steps:
            self.steps.close()
        if not self.root:
            return
        self.metrics.close()
        if arrays is not None:
            self.folder.save_arrays("model.npz", arrays)
        if timeline is not None:  # `chrome_trace_json`'s bytes, or `chrome_trace_pieces`
            self.folder.write_bytes("timeline.json", timeline)
        self.header["status"] = status
        self.folder.write_json("summary.json", self.summary())
        self.folder.write_json("config.json", self.header)

    def fail(self, why):
        """Mark the run failed from any rank (config.json; the reporter also summary.json)."""
        self.header["status"] = f"failed: {why}"
        self.folder.write_json("config.json", self.header)
        if self.root:
            self.folder.write_json("summary.json", self.summary())


DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)  # no room, a size limit, a quota


def failure_status(err):
    """What a run stopped by ``err`` says after ``failed:``: ``disk full: FILE: ...`` when a
    write was refused for room, else the exception's type and message."""
    if isinstance(err, OSError) and err.errno in DISK_FULL:
        return f"disk full: {err.strerror or err}"
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


_NEW_STEP = {"compute_s": 0.0, "comm_s": 0.0, "wait_s": 0.0, "bytes_sent": 0, "bytes_recv": 0}


def run_header(cfg, dataset, model, size, clock, command, **extra):
    """The config.json document both front ends write: the resolved configuration, the data set
    actually used, where and with what the run happened; ``extra`` adds front-end keys (the MPI
    library, the simulated cluster) and versions (``versions={...}`` is merged)."""
    versions = {
        "twinsgd": twinsgd.__version__,
        "twinsgd_commit": twinsgd.source_commit(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        **extra.pop("versions", {}),
    }
    return {
        "config": cfg.as_dict(),
        "dataset": dataset.name,
        "data_files": [str(f) for f in dataset.files],
        "nodes": size,
        "params": model.n_params,
        "clock": clock,
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": ["python", "-m", command, *sys.argv[1:]],
        "host": platform.node(),
        **extra,
        "versions": versions,
    }


def chrome_trace(per_rank, algorithm, clock):
    """timeline.json in Chrome trace format (chrome://tracing, Perfetto): one track (thread) per
    rank, times in microseconds. ``per_rank``: {rank: [(name, kind, start s, end s), ...]}
    (kind: compute, comm or wait), the same from the real and the simulated backend."""
    names = [
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": rank, "args": {"name": f"rank {rank}"}}
        for rank in sorted(per_rank)
    ]
    events = [
        {
            "name": name,
            "cat": kind,
            "ph": "X",
            "pid": 0,
            "tid": rank,
            "ts": round(start * 1e6, 3),
            "dur": round((end - start) * 1e6, 3),
        }
        for rank in sorted(per_rank)
        for name, kind, start, end in per_rank[rank]
    ]
    return {
        "traceEvents": names + events,
        "displayTimeUnit": "ms",
        "otherData": {"algorithm": algorithm, "clock": clock},
    }


def chrome_trace_json(per_rank, algorithm, clock):
    """timeline.json's bytes: `chrome_trace`'s document as `RunFolder.write_json` writes it on
    one line (``json.dumps``, a newline), byte for byte, made without a dict an event.
    ``per_rank``: {rank: a list of (name, kind, start s, end s), or `EventColumns`}.
    (`chrome_trace_pieces` joined.)"""
    return b"".join(chrome_trace_pieces(per_rank, algorithm, clock))


def chrome_trace_pieces(per_rank, algorithm, clock):
    """`chrome_trace_json`'s bytes in pieces, a rank's events a piece, for `RunFolder.write_bytes`
    to write one after another.

    Why: a simulated run draws up to `sim.timeline.TIMELINE_RANKS` nodes, and on the message
    level a drawn node's message is two or three events: made as dicts and dumped, they cost
    10 us a ping-pong message (32 ranks, all drawn; 2026-12-04), as much as simulating it. Here
    a rank's times are rounded (`rounded_array`) and written (`float_pairs`) all at once, from
    arrays (the simulator's timeline lays its events out as arrays: no float an event to
    gather), and an event is its rank's, name's and kind's text joined to its two numbers. A
    rank at a time, not the whole at once: the whole is some MB (a ping-pong's 20,000 messages,
    5.6), and fresh memory of that size costs its pages (1.5 -> 1.1 us a message, 2026-12-05).
    """
    ranks = sorted(per_rank)
    try:  # every rank's times first: a time that is not finite writes the document as write_json
        columns = [EventColumns.of(per_rank[rank]) for rank in ranks]  # does (its null), and
        times = [  # a time that is not a float too (an event's start, its span; in µs)
            rounded_array(np.stack((c.starts, c.ends - c.starts), axis=1) * 1e6, 3) for c in columns
        ]
    except (ValueError, TypeError):
        return [json_bytes(chrome_trace(per_rank, algorithm, clock))]
    if not any(map(len, columns)) or not all(np.isfinite(t).all() for t in times):
        return [json_bytes(chrome_trace(per_rank, algorithm, clock))]  # (no events: the frame)
    # the document around the events, `chrome_trace`'s own (its ranks' names, otherData), with a
    # mark where the events go
    frame = chrome_trace(dict.fromkeys(ranks, ()), algorithm, clock)
    frame["traceEvents"].append(_EVENTS_MARK)
    before, after = json_bytes(frame).decode().split(json.dumps(_EVENTS_MARK))
    last = max(i for i, c in enumerate(columns) if len(c))  # its last event ends the list
    pieces = [before.encode()]
    for i, (rank, c, rank_times) in enumerate(zip(ranks, columns, times, strict=True)):
        n = len(c)
        if not n:
            continue
        # per event: its head, its two numbers, '}, ' (the very last: '}'); one join
        texts = [None] * (3 * n)
        texts[0::3] = _heads(rank, c)
        texts[1::3] = float_pairs(rank_times, ', "dur": ')  # its start, its key, its span
        texts[2::3] = repeat("}, ", n)
        if i == last:
            texts[-1] = "}"
        pieces.append("".join(texts).encode())
    pieces.append(after.encode())
    return pieces


@dataclass(slots=True)
class EventColumns:
    """A rank's timeline events as columns: ``names`` and ``kinds`` (object arrays of str),
    ``starts`` and ``ends`` (float64 arrays, s), one entry an event. Iterating gives the events
    as ``(name, kind, start s, end s)`` tuples, as a list of them would."""

    names: np.ndarray
    kinds: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    def __iter__(self):
        return zip(
            self.names.tolist(),
            self.kinds.tolist(),
            self.starts.tolist(),
            self.ends.tolist(),
            strict=True,
        )

    def __len__(self):
        return len(self.starts)

    @classmethod
    def of(cls, events):
        """``events`` as columns: itself if columns already, else a list of event tuples'.
        TypeError or ValueError where a time is not a number."""
        if isinstance(events, cls):
            return events
        events = list(events)
        return cls(
            _objects(map(_NAME, events)),
            _objects(map(_KIND, events)),
            np.array(list(map(_START, events)), dtype=np.float64),
            np.array(list(map(_END, events)), dtype=np.float64),
        )

    @classmethod
    def joined(cls, chunks):
        """The columns of ``chunks`` (EventColumns) one after another, a copy."""
        if not chunks:
            return cls(_objects([]), _objects([]), np.empty(0), np.empty(0))
        return cls(
            np.concatenate([c.names for c in chunks]),
            np.concatenate([c.kinds for c in chunks]),
            np.concatenate([c.starts for c in chunks]),
            np.concatenate([c.ends for c in chunks]),
        )


def _objects(values):
    """A 1-d object array of ``values`` (str stay str, not numpy's fixed-width text)."""
    values = list(values)
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


_NAME, _KIND, _START, _END = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(3)


def _heads(rank, columns):
    """The text of each event of ``rank`` up to its start's number (`_Heads`), in order: each
    event's (name, kind) numbered among the rank's few distinct ones by numpy's comparisons,
    and the texts taken from a table by that number (not a tuple and a look-up an event)."""
    texts = _Heads(rank)
    names, kinds = columns.names, columns.kinds
    distinct_names = list(dict.fromkeys(names.tolist()))
    distinct_kinds = list(dict.fromkeys(kinds.tolist()))
    code = np.zeros(len(names), dtype=np.intp)
    for i, name in enumerate(distinct_names[1:], 1):
        code[names == name] = i * len(distinct_kinds)
    for j, kind in enumerate(distinct_kinds[1:], 1):
        code[kinds == kind] += j
    table = np.empty(len(distinct_names) * len(distinct_kinds), dtype=object)
    table[:] = [texts[name, kind] for name in distinct_names for kind in distinct_kinds]
    return table[code].tolist()


class _Heads(dict):
    """(name, kind) -> the text of an event of one rank up to its start's number, made on the
    first look-up (a run's events have a few names and kinds)."""

    def __init__(self, rank):
        super().__init__()
        self.tid = int(rank)

    def __missing__(self, key):
        name, kind = key
        head = self[key] = (
            f'{{"name": {json.dumps(name)}, "cat": {json.dumps(kind)}, "ph": "X", '
            f'"pid": 0, "tid": {self.tid}, "ts": '
        )
        return head


_EVENTS_MARK = "\x00events\x00"  # no rank's name or run's algorithm holds it


def progress_bar(total):
    """A tqdm bar of ``total`` steps on stderr for both front ends; off when stderr is not a
    terminal (a log file, CI), so it never fills one with carriage returns."""
    from tqdm import tqdm

    return tqdm(
        total=total,
        unit="step",
        dynamic_ncols=True,
        mininterval=0.5,
        file=sys.stderr,
        disable=None if progress_shown() else True,  # off under --quiet
    )
