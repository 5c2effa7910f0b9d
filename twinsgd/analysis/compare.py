"""``python -m twinsgd.analysis.compare RUN [RUN ...]``: run folders side by side, the first as
reference.

The twin's check: a measured run (``real.train``) and its prediction (``sim.run`` on a profile of
the same machine) read the same way: time per iteration and its split into compute, comm and wait
(per node, means over nodes), bytes per iteration, the final losses and accuracy, and whether the
final weights are the same bit for bit (they are for synchronous algorithms with the project's
own collectives). Prints a Markdown table; the last column is the last run over the first.
With ``--own-code``, a second table: the compute piece by piece, read from the runs'
timeline.json (`twinsgd.analysis.own_code`).

Exit status: 0; 2 if a folder is not a finished run folder or its files do not read (one line on
stderr); 1 if the table cannot be written (a full disk: one line).
"""

import json
import logging
import os
import sys
import zipfile
from numbers import Real
from pathlib import Path

import numpy as np

from twinsgd.analysis import own_code
from twinsgd.cli import OneLineParser

logger = logging.getLogger(__name__)

ROWS = (  # (label, function of (summary, config) -> number or None, format)
    ("clock", lambda s, c: c.get("clock"), "{}"),
    ("nodes", lambda s, c: s["nodes"], "{}"),
    ("iterations", lambda s, c: s["iterations"], "{}"),
    ("time per iteration (ms)", lambda s, c: _per_iteration(s, s["time_s"]), "{:.3f}"),
    ("  compute (ms)", lambda s, c: _per_iteration(s, s["compute_s"]), "{:.3f}"),
    ("  comm (ms)", lambda s, c: _per_iteration(s, s["comm_s"]), "{:.3f}"),
    ("  wait (ms)", lambda s, c: _per_iteration(s, s["wait_s"]), "{:.3f}"),
    ("bytes per iteration", lambda s, c: s["bytes_per_iteration"], "{:,.0f}"),
    ("final train loss", lambda s, c: s["final_train_loss"], "{:.6f}"),
    ("final test loss", lambda s, c: s["final_test_loss"], "{:.6f}"),
    ("final test accuracy (%)", lambda s, c: _percent(s["final_test_accuracy"]), "{:.2f}"),
)


SUMMARY_NUMBERS = (
    "nodes",
    "iterations",
    "time_s",
    "compute_s",
    "comm_s",
    "wait_s",
    "bytes_per_iteration",
    "final_train_loss",
    "final_test_loss",
    "final_test_accuracy",
)  # what the table reads (None allowed: shown as -)


def _per_iteration(summary, seconds):
    return 1e3 * seconds / summary["iterations"] if summary["iterations"] else None


def _percent(fraction):
    return None if fraction is None else 100 * fraction


def read_run(folder):
    """(summary, config) of a run folder; ValueError naming it if it is not a finished run."""
    folder = Path(folder)
    try:
        summary = json.loads((folder / "summary.json").read_text())
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{folder}: not a run folder ({type(err).__name__}: {err})") from err
    for name, document in (("summary.json", summary), ("config.json", config)):
        if not isinstance(document, dict):
            raise ValueError(
                f"{folder / name}: not a run folder's (a JSON object expected, got "
                f"{type(document).__name__})"
            )
    if summary.get("status") != "done":
        raise ValueError(f"{folder}: run status is {summary.get('status')!r}, not done")
    return summary, config


def check_numbers(folder, summary):
    """ValueError naming summary.json if a number the table reads is missing or not a number."""
    for key in SUMMARY_NUMBERS:
        value = summary.get(key, "missing")
        if value is not None and (isinstance(value, bool) or not isinstance(value, Real)):
            raise ValueError(
                f"{Path(folder) / 'summary.json'}: {key} must be a number, got {value!r}"
            )


