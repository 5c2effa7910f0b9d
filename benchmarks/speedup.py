"""Speedup over rank counts: one ``mpirun`` per (algorithm, N), a table from the run folders.

``python benchmarks/speedup.py --data-dir ../shared/datasets`` trains the MLP (Adam, batch 100 per
rank) for one epoch of MNIST with each algorithm at N = 1, 2, 4, 8, 16 ranks and prints one row per
run, read from its summary.json: seconds of training (evaluation excluded), speedup against the
fastest one-worker run of the same algorithm, time to the target accuracy, final accuracy, and how
the time splits into compute, communication and waiting. The global batch grows with N (100 per
rank), as in the studies this reproduces, so later rows take fewer, larger steps.
"""

import argparse
import os
import tempfile
from pathlib import Path

from runs import train


def run(algorithm, n, args, out):
    """One training run on ``n`` ranks; returns its summary.json as a dict."""
    return train(
        n,
        [
            "--algorithm",
            algorithm,
            "--dataset",
            args.dataset,
            "--epochs",
            "1",
            "--target-accuracy",
            str(args.target),
            *(["--data-dir", args.data_dir] if args.data_dir else []),
        ],
        out,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="folder with mnist/ (default: the usual lookup)")
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--ranks", default="1,2,4,8,16")
    parser.add_argument("--target", type=float, default=0.95)
    args = parser.parse_args(argv)
    ranks = [int(n) for n in args.ranks.split(",")]
    print(
        f"{os.cpu_count()} cores; MLP 784-200-50-10, Adam, batch 100 per rank, 1 epoch of "
        f"{args.dataset}; target accuracy {args.target:.0%}\n"
    )
    print(
        "| algorithm | ranks | steps | training s | speedup | steps/s | time to target s "
        "| final accuracy | compute / comm / wait s per rank |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for algorithm in ("allreduce", "ps"):
            base = None
            for n in ranks:
                if algorithm == "ps" and n < 2:
                    continue
                s = run(algorithm, n, args, Path(tmp) / f"{algorithm}-{n}")
                base = base or s["time_s"]
                reach = s["time_to_target_s"]
                print(
                    f"| {algorithm} | {n} | {s['iterations']} | {s['time_s']:.2f} | "
                    f"{base / s['time_s']:.2f} | {s['iterations_per_s']:.0f} | "
                    f"{'-' if reach is None else f'{reach:.2f}'} | "
                    f"{100 * s['final_test_accuracy']:.2f}% | {s['compute_s']:.2f} / "
                    f"{s['comm_s']:.2f} / {s['wait_s']:.2f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
