"""``python -m twinsgd.analysis.plot KIND RUN ... --out FIG.png``: the studies' figures from run
folders.

Kinds (each one command over run folders, or sweep folders, which stand for their finished points):

- ``accuracy``: test accuracy against epochs and against training time, one line per run.
- ``breakdown``: time per iteration stacked as compute, comm and wait (means over the nodes), one
  bar per run, as the Lomonosov-2 study draws its time figures.
- ``speedup``: against nodes, the speedup in time to a target accuracy over the run with the
  fewest nodes (the Ray study's definition; ``--target-accuracy``), and iterations per second.
- ``predicted``: simulated against measured time per iteration (pairs ``MEASURED,SIMULATED``),
  with the identity line and a relative error band (``--band 0.1``).
- ``timeline``: one strip per rank from steps.csv, each step split into compute, comm and wait.

The figure goes to ``--out`` (PNG, SVG or PDF, by its suffix). Each ``*_data`` function returns the
numbers it plots, read from the run folders alone, so the tests check a figure against its runs.

Exit status: 0; 2 bad input (one line: a folder that is not a finished run, a bad pair).
"""

import csv
import json
import sys
from pathlib import Path

from twinsgd.cli import OneLineParser

KINDS = ("accuracy", "breakdown", "speedup", "predicted", "timeline")
PARTS = (
    ("compute_s", "compute", "#4c72b0"),
    ("comm_s", "comm", "#dd8452"),
    ("wait_s", "wait", "#c44e52"),
)


class Run:
    """One finished run folder: its summary, configuration and logs, read on demand."""

    def __init__(self, folder):
        self.path = Path(folder)
        try:
            self.summary = json.loads((self.path / "summary.json").read_text())
            self.config = json.loads((self.path / "config.json").read_text())
        except (OSError, ValueError) as err:
            raise ValueError(f"{folder}: not a run folder ({err})") from err
        if not isinstance(self.summary, dict) or self.summary.get("status") != "done":
            status = self.summary.get("status") if isinstance(self.summary, dict) else None
            raise ValueError(f"{folder}: run status is {status!r}, not done")
        self.name = self.path.name

    def rows(self, name):
        """The rows of ``metrics.csv`` or ``steps.csv`` as dicts of floats (empty field: None)."""
        try:
            with open(self.path / name, newline="") as fh:
                return [
                    {k: float(v) if v else None for k, v in row.items()}
                    for row in csv.DictReader(fh)
                ]
        except (OSError, ValueError) as err:
            raise ValueError(f"{self.path / name}: cannot read ({err})") from err

    @property
    def steps_per_epoch(self):
        s = self.summary
        return s["iterations"] / s["epochs"] if s.get("epochs") else 1.0

    def per_iteration_ms(self, key):
        """Milliseconds of ``key`` (time_s, compute_s, ...) per iteration, mean over nodes."""
        return 1e3 * self.summary[key] / self.summary["iterations"]


def expand(folders):
    """Run folders, with each sweep folder (holding sweep.csv) replaced by its done points."""
    runs = []
    for folder in map(Path, folders):
        sweep = folder / "sweep.csv"
        if sweep.is_file():
            with open(sweep, newline="") as fh:
                runs += [
                    Run(folder / row["run"])
                    for row in csv.DictReader(fh)
                    if row.get("status") == "done"
                ]
        else:
            runs.append(Run(folder))
    if not runs:
        raise ValueError("no finished run among " + ", ".join(map(str, folders)))
    return runs


# -- the numbers of each figure ------------------------------------------------------------------


def accuracy_data(runs):
    """{run name: (epochs, training seconds, test accuracy)} from each metrics.csv."""
    data = {}
    for run in runs:
        rows = [r for r in run.rows("metrics.csv") if r["test_accuracy"] is not None]
        data[run.name] = (
            [r["iteration"] / run.steps_per_epoch for r in rows],
            [r["time_s"] for r in rows],
            [r["test_accuracy"] for r in rows],
        )
    return data


