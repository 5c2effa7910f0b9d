"""``python -m real.osu BENCH``: an OSU micro-benchmark's table, measured with mpi4py under mpiexec
or srun, printed in OSU's own format.

Examples
--------
::

    mpiexec -n 2 python -m real.osu osu_latency
    mpiexec -n 4 python -m real.osu osu_allreduce --sizes 4:1MiB

Why: a site without the OSU suite built can still produce its tables, and the twin can be held
against itself: ``real.osu`` and ``sim.osu`` side by side (``twinsgd.analysis.osu_compare``).
The MPI library's own calls are timed (``Allreduce``, ``Allgather``, ``Alltoall``, ``Bcast``;
``Send``/``Recv`` for the point-to-point tests), as OSU times them:

- osu_latency: ranks 0 and 1 ping-pong; half the mean round trip;
- osu_bw / osu_bibw: a window of 64 non-blocking sends (both ways for bibw), then a 4-byte
  reply; bytes moved over the time, MB/s (1e6 bytes); osu_mbw_mr: the same between every rank
  r of the first half and r + p/2, all at once, every pair's bytes over the senders' mean time;
- buffers as OSU's: a rank sends from one buffer and receives into another (``s_buf``,
  ``r_buf``), the same two for a whole window (its default ``--buffer-num single``). Sending
  back the bytes just received, as this module did before 2026-12-02, moves lines dirty in
  the receiver's cache: through shared memory that took twice as long (256 KiB: 36-40 us one
  way against 18-19); 64 buffers a window make a 1 MiB window 64 MiB, out of every cache;
- collectives: a barrier before every call; each rank's mean time a call, averaged over ranks;
- ranks in no pair (OSU runs osu_latency, osu_bw and osu_bibw on exactly 2 ranks) sleep while
  the pair measures: in MPI's next call they would poll, and past the cores take turns with
  the pair (4 ranks on 2 cores: 22-39 us one way for 4 B against 17 with 2, 2026-12-02).

Warm-up iterations are discarded; large messages get fewer iterations (OSU's defaults: 10,000
and 1,000 warm-up up to 8 KiB, then 1,000 and 100; ``--iterations`` scales them down for a
shared machine). Buffers are bytes (``MPI.BYTE``), float32 for allreduce (a sum).
"""

import sys
import traceback

import numpy as np

from real.cli import RankZeroParser
from real.mpi import MPI, library_version
from real.netbench import quiet_barrier
from twinsgd.calibration.osu_tables import OSU_COLUMNS, format_table, osu_sizes
from twinsgd.run.units import flag_type, parse_size_range

WINDOW = 64  # OSU's window of messages in flight for the bandwidth tests
LARGE_BYTES = 8192  # OSU's boundary between the small and large messages' iteration counts


def latency_us(comm, nbytes, iterations, warmup):
    """Half the mean round trip between ranks 0 and 1, microseconds (on rank 0)."""
    sent, received = np.ones(nbytes, np.uint8), np.zeros(nbytes, np.uint8)  # OSU's s_buf, r_buf
    rank, t0 = comm.rank, 0.0
    for i in range(warmup + iterations):
        if i == warmup:
            t0 = MPI.Wtime()
        if rank == 0:
            comm.Send(sent, dest=1, tag=1)
            comm.Recv(received, source=1, tag=1)
        elif rank == 1:
            comm.Recv(received, source=0, tag=1)
            comm.Send(sent, dest=0, tag=1)
    return (MPI.Wtime() - t0) / (2 * iterations) * 1e6


def bandwidth_MBps(comm, nbytes, iterations, warmup, both_ways=False, pairs=1):
    """Bytes moved between ranks 0 and 1 a second (1e6 bytes), windows of 64 (on rank 0).
    ``pairs`` > 1 (osu_mbw_mr): every rank r < pairs with rank r + pairs at once, every pair's
    bytes over the senders' mean time (OSU's ``calc_bw``)."""
    out, into = np.ones(nbytes, np.uint8), np.zeros(nbytes, np.uint8)  # one each, as OSU's
    ack, rank, t0 = np.zeros(4, np.uint8), comm.rank, 0.0
    sender, active = rank < pairs, rank < 2 * pairs
    peer = rank + pairs if sender else rank - pairs
    comm.Barrier()
    for i in range(warmup + iterations if active else 0):
        if i == warmup:
            t0 = MPI.Wtime()
        requests = []
        if not sender or both_ways:
            requests += [comm.Irecv(into, source=peer, tag=2) for _ in range(WINDOW)]
        if sender or both_ways:
            requests += [comm.Isend(out, dest=peer, tag=2) for _ in range(WINDOW)]
        MPI.Request.Waitall(requests)
        if sender:
            comm.Recv(ack, source=peer, tag=3)
        else:
            comm.Send(ack, dest=peer, tag=3)
    moved = nbytes * WINDOW * iterations * (2 if both_ways else 1)
    seconds = MPI.Wtime() - t0 if sender else 0.0
    if pairs > 1:
        seconds = comm.allreduce(seconds, op=MPI.SUM) / pairs
    return moved * pairs / seconds / 1e6 if seconds > 0 else 0.0  # a receiver's: unused


