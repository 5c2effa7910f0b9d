"""How long does this machine remember its load? A probe for machines whose speed follows it.

    python scripts/load_memory_probe.py [--bin 0.2] [--before 10] [--busy 10] [--after 30]
                                        [--out probe.json]

One process pinned to the first core of this process's affinity computes the MLP's training
step (batch 100, 1 BLAS thread, as `real.machine_bench.measure_busy_cores` does) without a
break, in bins of ``--bin`` seconds, and reports each bin's median step. The other cores' pinned
processes stay idle for ``--before`` bins, compute for ``--busy`` bins, then stay idle for
``--after`` bins. Printed: one line per phase, the watcher's median step per bin in ms;
``--out`` keeps the bins, the phases and the busy processes' own medians as JSON.

Why: on the 16-vCPU machine lent on 2026-12-04, one process alone took 1.17-1.74 ms a step
before the 16 ran at once and 1.78-2.84 ms for seconds after (`scripts/core_speed_probe.py`), so
`[compute.busy]`'s "alone" windows, each right after a window of k processes, measured k at once
as faster than one alone (0.79-0.90x) where the runs were slower (docs/validation.md). How long
the slowdown lasts decides how a measurement can cancel it.
"""

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from real.machine_bench import busy_worker, finish_window, start_window, stop_workers, window
from scripts.core_speed_probe import BATCH, MODEL, print_and_keep
from twinsgd.data import load_dataset


def probe(bin_s, before, busy, after):
    """The watcher's median step (s) per bin, and the busy processes' medians of their window."""
    dataset = load_dataset("mnist-subset", None, allow_download=False)
    cores = sorted(os.sched_getaffinity(0))
    workers = [busy_worker(MODEL, dataset, BATCH, i, cpu=c) for i, c in enumerate(cores)]
    watcher, others = workers[0], workers[1:]
    bins, others_s = [], []
    try:
        window(workers, bin_s)  # every process warm
        window([watcher], 10 * bin_s)  # and the machine idle but for the watcher, a while
        for i in range(before + busy + after):
            if i == before and others:  # the others compute for the busy bins, at once
                start_window(others, busy * bin_s)
            bins.append(window([watcher], bin_s)[0])
            if i == before + busy - 1 and others:
                others_s = finish_window(others)
    finally:
        stop_workers(workers)
    return {
        "cores": cores,
        "bin_s": bin_s,
        "phases": {"before": before, "busy": busy, "after": after},
        "watcher_s": bins,
        "others_s": others_s,
    }


def report(result):
    """The watcher's bins as one line of milliseconds per phase."""
    bins, phases = result["watcher_s"], result["phases"]
    lines = [
        f"cores {result['cores']}: the first computes throughout, the others in 'busy'; "
        f"{result['bin_s']} s bins, the watcher's median step (ms)"
    ]
    start = 0
    for name, count in phases.items():
        part = bins[start : start + count]
        lines.append(f"{name}: " + " ".join(f"{1e3 * s:.2f}" for s in part))
        start += count
    if result["others_s"]:
        lines.append("the others, busy: " + " ".join(f"{1e3 * s:.2f}" for s in result["others_s"]))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", type=float, default=0.2, metavar="S", help="seconds a bin")
    parser.add_argument("--before", type=int, default=10, help="bins before the others compute")
    parser.add_argument("--busy", type=int, default=10, help="bins the others compute")
    parser.add_argument("--after", type=int, default=30, help="bins after")
    parser.add_argument("--out", metavar="FILE", help="every number as JSON")
    args = parser.parse_args(argv)
    if args.bin <= 0 or min(args.before, args.busy, args.after) < 1:
        parser.exit(2, "load_memory_probe: --bin must be > 0 and the bin counts >= 1\n")
    return print_and_keep(probe(args.bin, args.before, args.busy, args.after), report, args.out)


if __name__ == "__main__":
    sys.exit(main())
