"""What a gossip exchange costs with more than one peer: a probe, run under MPI.

    mpiexec -n P python scripts/exchange_probe.py [--bytes 670240] [--reps 40] [--out F.jsonl]

Each rank exchanges ``--bytes`` with its peers the way the programs do (`real.backend.
exchange_arrays`: an Irecv from and an Isend to each peer, then Waitall), in situ: a compute
step that writes the send buffers (about a millisecond of numpy) and a barrier before each
exchange, as `real.netbench` times its in-situ patterns. With 2 ranks it times k = 1, 2 and 3
messages each way with the one partner (what a calibration on 2 ranks can measure); with more,
a ring, each rank with its left and right neighbour (gossip on a ring: 2 peers). Printed: one
line per case, the median exchange in microseconds (over ranks, of each rank's median over
``--reps``, the first 5 left out) and each rank's; ``--out`` appends the same as a JSON line.

Why: on the 16-vCPU machine lent on 2026-12-04 gossip's exchange with 2 peers took 413-444 us
at 4 ranks against 130 us with 1 peer at 2 (3.2x), where the simulator, which prices each
message as the calibration's one-peer exchange, had 216-374 us (docs/validation.md). On this
2-core machine, 670 KB, hot: 117 us for one message each way, 281 for two, 428 for three.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from models.threads import one_blas_thread
from real.backend import exchange_arrays

WARMUP = 5  # repetitions left out


def exchange_seconds(comm, peers, nbytes, reps, work):
    """This rank's seconds of each exchange of ``nbytes`` with each of ``peers`` (a list, a
    peer once per message: with one partner, k messages are k tags), in situ."""
    count = max(1, nbytes // 4)
    sends = [np.zeros(count, np.float32) for _ in peers]
    recvs = [np.empty(count, np.float32) for _ in peers]
    pairs_in, pairs_out = list(zip(peers, recvs, strict=True)), list(zip(peers, sends, strict=True))
    seconds = []
    for rep in range(reps + WARMUP):
        product = work @ work  # the compute step, and it writes what goes out
        for i, buf in enumerate(sends):
            buf.fill(float(product[0, 0] + rep + i))
        comm.Barrier()
        t0 = time.perf_counter()
        if len(set(peers)) == len(peers):  # distinct peers: the programs' own call
            exchange_arrays(comm, dict(pairs_out), dict(pairs_in), 0)
        else:  # one partner, k messages: one tag each
            requests = [comm.Irecv(r, source=p, tag=i) for i, (p, r) in enumerate(pairs_in)]
            requests += [comm.Isend(b, dest=p, tag=i) for i, (p, b) in enumerate(pairs_out)]
            requests[0].Waitall(requests)
        seconds.append(time.perf_counter() - t0)
    return seconds[WARMUP:]


def cases(rank, size):
    """(name, peers) of each case this job times."""
    if size == 2:
        return [(f"{k} message(s) each way, one partner", [1 - rank] * k) for k in (1, 2, 3)]
    return [("ring: left and right neighbour", [(rank - 1) % size, (rank + 1) % size])]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=670_240, help="bytes a message")
    parser.add_argument("--reps", type=int, default=40, help="exchanges timed a case")
    parser.add_argument("--out", metavar="FILE", help="append the results as one JSON line")
    args = parser.parse_args(argv)
    if args.bytes < 4 or args.reps < 1:
        parser.exit(2, "exchange_probe: --bytes must be >= 4 and --reps >= 1\n")
    from mpi4py import MPI

    one_blas_thread()  # as the programs run
    comm = MPI.COMM_WORLD
    work = np.random.default_rng(comm.rank).standard_normal((160, 160))
    result = {"ranks": comm.size, "bytes": args.bytes, "reps": args.reps, "cases": {}}
    for name, peers in cases(comm.rank, comm.size):
        mine = float(np.median(exchange_seconds(comm, peers, args.bytes, args.reps, work)))
        every = comm.gather(mine, root=0)
        if comm.rank == 0:
            result["cases"][name] = every
            print(
                f"{comm.size} ranks, {name}: median {1e6 * float(np.median(every)):.1f} us; "
                f"by rank " + " ".join(f"{1e6 * s:.0f}" for s in every),
                flush=True,
            )
    if comm.rank == 0 and args.out:
        with open(args.out, "a") as fh:
            fh.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
