"""The ten configurations of the Lomonosov-2 study, one command each, one table.

``python benchmarks/study.py --data-dir ../shared/datasets`` trains the MLP (batch 32 per rank, the
study's) for one epoch of MNIST on 8 ranks with Local-SGD(p) for p in 1, 4, 16 over allreduce,
over gossip with partners at a rotating distance, and over that gossip with threshold
sparsification (CHOCO per edge), and Local-SGD(32) over allreduce; then prints accuracy, training
time, communication and waiting per rank, and bytes per iteration, with each command.
"""

import argparse
import os
import tempfile
from pathlib import Path

from twinsgd.analysis.study import LOMONOSOV_CONFIGURATIONS as CONFIGURATIONS

from runs import train


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="folder with mnist/ (default: the usual lookup)")
    parser.add_argument("--ranks", type=int, default=8)
    args = parser.parse_args(argv)
    common = [
        "--dataset",
        "mnist",
        "--epochs",
        "1",
        "--batch-size",
        "32",
        *(["--data-dir", args.data_dir] if args.data_dir else []),
    ]
    print(
        f"{os.cpu_count()} cores, {args.ranks} ranks; MLP, Adam, batch 32 per rank, 1 epoch of "
        f"MNIST\n"
    )
    print(
        "| configuration | test accuracy | training s | comm s | wait s | bytes per iteration "
        "| command (with mpirun -n N python -m real.train) |"
    )
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, flags) in enumerate(CONFIGURATIONS):
            s = train(args.ranks, [*common, *flags], Path(tmp) / str(i))
            print(
                f"| {name} | {100 * s['final_test_accuracy']:.2f}% | {s['time_s']:.2f} | "
                f"{s['comm_s']:.2f} | {s['wait_s']:.2f} | {s['bytes_per_iteration']:,.0f} | "
                f"`{' '.join(flags)}` |",
                flush=True,
            )


if __name__ == "__main__":
    main()
