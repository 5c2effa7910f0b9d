"""Where the cores went while ranks computed: a run traced by the kernel's scheduler.

    python -m twinsgd.analysis.schedtrace --out DIR -- mpiexec -n 5 python -m real.train ...

As root, on a kernel with tracefs: traces ``sched:sched_switch`` (ftrace, clock ``mono``) while
CMD runs, with ``TWINSGD_TRACE_MARKS=1`` set so that `real.backend` writes a mark into the trace
as each rank's ``Compute`` begins and ends (``C+ RANK``, ``C- RANK``). Prints, over the time
the marks span: the share of the cores held by ranks computing, by ranks not computing (waiting,
copying, their own code), idle, and by other processes; and per rank its kernels' wall time, the
time it was on a core through them, and the share it was off. DIR keeps ``trace.txt``.

Why: past the cores, whether a rank waiting in MPI gives its core away (it polls and yields) and
whether a computing rank keeps its core are what the simulator's `sim.cores` assumes; this says
what the kernel did (docs/validation.md, "Where it misses": study 1 at 5 processes on 2 cores).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
from bisect import bisect_right
from collections import defaultdict
from pathlib import Path

TRACEFS = Path("/sys/kernel/tracing")
MARKS_ENV = "TWINSGD_TRACE_MARKS"


def parse(lines):
    """Parse ftrace text. Returns ``(switches, marks)``: ``switches`` a list of ``(t, cpu,
    prev_pid, next_pid)`` (seconds, in file order), ``marks`` a list of ``(t, pid, text)``.

    >>> line = ("  python-7  [001] d..2.  5.000100: sched_switch: prev_comm=python prev_pid=7 "
    ...         "prev_prio=120 prev_state=R ==> next_comm=swapper/1 next_pid=0 next_prio=120")
    >>> parse([line, "  python-7  [000] .....  5.0: tracing_mark_write: C+ 3"])
    ([(5.0001, 1, 7, 0)], [(5.0, 7, 'C+ 3')])
    """
    switches, marks = [], []
    for line in lines:
        head, sep, rest = line.partition(": sched_switch: ")
        if sep:
            t, cpu = _time_and_cpu(head)
            switches.append((t, cpu, _field(rest, "prev_pid="), _field(rest, "next_pid=")))
            continue
        head, sep, rest = line.partition(": tracing_mark_write: ")
        if sep:
            t, _ = _time_and_cpu(head)
            task = head.split("[", 1)[0].strip()
            marks.append((t, int(task.rsplit("-", 1)[1]), rest.strip()))
    return switches, marks


def _field(text, key):
    """The integer after ``key`` in ``text`` (a trace event's ``name=value`` fields)."""
    at = text.index(key) + len(key)
    end = text.find(" ", at)
    return int(text[at:] if end < 0 else text[at:end])


def _time_and_cpu(head):
    """``(seconds, cpu)`` from the part of a trace line before the event's name."""
    cpu = int(head.split("[", 1)[1].split("]", 1)[0])
    return float(head.rsplit(None, 1)[1]), cpu


def _on_core(switches):
    """Per pid, its time on a core as sorted ``(start, end)`` intervals."""
    running, spans = {}, defaultdict(list)
    for t, cpu, _, next_pid in switches:
        if cpu in running:
            start, pid = running[cpu]
            spans[pid].append((start, t))
        running[cpu] = (t, next_pid)
    for intervals in spans.values():
        intervals.sort()
    return spans


def _overlap(intervals, a, b):
    """Seconds of the sorted, disjoint ``intervals`` inside ``[a, b]``."""
    total, i = 0.0, max(0, bisect_right(intervals, (a, a)) - 1)
    while i < len(intervals) and intervals[i][0] < b:
        x, y = intervals[i]
        if y > a:
            total += min(y, b) - max(x, a)
        i += 1
    return total


def breakdown(switches, marks):
    """What the cores did over the span of the ``C+``/``C-`` marks (`parse`'s output).

    Returns ``{"span_s", "cores": {kind: seconds}, "ranks": {rank: {...}}}``: ``kind`` is
    ``computing`` (a marked rank inside a Compute), ``not computing`` (a marked rank outside
    one), ``idle`` (pid 0) or ``other``; per rank its ``computes``, ``wall_s`` and ``on_core_s``
    (lists, one per Compute) and ``off_share`` (of the kernels' summed wall time).

    >>> switches = [(0.0, 0, 0, 10), (0.0, 1, 0, 11), (1.0, 0, 10, 11), (1.0, 1, 11, 0),
    ...             (2.0, 0, 11, 10), (2.0, 1, 0, 0), (4.0, 0, 10, 0), (4.0, 1, 0, 0)]
    >>> marks = [(0.0, 10, "C+ 0"), (4.0, 10, "C- 0"), (0.0, 11, "C+ 1"), (1.0, 11, "C- 1")]
    >>> b = breakdown(switches, marks)
    >>> b["span_s"], b["cores"]
    (4.0, {'computing': 4.0, 'not computing': 1.0, 'idle': 3.0, 'other': 0.0})
    >>> b["ranks"][0]["wall_s"], b["ranks"][0]["on_core_s"], b["ranks"][0]["off_share"]
    ([4.0], [3.0], 0.25)
    """
    pid_rank, computes, opened = {}, defaultdict(list), {}
    for t, pid, text in marks:
        kind, _, rank = text.partition(" ")
        if kind not in ("C+", "C-"):
            continue
        pid_rank[pid] = rank = int(rank)
        if kind == "C+":
            opened[rank] = t
        elif rank in opened:
            computes[rank].append((opened.pop(rank), t))
    if not computes:
        raise ValueError("no Compute marks in the trace (was TWINSGD_TRACE_MARKS=1 set?)")
    start = min(a for spans in computes.values() for a, _ in spans)
    end = max(b for spans in computes.values() for _, b in spans)
    on_core = _on_core(switches)
    cores = dict.fromkeys(("computing", "not computing", "idle", "other"), 0.0)
    for pid, intervals in on_core.items():
        held = _overlap(intervals, start, end)
        if pid == 0:
            cores["idle"] += held
        elif pid in pid_rank:
            computing = sum(_overlap(intervals, a, b) for a, b in computes[pid_rank[pid]])
            cores["computing"] += computing
            cores["not computing"] += held - computing
        else:
            cores["other"] += held
    ranks = {}
    for pid, rank in sorted(pid_rank.items(), key=lambda item: item[1]):
        walls = [b - a for a, b in computes[rank]]
        on = [_overlap(on_core.get(pid, []), a, b) for a, b in computes[rank]]
        ranks[rank] = {
            "computes": len(walls),
            "wall_s": walls,
            "on_core_s": on,
            "off_share": 1.0 - sum(on) / sum(walls) if sum(walls) > 0 else 0.0,
        }
    return {"span_s": end - start, "cores": cores, "ranks": ranks}


def report(result):
    """The breakdown as Markdown lines."""
    total = sum(result["cores"].values()) or 1.0
    lines = [
        f"over {result['span_s']:.3f} s: "
        + ", ".join(f"{kind} {100 * s / total:.1f} %" for kind, s in result["cores"].items())
        + " of the cores' time",
        "",
        "| rank | computes | wall median (ms) | wall mean (ms) | on a core median (ms) | off "
        "its core (%) |",
        "|---|---|---|---|---|---|",
    ]
    for rank, r in result["ranks"].items():
        lines.append(
            f"| {rank} | {r['computes']} | {1e3 * statistics.median(r['wall_s']):.3f} | "
            f"{1e3 * statistics.fmean(r['wall_s']):.3f} | "
            f"{1e3 * statistics.median(r['on_core_s']):.3f} | {100 * r['off_share']:.1f} |"
        )
    return lines


def _write(name, value):
    (TRACEFS / name).write_text(value)


def trace(command, out):
    """Run ``command`` (a list) with the scheduler traced and marks on; the trace's path. The
    trace's settings are put back as they were."""
    clock = (TRACEFS / "trace_clock").read_text().split("[", 1)[1].split("]", 1)[0]
    buffer_kb = (TRACEFS / "buffer_size_kb").read_text().split()[0]
    _write("tracing_on", "0")
    _write("trace", "")
    _write("trace_clock", "mono")
    _write("buffer_size_kb", "200000")
    _write("set_event", "sched:sched_switch\n")
    try:
        _write("tracing_on", "1")
        done = subprocess.run(command, env={**os.environ, MARKS_ENV: "1"}, check=False)
        _write("tracing_on", "0")
        path = out / "trace.txt"
        with open(TRACEFS / "trace") as source, open(path, "w") as sink:
            shutil.copyfileobj(source, sink)
    finally:
        _write("tracing_on", "0")
        _write("set_event", "")
        _write("trace", "")
        _write("trace_clock", clock)
        _write("buffer_size_kb", buffer_kb)
    if done.returncode:
        raise RuntimeError(f"the command ended with status {done.returncode}")
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for trace.txt")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.exit(2, "python -m twinsgd.analysis.schedtrace: no command given after --\n")
    if os.geteuid() != 0:
        parser.exit(2, "python -m twinsgd.analysis.schedtrace: needs root (the kernel's trace)\n")
    mounted = not (TRACEFS / "trace_marker").exists()
    if mounted:  # mounted here for this command, unmounted after it
        done = subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=False)
        if done.returncode:
            parser.exit(2, f"python -m twinsgd.analysis.schedtrace: cannot mount {TRACEFS}\n")
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        path = trace(command, args.out)
        with open(path) as lines:
            result = breakdown(*parse(lines))
    except (OSError, RuntimeError, ValueError) as err:  # a command not found is an OSError
        parser.exit(2, f"python -m twinsgd.analysis.schedtrace: {err}\n")
    finally:
        if mounted:
            subprocess.run(["umount", str(TRACEFS)], check=False)
    print("\n".join(report(result)))


if __name__ == "__main__":
    sys.exit(main())
