"""Our ring and recursive-doubling allreduces against MPI's Allreduce, OSU-style, float32.

Sizes 1 KB to 64 MB.

Run ``python benchmarks/allreduce.py`` (it starts ``mpiexec -n N`` for N = 2, 4, 8 itself) or
``mpiexec -n N python benchmarks/allreduce.py`` for one N. As the OSU micro-benchmarks do it: a
barrier before each size, warm-up repetitions discarded, fewer repetitions for large sizes, the
median over repetitions of the slowest rank's time. Bus bandwidth = algbw x 2(N-1)/N (the bytes each
rank must move in a bandwidth-optimal allreduce), so both columns read against the link speed.
"""

import os
import subprocess
import sys
from pathlib import Path
from time import perf_counter

import numpy as np

SIZES = [2**k for k in range(10, 27)]  # 1 KiB .. 64 MiB


def _repetitions(nbytes):
    return (200, 20) if nbytes <= 64 * 1024 else (30, 5) if nbytes <= 4 * 2**20 else (8, 2)


def _time(comm, fn, reps, warmup):
    """Median over repetitions of the slowest rank's seconds for ``fn()``."""
    from mpi4py import MPI

    times = []
    for i in range(warmup + reps):
        comm.Barrier()
        t0 = perf_counter()
        fn()
        elapsed = comm.allreduce(perf_counter() - t0, op=MPI.MAX)
        if i >= warmup:
            times.append(elapsed)
    return float(np.median(times))


def measure():
    """Under mpiexec: print one table row per size (rank 0)."""
    from mpi4py import MPI

    from real.backend import ring_allreduce_mpi, run_collective_mpi
    from twinsgd.programs.collectives import recursive_doubling_allreduce

    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    factor = 2 * (size - 1) / size
    if rank == 0:
        print(f"\nN = {size} ranks ({MPI.Get_library_version().splitlines()[0].strip()}), float32")
        print(
            f"{'size':>8} {'ring us':>10} {'rd us':>10} {'MPI us':>10} {'ring/MPI':>9} "
            f"{'rd/MPI':>7} {'ring busbw GB/s':>16} {'MPI busbw GB/s':>15}"
        )
    for nbytes in SIZES:
        # Zeros: repeated in-place sums stay zero (no growth, no denormals), and time is the same.
        buf = np.zeros(nbytes // 4, dtype=np.float32)
        reps, warmup = _repetitions(nbytes)
        t_ring = _time(
            comm, lambda buf=buf: ring_allreduce_mpi(comm, buf, rank, size), reps, warmup
        )
        t_rd = _time(
            comm,
            lambda buf=buf: run_collective_mpi(comm, recursive_doubling_allreduce(buf, rank, size)),
            reps,
            warmup,
        )
        t_mpi = _time(
            comm, lambda buf=buf: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM), reps, warmup
        )
        if rank == 0:
            print(
                f"{_human(nbytes):>8} {t_ring * 1e6:10.1f} {t_rd * 1e6:10.1f} "
                f"{t_mpi * 1e6:10.1f} {t_ring / t_mpi:9.2f} {t_rd / t_mpi:7.2f} "
                f"{factor * nbytes / t_ring / 1e9:16.2f} "
                f"{factor * nbytes / t_mpi / 1e9:15.2f}"
            )


def _human(nbytes):
    for unit in ("B", "KB", "MB"):
        if nbytes < 1024:
            return f"{nbytes}{unit}"
        nbytes //= 1024
    return f"{nbytes}GB"


def main():
    """Without mpiexec: run the table for N = 2, 4, 8 by starting mpiexec for each."""
    mpiexec = Path(sys.executable).parent / "mpiexec"
    env = {
        **os.environ,
        "OPENBLAS_NUM_THREADS": "1",
        "TWINSGD_ALLREDUCE_BENCH": "1",
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    print(
        f"ring = twinsgd's reduce-scatter + allgather over Sendrecv; MPI = MPI_Allreduce; "
        f"{os.cpu_count()} cores on this machine (N > cores is oversubscribed)"
    )
    for n in (2, 4, 8):
        subprocess.run([str(mpiexec), "-n", str(n), sys.executable, __file__], env=env, check=True)


if __name__ == "__main__":
    if os.environ.get("TWINSGD_ALLREDUCE_BENCH"):
        measure()
    else:
        main()
