"""Throughput and bytes on the wire of every gradient codec, on one core.

    python benchmarks/compression.py [--n 1048576] [--reps 30]

Encode, decode (into a preallocated buffer) and add_into of a flat float32 gradient of n entries
(default 2**20, 4 MiB), in GB/s of gradient (4 n bytes / seconds, 1 GB = 1e9 bytes), each the
median over ``--reps`` timed calls after 3 warm-up calls that are discarded. Two gradients: random
normal, and a heavy-tailed "real-looking" one (Student t with 3 degrees of freedom). The threshold
codec gets T = the 99th percentile of |g| of each gradient, so it keeps about 1%. ``topk+EF`` is
topk:0.01 under error feedback (encode includes the residual update). "wire/dense" is
``msg.nbytes / (4 n)``. The target (issue): every codec encodes at >= 0.5 GB/s.

One core: BLAS threads are set to 1 before numpy loads and the process is pinned to one CPU. The
load average is printed, since other processes on the machine slow the figures down.
"""

import argparse
import os
import platform
import sys
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy is imported: BLAS reads these at load time

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from twinsgd.programs.compression import ErrorFeedback, make_codec  # noqa: E402

TARGET_GBPS = 0.5
WARMUP = 3


def median_seconds(fn, reps):
    """Median seconds of ``fn()`` over ``reps`` calls, after `WARMUP` discarded calls."""
    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def gradients(n, seed=0):
    """The two test gradients, name -> (n,) float32."""
    rng = np.random.default_rng(seed)
    return {
        "normal": rng.standard_normal(n).astype(np.float32),
        "t(3)": (1e-3 * rng.standard_t(3, n)).astype(np.float32),
    }


def cases(g):
    """(label, codec, error feedback?) for one gradient."""
    threshold = float(np.quantile(np.abs(g), 0.99))
    specs = [
        "none",
        "topk:0.01",
        f"threshold:{threshold:.4g}",
        "randomk:0.01",
        "qsgd:16",
        "sign",
        "fp16",
    ]
    rows = [(spec, make_codec(spec), False) for spec in specs]
    rows.append(("topk:0.01+EF", make_codec("topk:0.01"), True))
    return rows


def measure(g, codec, feedback, reps, seed=0):
    """(encode s, decode s, add_into s, nbytes) of one codec on one gradient."""
    n = g.shape[0]
    rng = np.random.default_rng(seed)
    sender = ErrorFeedback(codec, n) if feedback else codec
    msg = sender.encode(g, rng)
    out, acc = np.empty(n, np.float32), np.zeros(n, np.float32)
    t_encode = median_seconds(lambda: sender.encode(g, rng), reps)
    t_decode = median_seconds(lambda: codec.decode(msg, out=out), reps)
    t_add = median_seconds(lambda: codec.add_into(msg, acc), reps)
    return t_encode, t_decode, t_add, msg.nbytes


def environment():
    """One line: Python, numpy, BLAS (as threadpoolctl sees it), CPU, load average."""
    try:
        from threadpoolctl import threadpool_info

        blas = [
            f"{i['internal_api']} {i['version']} ({i.get('architecture')}, "
            f"{i['num_threads']} thread)"
            for i in threadpool_info()
        ]
    except ImportError:
        blas = ["threadpoolctl not installed"]
    cpu = platform.processor() or platform.machine()
    with open("/proc/cpuinfo") if Path("/proc/cpuinfo").exists() else open(os.devnull) as f:
        names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"Python {platform.python_version()}, numpy {np.__version__}, {'; '.join(blas)}\n"
        f"CPU {names[0] if names else cpu}; load average {load}"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2**20, help="gradient length (float32 entries)")
    parser.add_argument("--reps", type=int, default=30, help="timed repetitions per figure")
    args = parser.parse_args(argv)
    if args.n < 1 or args.reps < 1:
        parser.error(f"--n and --reps must be >= 1, got {args.n} and {args.reps}")
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    n = args.n
    gb = 4 * n / 1e9
    print(environment())
    print(
        f"n = {n} float32 ({4 * n / 2**20:.2f} MiB), median of {args.reps} after {WARMUP} "
        f"warm-up; target encode >= {TARGET_GBPS} GB/s\n"
    )
    print(
        f"{'gradient':<8} {'codec':<18} {'encode GB/s':>11} {'decode GB/s':>11} "
        f"{'add_into GB/s':>13} {'wire bytes':>11} {'wire/dense':>10}"
    )
    slow = []
    for gname, g in gradients(n).items():
        for label, codec, feedback in cases(g):
            t_enc, t_dec, t_add, nbytes = measure(g, codec, feedback, args.reps)
            print(
                f"{gname:<8} {label:<18} {gb / t_enc:>11.2f} {gb / t_dec:>11.2f} "
                f"{gb / t_add:>13.2f} {nbytes:>11d} {nbytes / (4 * n):>10.4f}"
            )
            if gb / t_enc < TARGET_GBPS:
                slow.append(f"{gname} {label}")
    print("\nbelow target: " + (", ".join(slow) if slow else "none"))


if __name__ == "__main__":
    main()
