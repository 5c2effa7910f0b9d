"""``python -m twinsgd.analysis.recommend``: which configuration trains fastest to a target
accuracy on a given cluster, by simulation.

Examples
--------
::

    python -m twinsgd.analysis.recommend --profile lomonosov-2-like --model mlp --nodes 16
    python -m twinsgd.analysis.recommend --profile runs/emulated.toml --nodes 4 \\
        --target-accuracy 0.9 \\
        --compute empirical --epochs 2

Every candidate (architecture, synchronisation period, topology, codec: the axes of the
Lomonosov-2 study, plus a synchronous parameter server and top-k with error feedback) is one
``sim.run`` on the profile, run side by side on a process pool as ``sim.sweep`` runs its points.
The simulator trains the real model, so each candidate's accuracy is its own and its time to the
target is read off the simulated clock (summary.json's ``time_to_target_s``). Candidates that
reach the target are ranked by that time; the others follow, by final accuracy. The table goes
to stdout with the best choice and why; every run folder stays under ``--out``.

Exit status: 0 (a candidate reached the target), 1 (none did: the table says how close each
came), 2 bad input.
"""

import concurrent.futures
import csv
import logging
import math
import multiprocessing
import os
import sys
import tempfile
from pathlib import Path

from sim.sweep import run_point
from twinsgd.analysis.study import markdown
from twinsgd.cli import OneLineParser
from twinsgd.programs.ghost import TRAIN_EXAMPLES

logger = logging.getLogger(__name__)

BASELINE = "allreduce every step"


def candidates(nodes):
    """``(name, sim.run flags)`` of every configuration worth trying on ``nodes`` nodes."""
    out = [(BASELINE, ["--algorithm", "allreduce"])]
    out += [
        (f"Local-SGD({p}), allreduce", ["--algorithm", "allreduce", "--local-steps", str(p)])
        for p in (4, 16)
    ]
    out.append(
        (
            "allreduce, top-k 1 % + error feedback",
            ["--algorithm", "allreduce", "--compress", "topk:0.01", "--error-feedback"],
        )
    )
    if nodes > 2:
        for p in (1, 4, 16):
            gossip = ["--algorithm", "gossip", "--topology", "rotating", "--local-steps", str(p)]
            out.append((f"Local-SGD({p}), gossip", gossip))
            out.append(
                (f"Local-SGD({p}), gossip + threshold", [*gossip, "--compress", "threshold:0.01"])
            )
    out.append(("parameter server (sync, 1 server)", ["--algorithm", "ps"]))
    return out


def build_parser():
    parser = OneLineParser(
        prog="python -m twinsgd.analysis.recommend",
        description="Rank configurations by simulated time to a target accuracy on a cluster.",
    )
    parser.add_argument(
        "--profile",
        required=True,
        metavar="NAME|FILE.toml",
        help="cluster profile (polus-like, lomonosov-2-like, or real.calibrate's)",
    )
    parser.add_argument("--nodes", type=int, required=True, help="ranks of the run")
    parser.add_argument("--model", default="mlp", choices=("mlp", "cnn"))
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--batch-size", type=int, default=32, help="per rank (default 32)")
    parser.add_argument("--epochs", type=int, default=1, help="epochs each candidate trains")
    parser.add_argument(
        "--target-accuracy",
        type=float,
        default=None,
        help="test accuracy in (0, 1] (default: what the data allow: 95 %% of the best "
        "final accuracy of the candidates, in whole percent)",
    )
    parser.add_argument(
        "--evaluations",
        type=int,
        default=20,
        help="evaluations per epoch: the resolution of the time to the target "
        "(simulated evaluation takes no simulated time; default 20)",
    )
    parser.add_argument(
        "--compute",
        default="profile",
        choices=("profile", "empirical"),
        help="compute time from the profile's rates or its measured step times",
    )
    parser.add_argument("--out", default=None, help="folder of the candidates' run folders")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="candidates simulated at once (default: one per CPU)",
    )
    return parser


def rank(results):
    """Sort ``[(name, flags, summary or None, status)]``: reached the target first, by time to
    it; then the rest by final accuracy, best first; failed runs last."""

    def key(item):
        summary = item[2]
        if summary is None:
            return (2, 0.0)
        if summary.get("time_to_target_s") is not None:
            return (0, summary["time_to_target_s"])
        return (1, -(summary.get("final_test_accuracy") or 0.0))

    return sorted(results, key=key)