def breakdown_data(runs):
    """{run name: {compute_s, comm_s, wait_s: milliseconds per iteration}} from summary.json."""
    return {run.name: {key: run.per_iteration_ms(key) for key, _, _ in PARTS} for run in runs}


def time_to_accuracy(run, target):
    """Training seconds until test accuracy first reached ``target``, else None."""
    for row in run.rows("metrics.csv"):
        if row["test_accuracy"] is not None and row["test_accuracy"] >= target:
            return row["time_s"]
    return None


def speedup_data(runs, target):
    """(nodes, speedup in time to ``target`` over the fewest-node run (None where a run never
    reached it), iterations per second), sorted by nodes."""
    runs = sorted(runs, key=lambda r: r.summary["nodes"])
    times = [time_to_accuracy(r, target) for r in runs]
    base = times[0]
    speedups = [base / t if base and t else None for t in times]
    rates = [r.summary["iterations"] / r.summary["time_s"] for r in runs]
    return [r.summary["nodes"] for r in runs], speedups, rates


def predicted_data(pairs):
    """{pair label: (measured, simulated) ms per iteration} for (measured, simulated) runs."""
    return {
        m.name if m.name == s.name else f"{m.name} / {s.name}": (
            m.per_iteration_ms("time_s"),
            s.per_iteration_ms("time_s"),
        )
        for m, s in pairs
    }


def timeline_data(run, steps=50):
    """{rank: [(start_s, seconds, part) ...]} of the first ``steps`` steps of each rank."""
    data = {}
    for row in run.rows("steps.csv"):
        if row["iteration"] > steps:
            continue
        start = row["time_s"] - sum(row[key] for key, _, _ in PARTS)
        for key, part, _ in PARTS:
            data.setdefault(int(row["rank"]), []).append((start, row[key], part))
            start += row[key]
    return data


# -- the figures -----------------------------------------------------------------------------------


