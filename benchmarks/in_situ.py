"""Messages as OSU's hot loop times them against messages as a training program meets them.

Run ``python benchmarks/in_situ.py`` (it starts ``mpiexec -n 2`` itself; a few seconds). Between the
same two ranks, in one run with the sizes interleaved (`real.netbench`): a ``Sendrecv`` of n bytes
each way timed hot (back to back, OSU's way) and in situ (the MLP's gradient computed before each
one, the message cut from what it wrote); and the programs' own ring allreduce with its mean, in
situ, beside what the simulator composes for it from the in-situ parts (two Sendrecvs of n/2, the
add at gamma, the finishing pass left over). The ratios are what matters: on a machine whose
links are fast the hot loop is not what programs pay (this machine's shared memory, one run:
1.4-2.4x from 64 KiB to 4 MiB, and the mean's pass 24-211 us); ``real.calibrate`` keeps the
in-situ models for ``sim.run``.
"""

import os
import subprocess
import sys

SIZES = [2**k for k in range(16, 23)]  # 64 KiB .. 4 MiB: the MLP's gradient is 670 KB


def main():
    import numpy as np
    from mpi4py import MPI

    from models import build_model
    from real import netbench
    from real.calibrate import reduction_gamma

    comm = MPI.COMM_WORLD
    model = build_model("mlp", (28, 28, 1), 10, seed=0)
    rng = np.random.default_rng(comm.rank)
    X = rng.random((100, 28, 28, 1), dtype=np.float32)
    y = rng.integers(0, 10, 100)
    written = np.zeros(max(max(SIZES) // 4, model.n_params), np.float32)

    def step():
        model.loss_and_gradient(X, y, out=written[: model.n_params])
        return written

    hot = netbench.exchange(comm, SIZES)
    samples = {}
    netbench.exchange(comm, SIZES, step=step, samples=samples)
    allreduce = netbench.allreduce_in_situ(comm, SIZES, step)
    gamma = reduction_gamma(quick=True) if comm.rank == 0 else None
    if comm.rank != 0:
        return
    in_situ = {n: float(np.median(samples[n])) for n in SIZES}
    print(
        "| bytes | Sendrecv hot (us) | in situ (us) | in situ / hot | allreduce in situ (us) "
        "| 2 x Sendrecv(n/2) + add (us) | left: the mean's pass (us) |"
    )
    print("|---|---|---|---|---|---|---|")
    for n, h, a in zip(SIZES, hot, allreduce, strict=True):
        half = in_situ.get(n // 2, np.interp(n // 2, SIZES, [in_situ[m] for m in SIZES]))
        parts = 2 * half + gamma * n / 2
        print(
            f"| {n:,} | {1e6 * h:.1f} | {1e6 * in_situ[n]:.1f} | {in_situ[n] / h:.2f} "
            f"| {1e6 * a:.1f} | {1e6 * parts:.1f} | {1e6 * (a - parts):.1f} |"
        )


if __name__ == "__main__":
    if os.environ.get("TWINSGD_IN_SITU_CHILD"):
        main()
    else:
        mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        env = dict(os.environ, TWINSGD_IN_SITU_CHILD="1", OPENBLAS_NUM_THREADS="1")
        sys.exit(
            subprocess.run(
                [mpiexec, "-n", "2", sys.executable, os.path.abspath(__file__)],
                env=env,
                timeout=600,
            ).returncode
        )