def report(ranked, target):
    """The ranking table and the recommendation with its reason, as text."""
    base = next((r[2] for r in ranked if r[0] == BASELINE and r[2]), None)
    rows = []
    for i, (name, _, s, status) in enumerate(ranked, start=1):
        if s is None:
            rows.append([i, name, status, "", "", ""])
            continue
        t = s.get("time_to_target_s")
        rows.append(
            [
                i,
                name,
                "not reached" if t is None else f"{t:.3f}",
                f"{100 * s['final_test_accuracy']:.2f} %",
                f"{1e3 * s['time_s'] / s['iterations']:.3f}",
                f"{100 * (s['comm_s'] + s['wait_s']) / s['time_s']:.0f} %",
            ]
        )
    lines = [
        markdown(
            [
                "rank",
                "configuration",
                f"s to {100 * target:.0f} %",
                "final accuracy",
                "ms per iteration",
                "comm + wait",
            ],
            rows,
        )
    ]
    name, flags, best, _ = ranked[0]
    if best is None or best.get("time_to_target_s") is None:
        lines.append(
            f"\nNo configuration reached {100 * target:.0f} % in the epochs simulated; "
            "train longer (--epochs) or lower --target-accuracy."
        )
        return "\n".join(lines)
    why = f"it reaches {100 * target:.0f} % in {best['time_to_target_s']:.3f} simulated s"
    if base and base is not best and base.get("time_to_target_s"):
        why += (
            f", {base['time_to_target_s'] / best['time_to_target_s']:.2f}x sooner than {BASELINE}"
        )
    share = (best["comm_s"] + best["wait_s"]) / best["time_s"]
    why += f"; communication and waiting are {100 * share:.0f} % of its time"
    if base and base is not best:
        why += (
            f" against {100 * (base['comm_s'] + base['wait_s']) / base['time_s']:.0f} % "
            f"for {BASELINE}"
        )
    lines.append(f"\nRecommended: {name} ({' '.join(flags)}): {why}.")
    return "\n".join(lines)


def data_target(summaries):
    """The default target: 95 % of the best final test accuracy among ``summaries`` (None for a
    candidate that failed), rounded down to a whole percent, at least 1 %.

    >>> data_target([{"final_test_accuracy": 0.813}, None, {"final_test_accuracy": 0.7}])
    0.77
    """
    best = max(s["final_test_accuracy"] for s in summaries if s is not None)
    return max(1, math.floor(95 * best)) / 100


def time_to(folder, target):
    """Seconds on the run's clock to its first evaluation at ``target`` test accuracy or above
    (metrics.csv's time_s), None if it never got there."""
    with open(folder / "metrics.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            if row["test_accuracy"] and float(row["test_accuracy"]) >= target:
                return float(row["time_s"])
    return None


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.nodes < 2:
        parser.error(f"--nodes must be >= 2 (one node has nothing to choose), got {args.nodes}")
    if args.target_accuracy is not None and not 0.0 < args.target_accuracy <= 1.0:
        parser.error(f"--target-accuracy must be in (0, 1], got {args.target_accuracy}")
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    if args.evaluations < 1:
        parser.error(f"--evaluations must be >= 1, got {args.evaluations}")
    out = Path(args.out or tempfile.mkdtemp(prefix="recommend-"))
    steps_per_epoch = TRAIN_EXAMPLES.get(args.dataset, 10_000) // (args.nodes * args.batch_size)
    shared = [
        "--nodes",
        str(args.nodes),
        "--profile",
        args.profile,
        "--model",
        args.model,
        "--dataset",
        args.dataset,
        "--batch-size",
        str(args.batch_size),
        "--epochs",
        str(args.epochs),
        "--target-accuracy",
        str(args.target_accuracy or 0.9),
        "--compute",
        args.compute,
        "--collectives",
        "closed-form",
        "--no-progress",
        "--overwrite",
        "--eval-every",
        str(max(1, steps_per_epoch // args.evaluations)),
    ]
    todo = candidates(args.nodes)
    argvs = [[*flags, *shared, "--out", str(out / f"{i:02d}")] for i, (_, flags) in enumerate(todo)]
    workers = min(args.workers or os.cpu_count() or 1, len(todo))
    logger.info(
        f"{len(todo)} configurations on {args.nodes} nodes of {args.profile}, run folders in {out}"
    )
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=spawn) as pool:
        outcomes = list(pool.map(run_point, argvs))
    bad = [o["status"] for o in outcomes if o["summary"] is None]
    if len(bad) == len(outcomes):  # every candidate refused: the shared input is at fault
        parser.error(bad[0].removeprefix("failed: "))
    target = args.target_accuracy
    if target is None:  # what the data allow, read off every candidate's evaluations
        target = data_target([o["summary"] for o in outcomes])
        for argv, o in zip(argvs, outcomes, strict=True):
            if o["summary"] is not None:
                o["summary"]["time_to_target_s"] = time_to(Path(argv[-1]), target)
        logger.info(
            f"target {100 * target:.0f} % test accuracy, 95 % of the best final "
            f"accuracy the candidates reach in {args.epochs} epoch(s) on this data; "
            f"--target-accuracy sets another"
        )
    ranked = rank(
        [
            (name, flags, o["summary"], o["status"])
            for (name, flags), o in zip(todo, outcomes, strict=True)
        ]
    )
    print(report(ranked, target))
    return 0 if ranked[0][2] and ranked[0][2].get("time_to_target_s") is not None else 1


if __name__ == "__main__":
    sys.exit(main())
