"""The programs' large messages through shared memory with more ranks than cores: measured
against simulated.

Run ``python benchmarks/copies_past_cores.py [--profile FILE] [--ranks 2,4]`` (it starts
``mpiexec`` itself; without ``--profile`` it first runs ``real.calibrate --quick`` on 2 ranks,
about ten seconds). Each rank, after a barrier, times (median of the calls after 50, then the
mean over ranks) three operations the training programs do with the MLP's 670 KB: gossip's
exchange with both neighbours on a ring (Irecv, Isend, Waitall), a ring's Sendrecv step of a
quarter of it, and MPI's Allreduce of it in place (as `real.backend` calls it); the simulator
runs the same loops on the profile's in-situ costs. The ratio of 4 ranks to 2 is what
matters: at 4 ranks on 2 cores every copy (MPICH's single copy, in the receiver's call) waits
for its receiver's core, which a calibration on 2 ranks never sees. This machine's phase
(`real.phase`) is probed before and after the measurements.
"""

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from twinsgd.analysis.validate import probe_phase

GRADIENT_BYTES = 670_240  # the MLP's gradient (float32)
OPERATIONS = ("exchange", "sendrecv", "allreduce")
WARMUP = 50


def measure(calls):
    """Under mpiexec: each operation's median seconds a call on every rank; rank 0 prints them
    as JSON ({operation: [seconds by rank]})."""
    import time

    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    vector = np.ones(GRADIENT_BYTES // 4, np.float32)
    chunk, inbox = vector[: vector.size // 4].copy(), np.empty(vector.size // 4, np.float32)
    peers = sorted({(rank - 1) % size, (rank + 1) % size} - {rank})
    bufs = {peer: np.empty_like(vector) for peer in peers}

    def exchange():
        requests = [comm.Irecv(bufs[p], source=p) for p in peers]
        requests += [comm.Isend(vector, dest=p) for p in peers]
        MPI.Request.Waitall(requests)

    def sendrecv():
        comm.Sendrecv(chunk, dest=(rank + 1) % size, recvbuf=inbox, source=(rank - 1) % size)

    operations = {
        "exchange": exchange,
        "sendrecv": sendrecv,
        "allreduce": lambda: comm.Allreduce(MPI.IN_PLACE, vector),
    }
    medians = {}
    for name in OPERATIONS:
        seconds = []
        for k in range(WARMUP + calls):
            vector.fill(k)  # written just before it goes, as a program's gradient is
            chunk.fill(k)
            comm.Barrier()
            t0 = time.perf_counter()
            operations[name]()
            seconds.append(time.perf_counter() - t0)
        medians[name] = comm.gather(float(np.median(seconds[WARMUP:])))
    if rank == 0:
        print(json.dumps(medians))


def simulate(profile_path, ranks, calls):
    """The same loops simulated on the profile's in-situ costs: {operation: [seconds by rank]}."""
    from sim.backend import LibraryCall
    from sim.cluster import build_cluster, network_costs
    from sim.cluster_profile import load_profile
    from sim.osu import (
        RankClock,
        build_parser,
        dissemination_barrier,
        machine_options,
        simulator_for,
    )
    from twinsgd.programs.ops import Allreduce, Exchange, SendRecv

    args = build_parser().parse_args(
        ["osu_latency", "--profile", str(profile_path), "--ranks", str(ranks)]
    )
    options, profile = machine_options(args), load_profile(profile_path)
    cluster = build_cluster(options, profile, None, "mlp")
    cluster = dataclasses.replace(cluster, costs=network_costs(options, profile, programs=True))
    result = {}
    for name in OPERATIONS:
        simulator = simulator_for(cluster, [RankClock() for _ in range(ranks)], cluster.mpi)
        seconds = [[] for _ in range(ranks)]

        def program(rank, name=name, simulator=simulator, seconds=seconds):
            vector = np.ones(GRADIENT_BYTES // 4, np.float32)
            chunk = vector[: vector.size // 4].copy()
            inbox = np.empty_like(chunk)
            peers = sorted({(rank - 1) % ranks, (rank + 1) % ranks} - {rank})
            for _ in range(WARMUP + calls):
                yield LibraryCall(dissemination_barrier(rank, ranks))
                t0 = simulator.env.now
                if name == "exchange":
                    yield Exchange(
                        dict.fromkeys(peers, vector), {p: np.empty_like(vector) for p in peers}
                    )
                elif name == "sendrecv":
                    yield SendRecv((rank + 1) % ranks, chunk, (rank - 1) % ranks, inbox)
                else:
                    yield Allreduce(vector, "sum", "mpi")
                seconds[rank].append(simulator.env.now - t0)

        with np.errstate(over="ignore"):  # (the same vector summed over and over)
            simulator.run([program(r) for r in range(ranks)])
        result[name] = [float(np.median(s[WARMUP:])) for s in seconds]
    return result


def _venv_tool(name):
    return os.path.join(os.path.dirname(sys.executable), name)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--profile", type=Path, help="a profile of this machine (default: calibrate one)"
    )
    parser.add_argument(
        "--ranks", default="2,4", help="rank counts, comma-separated (default: 2,4)"
    )
    parser.add_argument(
        "--calls", type=int, default=250, help="timed calls an operation (default: 250)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return measure(args.calls)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as scratch:
        profile = args.profile
        if profile is None:
            profile = Path(scratch) / "profile.toml"
            subprocess.run(
                [
                    _venv_tool("mpiexec"),
                    "-n",
                    "2",
                    sys.executable,
                    "-m",
                    "real.calibrate",
                    "--quick",
                    "--models",
                    "mlp",
                    "--out",
                    str(profile),
                ],
                check=True,
                env=env,
                timeout=900,
                capture_output=True,
            )
        before = probe_phase(scratch)
        measured = {}
        for ranks in (int(r) for r in args.ranks.split(",")):
            done = subprocess.run(
                [
                    _venv_tool("mpiexec"),
                    "-n",
                    str(ranks),
                    sys.executable,
                    os.path.abspath(__file__),
                    "--child",
                    "--calls",
                    str(args.calls),
                ],
                check=True,
                env=env,
                timeout=600,
                capture_output=True,
                text=True,
            )
            measured[ranks] = json.loads(done.stdout.strip().splitlines()[-1])
        after = probe_phase(scratch)
        simulated = {ranks: simulate(profile, ranks, args.calls) for ranks in measured}
    print(f"phase (us, real.phase): {before} before, {after} after; profile {profile}")
    print("| operation | ranks | measured (us) | simulated (us) | simulated / measured |")
    print("|---|---|---|---|---|")
    for name in OPERATIONS:
        for ranks in measured:
            m, s = np.mean(measured[ranks][name]) * 1e6, np.mean(simulated[ranks][name]) * 1e6
            print(f"| {name} | {ranks} | {m:.0f} | {s:.0f} | {s / m:.2f} |")
    counts = sorted(measured)
    if len(counts) > 1:
        low, high = counts[0], counts[-1]
        print(f"\n| operation | {high} ranks / {low}, measured | simulated |")
        print("|---|---|---|")
        for name in OPERATIONS:
            m = np.mean(measured[high][name]) / np.mean(measured[low][name])
            s = np.mean(simulated[high][name]) / np.mean(simulated[low][name])
            print(f"| {name} | {m:.2f} | {s:.2f} |")


if __name__ == "__main__":
    main()
