"""What a run's compute is made of, piece by piece, from its timeline.json: the program's own
code after each kind of operation, and the gradients (``python -m twinsgd.analysis.compare
--own-code``).

Why: a compute error in the validation table is a sum. The own code right after a Send and
right after a Recv can be off in opposite directions and cancel at one scale and not at another
(docs/validation.md, 2026-12-05), and a gradient's mean hides whether some lost their core for a
turn. Read the same way from a measured and a simulated run folder (their timelines share one
format), the pieces say which part of the model to look at.

A piece of own code is the ``local`` events that follow an operation, joined (the real clock
splits them where a step ends), named by the operation's kind: its event's first word (``send
to 3`` and ``send`` alike; a measured run's wait before an operation and a compressed
payload's wire bytes written and read around it are parts of it). Pieces of at most
`MIN_LOCAL_EVENT_S` (10 us), which a measured run does not draw, are left out of every run
alike. Gradients are the ``compute`` events; the share of them at `LONG_GRADIENT` times their
median or more is the share that lost time to something (a turn on a shared core, mostly).
Compute charged inside an operation (a simulated rank waiting for a core before its own code
runs; a measured run has no such event) is its own row.
"""

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from twinsgd.run.runlog import MIN_LOCAL_EVENT_S, READ_WIRE, WRITE_WIRE

LONG_GRADIENT = 1.5  # a gradient this many times the run's median or more is counted as long


def pieces(folder):
    """The own code's pieces of ``folder``/timeline.json by role, the gradients (s), the compute
    charged inside operations (s, summed), and the ranks drawn. The pieces are {(kind of
    operation, role): [seconds]}, a role the ranks that do the same kinds of operations (a
    parameter server's and its workers' own code apart: pooled, a server's update after its
    Recv read as a worker's next batch), named as `ranks_text` names them; with {role: its
    ranks, sorted}. ValueError naming the file if it does not read as a timeline."""
    path = Path(folder) / "timeline.json"
    try:
        events = json.loads(path.read_text())["traceEvents"]
        by_rank = defaultdict(list)
        for e in events:
            if e.get("ph") == "X":
                by_rank[e["tid"]].append((e["ts"], e["dur"] * 1e-6, e["name"], e["cat"]))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a timeline ({type(err).__name__}: {err})") from None
    by_role, gradients, inside = defaultdict(dict), [], 0.0  # role's kinds -> {rank: pieces}
    for rank, rank_events in by_rank.items():
        rank_events.sort()
        after, kinds = defaultdict(list), set()
        before, piece = None, 0.0  # the operation the own code follows, its seconds so far
        for _, seconds, name, kind in rank_events:
            if name == "local":
                piece += seconds
                continue
            if before is not None and piece > MIN_LOCAL_EVENT_S:
                after[before].append(piece)
            piece = 0.0
            if name == "compute":
                gradients.append(seconds)
            elif kind == "compute":
                inside += seconds
            if kind != "wait" and name not in (WRITE_WIRE, READ_WIRE):  # (parts of operations
                before = name.split()[0]  # on a measured timeline: a Recv's wait, wire bytes)
                kinds.add(before)
        if before is not None and piece > MIN_LOCAL_EVENT_S:
            after[before].append(piece)
        by_role[frozenset(kinds)][rank] = after
    after, roles = defaultdict(list), {}
    for members in by_role.values():
        role = ranks_text(members)
        roles[role] = tuple(sorted(members))
        for rank_after in members.values():
            for kind, rank_pieces in rank_after.items():
                after[kind, role] += rank_pieces
    return dict(after), roles, gradients, inside, len(by_rank)


def ranks_text(ranks):
    """Ranks as a reader writes them: ``rank 0``, ``ranks 1-3``, ``ranks 0, 2, 5-7``."""
    ranks, spans = sorted(ranks), []
    for rank in ranks:
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)
    return f"rank{'s' if len(ranks) > 1 else ''} {text}"


def table(folders, iterations):
    """The Markdown table of ``folders``' pieces side by side (the first as reference), per
    rank and iteration (``iterations``: each run's): own code after each kind of operation,
    by role, us a step and its median piece; the gradients' median and the share long;
    compute inside operations. The last column is the last run over the first."""
    runs = [pieces(f) for f in folders]
    names = [Path(f).name for f in folders]
    ratio = len(runs) > 1
    head = " | ".join(names) + (f" | {names[-1]} / {names[0]}" if ratio else "")
    lines = [f"| own code and gradients | {head} |", "|---" * (len(names) + 1 + ratio) + "|"]

    def row(label, values, cells):
        last = ""
        if ratio:
            first, final = values[0], values[-1]
            last = f" {final / first:.2f} |" if first and final is not None else " - |"
        lines.append(f"| {label} | " + " | ".join(cells) + " |" + last)

    def per_step(seconds, ranks, n):
        return 1e6 * seconds / (ranks * n) if ranks and n else None

    def text(value):
        return "-" if value is None else f"{value:.1f}"

    first = {role: ranks[0] for _, roles, *_ in runs for role, ranks in roles.items()}
    keys = {key for after, *_ in runs for key in after}
    for kind, role in sorted(keys, key=lambda key: (first[key[1]], key[0])):  # a role's together
        steps = [
            per_step(sum(after.get((kind, role), ())), len(roles.get(role, ())), n)
            for (after, roles, *_), n in zip(runs, iterations, strict=True)
        ]
        medians = [
            1e6 * float(np.median(a[kind, role])) if a.get((kind, role)) else None for a, *_ in runs
        ]
        cells = [f"{text(s)} ({text(m)})" for s, m in zip(steps, medians, strict=True)]
        row(f"after {kind}, {role}: us a step (median piece)", steps, cells)
    gradients = [g for _, _, g, _, _ in runs]
    medians = [1e6 * float(np.median(g)) if g else None for g in gradients]
    row("gradient: median (us)", medians, map(text, medians))
    long = [
        100 * float(np.mean(np.array(g) >= LONG_GRADIENT * np.median(g))) if g else None
        for g in gradients
    ]
    row(f"gradients at {LONG_GRADIENT:g}x the median or more (%)", long, map(text, long))
    inside = [per_step(s, ranks, n) for (*_, s, ranks), n in zip(runs, iterations, strict=True)]
    row("compute inside operations: us a step", inside, map(text, inside))
    return "\n".join(lines)


def cells_text(folder):
    """The own code of every cell of a validation folder (``NET/CONFIG-H``, `analysis.validate`)
    whose row is "ok": a heading, then `table` of its measured runs and its simulated one, the
    simulated over the first measured; a cell whose folders have no timeline says so in a line.
    Why: where a row's compute misses, which piece of it does is the next question, and with
    the tables written beside the table a round answers it without a run of its own."""
    from twinsgd.analysis.compare import read_run  # (compare imports this module)

    parts = ["# Own code by role, measured and simulated (`analysis.compare --own-code`)"]
    for row_file in sorted(Path(folder).glob("*/*/row.json")):
        cell = row_file.parent
        row = json.loads(row_file.read_text())
        if row.get("status") != "ok":
            continue
        reals = [p for p in cell.glob("real-*[0-9]") if p.is_dir()]
        runs = [*sorted(reals, key=lambda p: int(p.name.split("-")[-1])), cell / "sim"]
        parts.append(f"## {row['network']}, {row['config']}, {row['hosts']} hosts")
        try:
            iterations = [read_run(run)[0]["iterations"] for run in runs]
            parts.append(table(runs, iterations))
        except ValueError as err:
            parts.append(f"not read: {err}")
    return "\n\n".join(parts) + "\n"
