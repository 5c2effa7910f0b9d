"""Is a process's compute speed on this machine a property of its core, of a pairing of cores, or
of the machine's recent load? A probe for machines whose speed moves (a virtual machine's vCPUs).

    python scripts/core_speed_probe.py [--window 0.4] [--trials 10] [--out probe.json]

One process pinned to each core computes the MLP's training step (batch 100, 1 BLAS thread, as
`real.machine_bench.measure_busy_cores` does) in windows of ``--window`` seconds; printed, in ms
(the median step of each window):

1. each core alone, one after the other, twice (a core's speed that persists shows in both);
2. pairs of cores at once: (c, c + n/2) and (2c, 2c + 1), where SMT siblings usually are;
3. all cores at once, three times;
4. each core alone again (a machine that slows after load shows it here);
5. ``--trials`` fresh pairs of unpinned processes, as a 2-rank run's are placed, with the core
   each ended on.

On the 16-vCPU machine lent on 2026-12-04 (docs/validation.md, "Again on 16 cores, 2026-12-04"):
alone 1.17-1.74 ms with no core slow twice, all 16 at once 1.59-3.07 ms, alone afterwards
1.78-2.84 ms. ``--out`` keeps every number and the cores' SMT siblings as JSON.
"""

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from real.machine_bench import busy_worker, stop_workers, window
from twinsgd.data import load_dataset

MODEL, BATCH = "mlp", 100


def _core_of(pid):
    """The core a process last ran on (field 39 of /proc/PID/stat)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[36])


def _siblings(cores):
    folder = "/sys/devices/system/cpu/cpu{}/topology/thread_siblings_list"
    out = {}
    for c in cores:
        try:
            out[c] = Path(folder.format(c)).read_text().strip()
        except OSError:
            out[c] = None
    return out


def probe(seconds, trials):
    """Every measurement above, a dict of lists of seconds (a window's median step)."""
    dataset = load_dataset("mnist-subset", None, allow_download=False)
    cores = sorted(os.sched_getaffinity(0))
    n = len(cores)
    result = {"cores": cores, "siblings": _siblings(cores), "window_s": seconds}
    pinned = [busy_worker(MODEL, dataset, BATCH, i, cpu=c) for i, c in enumerate(cores)]
    try:
        window(pinned, seconds)  # every process warm
        result["alone"] = [[window([w], seconds)[0] for w in pinned] for _ in range(2)]
        half = [(i, i + n // 2) for i in range(n // 2)]
        result["pairs_half"] = {
            f"{cores[a]},{cores[b]}": window([pinned[a], pinned[b]], seconds) for a, b in half
        }
        neighbours = [(2 * i, 2 * i + 1) for i in range(n // 2)]
        result["pairs_next"] = {
            f"{cores[a]},{cores[b]}": window([pinned[a], pinned[b]], seconds) for a, b in neighbours
        }
        result["all"] = [window(pinned, seconds) for _ in range(3)]
        result["alone_after"] = [window([w], seconds)[0] for w in pinned]
    finally:
        stop_workers(pinned)
    result["unpinned"] = []
    for trial in range(trials):
        pair = [busy_worker(MODEL, dataset, BATCH, 100 + 2 * trial + i) for i in range(2)]
        try:
            window(pair, seconds / 2)  # warm
            times = window(pair, seconds)
            result["unpinned"].append(
                [[t, _core_of(w.pid)] for t, w in zip(times, pair, strict=True)]
            )
        finally:
            stop_workers(pair)
    return result


def report(result):
    """The probe's numbers as lines of milliseconds."""

    def ms(seconds):
        return " ".join(f"{1e3 * x:.2f}" for x in seconds)

    lines = [f"cores {result['cores']}, {result['window_s']} s windows, a step's median (ms)"]
    lines += [f"alone, pass {i + 1}: {ms(a)}" for i, a in enumerate(result["alone"])]
    for key, title in (("pairs_half", "pairs (c, c + n/2)"), ("pairs_next", "pairs (2c, 2c + 1)")):
        lines.append(f"{title}: " + ", ".join(f"{k}: {ms(v)}" for k, v in result[key].items()))
    lines += [f"all at once: {ms(a)}" for a in result["all"]]
    lines.append(f"alone, after: {ms(result['alone_after'])}")
    pairs = ", ".join(" ".join(f"{1e3 * t:.2f}@{c}" for t, c in p) for p in result["unpinned"])
    lines.append(f"unpinned pairs (ms@core): {pairs}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=0.4, metavar="S", help="seconds a window")
    parser.add_argument("--trials", type=int, default=10, help="fresh unpinned pairs")
    parser.add_argument("--out", metavar="FILE", help="every number as JSON")
    args = parser.parse_args(argv)
    if args.window <= 0 or args.trials < 0:
        parser.exit(2, "core_speed_probe: --window must be > 0 and --trials >= 0\n")
    return print_and_keep(probe(args.window, args.trials), report, args.out)


def print_and_keep(result, report, out=None):
    """Print ``report(result)`` and, with ``out``, keep ``result`` there as JSON; 0."""
    print(report(result))
    if out:
        Path(out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