def collective_us(comm, bench, nbytes, iterations, warmup):
    """Each rank's mean time a call, averaged over ranks (OSU's "Avg Latency"), microseconds."""
    size = comm.size
    floats = max(1, nbytes // 4)  # a reduction's: float32 sums
    if bench == "osu_allreduce":
        send, recv = np.ones(floats, np.float32), np.zeros(floats, np.float32)

        def call():
            comm.Allreduce(send, recv, op=MPI.SUM)
    elif bench == "osu_reduce":
        send, recv = np.ones(floats, np.float32), np.zeros(floats, np.float32)

        def call():
            comm.Reduce(send, recv, op=MPI.SUM, root=0)
    elif bench == "osu_allgather":
        send, recv = np.ones(nbytes, np.uint8), np.zeros(nbytes * size, np.uint8)

        def call():
            comm.Allgather(send, recv)
    elif bench == "osu_alltoall":
        send, recv = np.ones(nbytes * size, np.uint8), np.zeros(nbytes * size, np.uint8)

        def call():
            comm.Alltoall(send, recv)
    else:
        buf = np.ones(nbytes, np.uint8)

        def call():
            comm.Bcast(buf, root=0)

    total = 0.0
    for i in range(warmup + iterations):
        comm.Barrier()
        t0 = MPI.Wtime()
        call()
        if i >= warmup:
            total += MPI.Wtime() - t0
    return comm.allreduce(total / iterations, op=MPI.SUM) / size * 1e6


def measure(comm, bench, nbytes, scale):
    """The table's number for ``nbytes`` (on rank 0), OSU's iterations times ``scale``."""
    small = nbytes <= LARGE_BYTES
    iterations = max(1, round((10000 if small else 1000) * scale))
    warmup = max(1, round((1000 if small else 100) * scale))
    if bench in ("osu_bw", "osu_bibw", "osu_mbw_mr"):
        iterations, warmup = max(1, round(100 * scale)), max(1, round(10 * scale))
        pairs = comm.size // 2 if bench == "osu_mbw_mr" else 1
        value = bandwidth_MBps(comm, nbytes, iterations, warmup, bench == "osu_bibw", pairs)
    elif bench == "osu_latency":
        value = latency_us(comm, nbytes, iterations, warmup)
    else:
        return collective_us(comm, bench, nbytes, iterations, warmup)
    if comm.size > 2:  # the ranks in no pair waited here asleep (the module's notes)
        quiet_barrier(comm)
    return value


def build_parser():
    parser = RankZeroParser(
        prog="python -m real.osu",
        description="Measure an OSU micro-benchmark's table with mpi4py (under mpiexec or srun).",
    )
    parser.add_argument("bench", choices=sorted(OSU_COLUMNS), help="the OSU benchmark")
    parser.add_argument(
        "--sizes",
        default=None,
        type=flag_type(parse_size_range),
        metavar="MIN:MAX",
        help="message sizes, e.g. 4:1MiB (default: OSU's)",
    )
    parser.add_argument(
        "--iterations",
        type=float,
        default=0.01,
        metavar="SCALE",
        help="OSU's iteration counts times SCALE (default: 0.01: 100 and 10, a shared machine)",
    )
    return parser


def main(argv=None):
    comm = MPI.COMM_WORLD
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if comm.size < 2:
            raise ValueError(f"needs at least 2 MPI ranks, got {comm.size}: mpiexec -n 2 ...")
        if not args.iterations > 0:
            raise ValueError(f"--iterations must be > 0, got {args.iterations}")
    except ValueError as err:
        parser.error(str(err))
    library = library_version()
    note = f"measured by twinsgd real.osu: {comm.size} ranks, {library}"
    rows = (  # every rank measures; rank 0 prints each line as it is measured
        (n, measure(comm, args.bench, n, args.iterations))
        for n in osu_sizes(args.bench, *(args.sizes or ()))
    )
    try:
        for line in format_table(args.bench, note, rows):
            if comm.rank == 0:
                print(line, flush=True)
    except Exception:  # the other ranks wait in a call with this one: end them all
        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