def same_weights(a, b):
    """'bit for bit' if two run folders' model.npz hold equal arrays, else the largest absolute
    difference; 'different shapes' for weights of two different models (an MNIST MLP beside a
    CIFAR MLP: comparing the runs is legitimate, their weights are not comparable); '-' when
    either has none; ValueError naming a model.npz that does not read (truncated, not an npz)."""
    paths = [Path(a) / "model.npz", Path(b) / "model.npz"]
    if not all(p.exists() for p in paths):
        return "-"
    try:
        with (
            open(paths[0], "rb") as fa,
            open(paths[1], "rb") as fb,
            np.load(fa) as wa,
            np.load(fb) as wb,
        ):  # our handles: closed even when np.load fails
            if not wa.files or not wb.files:
                return "-"
            if wa.files != wb.files or any(wa[k].shape != wb[k].shape for k in wa.files):
                return "different shapes"
            if all(np.array_equal(wa[k], wb[k]) for k in wa.files):
                return "bit for bit"
            largest = max(float(np.max(np.abs(wa[k] - wb[k]))) for k in wa.files)
            return f"differ by up to {largest:.3g}"
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(
            f"{paths[0]} or {paths[1]}: does not read as weights ({type(err).__name__}: {err})"
        ) from None


PROVENANCE = (  # (label, function of config -> text or None): shown when the runs differ
    ("MPI library", lambda c: c.get("mpi")),
    ("launcher", lambda c: c.get("launcher")),
    ("profile", lambda c: (c.get("cluster") or {}).get("profile")),
    ("profile sha256", lambda c: _short((c.get("cluster") or {}).get("profile_sha256"))),
    ("twinsgd", lambda c: _code(c.get("versions") or {})),
)


def _short(digest):
    return digest[:12] if digest else None


def _code(versions):
    commit = versions.get("twinsgd_commit")
    return f"{versions.get('twinsgd')} ({commit})" if commit else versions.get("twinsgd")


def provenance_rows(configs):
    """Rows of what made the runs, for each item on which two runs that both say it differ (the
    MPI library, the launcher, the profile or its content, the code): a ratio of two runs of
    different profiles or MPIs compares more than the algorithm."""
    rows = []
    for label, get in PROVENANCE:
        values = [get(c) for c in configs]
        known = {str(v) for v in values if v is not None}  # a measured run has no profile,
        if len(known) > 1:  # a simulated one no MPI: that is no difference between them
            rows.append(f"| {label} (differs) | " + " | ".join(str(v or "-") for v in values))
    return rows


def table(folders):
    """The Markdown table comparing ``folders`` (the first is the reference)."""
    runs = [read_run(f) for f in folders]
    for folder, (summary, _) in zip(folders, runs, strict=True):
        check_numbers(folder, summary)
    names = [Path(f).name for f in folders]
    ratio = len(runs) > 1
    lines = [
        "| | " + " | ".join(names) + (f" | {names[-1]} / {names[0]} |" if ratio else " |"),
        "|---" * (len(names) + 1 + ratio) + "|",
    ]
    for label, get, fmt in ROWS:
        values = [get(*run) for run in runs]
        cells = ["-" if v is None else fmt.format(v) for v in values]
        last = ""
        if ratio:
            first, final = values[0], values[-1]
            numeric = all(isinstance(v, int | float) for v in (first, final))
            last = f" {final / first:.2f} |" if numeric and first else " - |"
        lines.append(f"| {label} | " + " | ".join(cells) + " |" + last)
    if ratio:
        lines.append(
            f"| final weights | {same_weights(folders[0], folders[-1])} |"
            + " |" * (len(names) - 1 + ratio)
        )
    lines += [row + " |" + " - |" * ratio for row in provenance_rows([c for _, c in runs])]
    return "\n".join(lines)


def main(argv=None):
    parser = OneLineParser(
        prog="python -m twinsgd.analysis.compare",
        description="Run folders side by side (the first as reference).",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run folders")
    parser.add_argument(
        "--own-code",
        action="store_true",
        help="also the compute piece by piece from the runs' timeline.json: the program's own "
        "code after each kind of operation, the gradients' median and long ones",
    )
    args = parser.parse_args(argv)
    try:
        text = table(args.runs)
        if args.own_code:
            iterations = [read_run(f)[0]["iterations"] for f in args.runs]
            text += "\n\n" + own_code.table(args.runs, iterations)
    except ValueError as err:
        parser.error(str(err))
    try:
        print(text, flush=True)
    except OSError as err:  # a full disk: one line, and no second one at exit
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (open until the interpreter exits)
        if isinstance(err, BrokenPipeError):  # | head: the reader had enough
            return 0
        logger.error(f"cannot write the table: {err.strerror}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