def plot(kind, runs, out, target=None, band=0.1, steps=50):
    """Draw figure ``kind`` of ``runs`` (for ``predicted``: (measured, simulated) pairs) into the
    file ``out``; return the numbers drawn (the ``*_data`` of that kind)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        1,
        2 if kind in ("accuracy", "speedup") else 1,
        figsize=(10 if kind in ("accuracy", "speedup", "timeline") else 6, 4),
        squeeze=False,
    )
    axes = axes[0]
    data = _DRAW[kind](axes, runs, target=target, band=band, steps=steps)
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, bbox_inches="tight")  # and legends placed outside
    plt.close(fig)
    return data


def _draw_accuracy(axes, runs, **_):
    data = accuracy_data(runs)
    for name, (epochs, seconds, accuracy) in data.items():
        axes[0].plot(epochs, [100 * a for a in accuracy], marker=".", label=name)
        axes[1].plot(seconds, [100 * a for a in accuracy], marker=".", label=name)
    for ax, label in zip(axes, ("epochs", "training time (s)"), strict=True):
        ax.set(xlabel=label, ylabel="test accuracy (%)")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize="small")
    return data


def _draw_breakdown(axes, runs, **_):
    data, ax = breakdown_data(runs), axes[0]
    names, bottom = list(data), [0.0] * len(data)
    for key, part, colour in PARTS:
        heights = [data[n][key] for n in names]
        ax.bar(names, heights, bottom=bottom, label=part, color=colour)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set(ylabel="time per iteration (ms)")
    ax.figure.set_size_inches(max(6.0, 0.8 * len(names)), 4)  # room for every bar's name
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", rotation_mode="anchor")
    ax.legend()
    return data


def _draw_speedup(axes, runs, target, **_):
    if target is None:
        raise ValueError("speedup needs --target-accuracy A (time to A defines the speedup)")
    nodes, speedups, rates = data = speedup_data(runs, target)
    reached = [(n, s) for n, s in zip(nodes, speedups, strict=True) if s is not None]
    axes[0].plot([n for n, _ in reached], [s for _, s in reached], marker="o", label="measured")
    axes[0].plot(nodes, [n / nodes[0] for n in nodes], ls="--", color="grey", label="linear")
    axes[0].set(xlabel="nodes", ylabel=f"speedup to {100 * target:g}% accuracy")
    axes[0].legend()
    axes[1].plot(nodes, rates, marker="o")
    axes[1].set(xlabel="nodes", ylabel="iterations per second")
    for ax in axes:
        ax.grid(alpha=0.3)
    return data


def _draw_predicted(axes, pairs, band, **_):
    data, ax = predicted_data(pairs), axes[0]
    values = [v for pair in data.values() for v in pair]
    hi = 1.1 * max(values)
    # spread over more than a decade: log axes, or the small runs crowd into a corner
    lo = 0.9 * min(values) if max(values) > 20 * min(values) > 0 else 0.0
    line = [lo, hi]
    ax.fill_between(
        line,
        [x * (1 - band) for x in line],
        [x * (1 + band) for x in line],
        color="grey",
        alpha=0.2,
        label=f"±{100 * band:g}%",
    )
    ax.plot(line, line, color="grey", lw=1, label="identity")
    for label, (m, s) in data.items():
        ax.plot([m], [s], marker="o", ls="", label=label)
    ax.set(
        xlabel="measured (ms per iteration)",
        ylabel="simulated (ms per iteration)",
        xlim=(lo, hi),
        ylim=(lo, hi),
    )
    if lo:
        ax.set(xscale="log", yscale="log")
    ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.02, 0.5))
    return data


def _draw_timeline(axes, runs, steps, **_):
    run, ax = runs[0], axes[0]
    data = timeline_data(run, steps)
    colours = {part: colour for _, part, colour in PARTS}
    for rank, spans in data.items():
        for part in colours:
            mine = [(start, width) for start, width, p in spans if p == part]
            ax.broken_barh(
                mine,
                (rank - 0.4, 0.8),
                color=colours[part],
                label=part if rank == min(data) else None,
            )
    ax.set(
        xlabel="training time (s)",
        ylabel="rank",
        title=f"{run.name}: first {steps} steps",
        yticks=sorted(data),
    )
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.08), ncol=3, frameon=False)
    return data


_DRAW = {
    "accuracy": _draw_accuracy,
    "breakdown": _draw_breakdown,
    "speedup": _draw_speedup,
    "predicted": _draw_predicted,
    "timeline": _draw_timeline,
}


def _pairs(specs):
    pairs = []
    for spec in specs:
        measured, comma, simulated = spec.partition(",")
        if not comma:
            raise ValueError(f"predicted takes MEASURED,SIMULATED run-folder pairs, got {spec!r}")
        pairs.append((Run(measured), Run(simulated)))
    return pairs


def main(argv=None):
    parser = OneLineParser(
        prog="python -m twinsgd.analysis.plot",
        description="Figures from run folders (PNG, SVG or PDF).",
    )
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="run or sweep folders; for predicted, MEASURED,SIMULATED pairs",
    )
    parser.add_argument(
        "--out",
        default=None,
        metavar="FIG.png|svg|pdf",
        help="the figure (default: KIND.png in the first run folder)",
    )
    parser.add_argument(
        "--target-accuracy",
        type=float,
        default=None,
        metavar="A",
        help="speedup: the accuracy in (0, 1] whose time defines it",
    )
    parser.add_argument("--band", type=float, default=0.1, help="predicted: relative error band")
    parser.add_argument("--steps", type=int, default=50, help="timeline: steps drawn per rank")
    args = parser.parse_args(argv)
    if args.out is None:  # beside the data it draws
        first = args.runs[0].split(",")[0]
        args.out = str(Path(first) / f"{args.kind}.png")
    if Path(args.out).suffix.lower() not in (".png", ".svg", ".pdf"):
        parser.error(f"--out must end in .png, .svg or .pdf, got {args.out}")
    try:
        runs = _pairs(args.runs) if args.kind == "predicted" else expand(args.runs)
        plot(args.kind, runs, args.out, args.target_accuracy, args.band, args.steps)
    except OSError as err:  # the figure cannot be written there
        parser.error(f"--out {args.out}: cannot write it ({err.strerror or err})")
    except ValueError as err:
        parser.error(str(err))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
