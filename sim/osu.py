"""``python -m sim.osu``: the OSU micro-benchmarks' tables, simulated on a cluster model.

Examples
--------
::

    python -m sim.osu osu_latency --profile cluster.toml
    python -m sim.osu osu_allreduce --profile cluster.toml --ranks 64 --ranks-per-host 32

Why: a cluster's OSU tables are what its users have; printing the model's own in the same format
puts the two side by side (``twinsgd.analysis.osu_compare``), size by size, before a training run
is trusted to the model. Each benchmark is a node program of our operations, run by the same
simulator and the same collective programs as training (`programs.collectives`,
`programs.block_collectives`), on size-only payloads.

How OSU times, and what is kept of it: a latency test reports half a round trip averaged over
its iterations; a bandwidth test a window of 64 messages back to back, then a reply; a
collective the average over ranks of each rank's time a call, each call after a barrier (here
MPICH's dissemination barrier of empty messages), timed from the rank's own exit from it. The
simulation is deterministic, so on a network that keeps no state from call to call one call is
every call of OSU's loop. Token buckets (an emulated cluster's) do keep it: a bucket drained by
one call is refilled only by the time until the next, so OSU's loop runs at the steady state,
where a 64 KiB broadcast over 1 Gbit/s takes the bucket's rate (550 us) and the first call from
a full bucket half that. There the loop is simulated as OSU runs it, a point-to-point test's as
a collective's: warm-up calls, then ``--iterations`` timed ones (default `SHAPED_ITERATIONS`).

The library's choice (``--mpi``, `programs.mpi_choices`): allreduce as MPICH, Open MPI 4.0 or
Open MPI 4.1 picks it; alltoall (pairwise, all at once, Bruck's) and allgather (ring, recursive
doubling, Bruck's, neighbour exchange) and bcast (binomial tree, scatter + allgather, split
binary tree, pipeline) and reduce (binomial tree, reduce-scatter + gather, linear, Open MPI's
segmented trees and pipeline) as the library picks them.

Sizes are simulated side by side, a forked process a core (`side_by_side`): a site's table at
its own scale is slow (an alltoall of 512 ranks, 32 a host: about 28 s a size on one core).
"""

import argparse
import dataclasses
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from types import SimpleNamespace

import numpy as np

from sim.backend import LibraryCall, Simulator
from sim.closed_form import allreduce_program, simulated_allreduce
from sim.cluster import add_network_arguments, build_cluster
from sim.cluster_profile import load_profile
from twinsgd.calibration.osu_tables import format_table, osu_sizes
from twinsgd.cli import OneLineParser
from twinsgd.programs.block_collectives import ALLGATHERS, ALLTOALLS
from twinsgd.programs.broadcasts import BCASTS
from twinsgd.programs.ghost import GhostArray
from twinsgd.programs.mpi_choices import (
    allgather_algorithm,
    alltoall_algorithm,
    bcast_algorithm,
    reduce_algorithm,
)
from twinsgd.programs.ops import Recv, Send
from twinsgd.programs.reductions import REDUCES
from twinsgd.run.interrupt import one_line_on_interrupt
from twinsgd.run.runlog import Charges
from twinsgd.run.units import flag_type, parse_size_range

WINDOW = 64  # osu_bw's, osu_bibw's and osu_mbw_mr's messages in flight an iteration (OSU's)
SHAPED_ITERATIONS = 20  # timed calls of a loop on token buckets, after OSU's warm-up (steady state)
LARGE_BYTES = 8192  # OSU's boundary between small and large messages' loop counts
_BARRIER_TAG = -2000  # the barrier's empty messages, apart from the benchmark's own


def osu_latency(nbytes, rank, size, iterations, mpi="mpich"):
    """Ping-pong between ranks 0 and 1; the others idle."""
    buf = GhostArray(nbytes, np.uint8)
    for _ in range(iterations if rank < 2 else 0):
        if rank == 0:
            yield Send(dest=1, payload=buf)
            yield Recv(source=1)
        else:
            yield Recv(source=0)
            yield Send(dest=0, payload=buf)


def osu_bw(nbytes, rank, size, iterations, mpi="mpich", both_ways=False, pairs=1):
    """Rank 0 sends a window of messages back to back to rank 1, which replies with 4 bytes
    (``both_ways``: rank 1 sends its window too, then each receives the other's). With
    ``pairs`` > 1 (`osu_mbw_mr`), every rank r < pairs does so with rank r + pairs at once."""
    buf, ack = GhostArray(nbytes, np.uint8), GhostArray(4, np.uint8)
    sender = rank < pairs
    peer = rank + pairs if sender else rank - pairs
    for _ in range(iterations if rank < 2 * pairs else 0):
        if sender or both_ways:
            for _ in range(WINDOW):
                yield Send(dest=peer, payload=buf, tag=1)
        if not sender or both_ways:
            for _ in range(WINDOW):
                yield Recv(source=peer, tag=1)
        if not both_ways:
            yield (Recv(source=peer, tag=2) if sender else Send(dest=peer, payload=ack, tag=2))


def osu_mbw_mr(nbytes, rank, size, iterations, mpi="mpich"):
    """OSU's multiple bandwidth test: the first half of the ranks each send a window to their
    partner in the second half (rank r to r + p/2), all pairs at once: on a job of R ranks a
    host on 2 hosts, every pair crosses the hosts' NICs."""
    return osu_bw(nbytes, rank, size, iterations, mpi, pairs=size // 2)


def osu_bibw(nbytes, rank, size, iterations, mpi="mpich"):
    """Both ranks send a window to each other at once."""
    return osu_bw(nbytes, rank, size, iterations, mpi, both_ways=True)


def osu_allreduce(nbytes, rank, size, mpi="mpich"):
    """One allreduce of ``nbytes // 4`` floats, as the library ``mpi`` picks its algorithm."""
    yield from allreduce_program("mpi", GhostArray(max(1, nbytes // 4)), rank, size, mpi)


def osu_allgather(nbytes, rank, size, mpi="mpich"):
    """One allgather of ``nbytes`` a rank, as the library ``mpi`` picks it."""
    algorithm = allgather_algorithm(mpi, nbytes, size)
    yield from ALLGATHERS[algorithm](GhostArray(nbytes, np.uint8), rank, size)


def osu_alltoall(nbytes, rank, size, mpi="mpich"):
    """One alltoall of ``nbytes`` from each rank to each, as the library ``mpi`` picks it."""
    algorithm = alltoall_algorithm(mpi, nbytes, size)
    yield from ALLTOALLS[algorithm]([GhostArray(nbytes, np.uint8)] * size, rank, size)


def osu_bcast(nbytes, rank, size, mpi="mpich"):
    """One broadcast of ``nbytes`` from rank 0, as the library ``mpi`` picks it."""
    algorithm, segment_bytes = bcast_algorithm(mpi, nbytes, size)
    yield from BCASTS[algorithm](GhostArray(nbytes, np.uint8), 0, rank, size, segment_bytes)


def osu_reduce(nbytes, rank, size, mpi="mpich"):
    """One reduce of ``nbytes // 4`` floats to rank 0, as the library ``mpi`` picks it."""
    buf = GhostArray(max(1, nbytes // 4))
    algorithm, segment_bytes = reduce_algorithm(mpi, buf.size, buf.itemsize, size)
    yield from REDUCES[algorithm](buf, 0, rank, size, segment_bytes)


def read_by_peers(bench, nbytes, rank, size, mpi="mpich"):
    """The share of the buffer ``rank``'s call of ``bench`` copies its send buffer into that
    the other ranks read in the call before (`LibraryCall`'s ``read_by_peers``): the bytes it
    sent last and did not write again, by the allreduce's algorithm. Rabenseifner's gathers by
    recursive doubling, whose last step sends the half this rank holds and receives the other
    (1/2); recursive doubling adds every received buffer into its own (0); a ring sends every
    block but the last it receives ((p - 1)/p); beside a power of two, a rank that folded its
    data into a neighbour is sent the whole result (0) and that neighbour sent it (1). Not
    derived, so left warm (0): the allgather's, the reduce's and Open MPI's reduce-and-bcast.

    >>> [read_by_peers("osu_allreduce", 1 << 20, r, 2) for r in range(2)]
    [0.5, 0.5]
    >>> [read_by_peers("osu_allreduce", 8, r, 3) for r in range(3)]  # recursive doubling
    [0.0, 1.0, 0.0]
    >>> read_by_peers("osu_allreduce", 1 << 20, 0, 4, "openmpi")  # a ring
    0.75
    >>> read_by_peers("osu_bcast", 1 << 20, 0, 2), read_by_peers("osu_allgather", 1 << 20, 0, 2)
    (0.0, 0.0)
    """
    if bench != "osu_allreduce" or size == 1:
        return 0.0
    name = simulated_allreduce("mpi", GhostArray(max(1, nbytes // 4)), size, mpi)
    if name == "ring":
        return (size - 1) / size
    if name not in ("rabenseifner", "recursive-doubling"):
        return 0.0
    rem = size - (1 << (size.bit_length() - 1))
    if rank < 2 * rem:
        return float(rank % 2)  # the odd one sends the result to the even one it folded
    return 0.5 if name == "rabenseifner" else 0.0


def dissemination_barrier(rank, size):
    """MPICH's barrier between hosts (``MPIR_Barrier_intra_k_dissemination``, k = 2, in its
    built-in selection): in round k every rank sends an empty message to rank + 2^k and takes
    one from rank - 2^k, ceil(log2 p) rounds. The empty send never waits (eager), so each
    message costs what one way does: a rank that arrives after its peer's message leaves at
    once, one that arrives first a one-way latency after the other, which is the skew OSU's
    next call is timed from."""
    empty, distance = GhostArray(0, np.uint8), 1
    while distance < size:
        yield Send(dest=(rank + distance) % size, payload=empty, tag=_BARRIER_TAG, buffered=True)
        yield Recv(source=(rank - distance) % size, tag=_BARRIER_TAG, buf=empty)
        distance *= 2


def timed_calls(
    call, rank, size, calls, warmup, now, seconds, writes="never", copies=0, read_by_peers=0.0
):
    """OSU's loop of a collective on one rank: ``warmup + calls`` times a barrier, then
    ``call()`` (a node program of the library's algorithm), each one call into the library
    (`sim.backend.LibraryCall`, its messages' bytes written by the call as ``writes`` says,
    ``copies`` bytes of the caller's send buffer copied first into a buffer ``read_by_peers``
    of which the other ranks read in the call before);
    adds the seconds of the timed calls, from this rank's exit from the barrier (``now()``: the
    simulated clock) to the call's end, into ``seconds[rank]``."""
    for i in range(warmup + calls):
        yield LibraryCall(dissemination_barrier(rank, size))  # each one call of the library
        t0 = now()
        yield LibraryCall(call(), writes, copies, read_by_peers)
        if i >= warmup:
            seconds[rank] += now() - t0


POINT_TO_POINT = {
    "osu_latency": osu_latency,
    "osu_bw": osu_bw,
    "osu_bibw": osu_bibw,
    "osu_mbw_mr": osu_mbw_mr,
}
COLLECTIVES = {
    "osu_allreduce": osu_allreduce,
    "osu_allgather": osu_allgather,
    "osu_alltoall": osu_alltoall,
    "osu_bcast": osu_bcast,
    "osu_reduce": osu_reduce,
}
BENCHMARKS = {**POINT_TO_POINT, **COLLECTIVES}
# OSU's separate send and receive buffers: these copy the send buffer first (its n bytes;
# an allgather's own block of n; MPICH's MPIR_Localcopy, Open MPI's copy_content_same_ddt)
COPIES = ("osu_allreduce", "osu_reduce", "osu_allgather")
# which of a collective's messages carry bytes the library has just written (`LibraryCall`):
# MPICH and Open MPI copy an allreduce's, a reduce's and an allgather's send buffer into the
# receive (or a temporary) buffer and send from there; an alltoall sends from the send buffer;
# a broadcast's root sends the caller's bytes and a rank that received them forwards them
WRITES = {
    "osu_allreduce": "always",
    "osu_reduce": "always",
    "osu_allgather": "always",
    "osu_alltoall": "never",
    "osu_bcast": "after_receive",
}


class RankClock(Charges):
    """A rank's time inside the benchmark: everything the simulator charges it (no compute)."""

    def __init__(self):
        self.seconds = 0.0

    def charge(self, kind, seconds, bytes_sent=0, bytes_recv=0):
        self.seconds += seconds

    def __getattr__(self, name):  # the rest of a RunLog's interface: nothing to record
        return lambda *args, **kwargs: None


def loop_calls(cluster, bench, iterations=None, nbytes=0):
    """(timed calls, warm-up calls) of ``bench``'s loop at ``nbytes`` on ``cluster``
    (``iterations``: the ``--iterations`` flag).

    What carries from one call to the next: on token buckets the buckets' state, so OSU's loop
    is run as OSU runs it, its own warm-up first (`osu_warmup`), whatever the benchmark; a
    point-to-point test elsewhere, nothing (``iterations``, default 1); a collective through a
    network, the barrier's skew (a rank that ended the last call early waits in the barrier and
    leaves it a latency after the last one in: one warm-up call sets it, and every later call
    is the same); all ranks on one machine, nothing: MPICH's barrier there is one in shared
    memory that lets every rank go at once (on this machine a 2-rank broadcast's receiver
    waited 1.65 us a call, one way is 1.6 us), one call."""
    if cluster.shaping is not None:
        return iterations or SHAPED_ITERATIONS, osu_warmup(bench, nbytes)
    if bench in POINT_TO_POINT:
        return iterations or 1, 0
    one_machine = cluster.machine_copies is not None or cluster.ranks_per_host >= cluster.ranks
    return 1, 0 if one_machine else 1


def osu_warmup(bench, nbytes):
    """OSU's warm-up iterations of ``bench`` at ``nbytes`` (its ``skip``): osu_latency 1,000
    up to `LARGE_BYTES`, 100 above; the bandwidth tests, a window each, 10 and 2; a
    collective's calls 200 and 10. A ping-pong or broadcast of 4-16 KiB over 1 Gbit/s buckets
    of 125 KB drains them only after tens of calls."""
    large = nbytes > LARGE_BYTES
    if bench == "osu_latency":
        return 100 if large else 1000
    return (10 if large else 200) if bench in COLLECTIVES else (2 if large else 10)


def host_working_set(bench, nbytes, ranks, ranks_per_host):
    """Bytes of buffers a host's ranks touch together in one call of collective ``bench`` at
    OSU's size ``nbytes``: each rank's send and receive buffers as OSU sizes them (a message a
    peer for the allgather's receive and the alltoall's two; the whole vector otherwise).

    >>> host_working_set("osu_allgather", 1024, 64, 32) == 32 * 65 * 1024
    True
    """
    per_rank = {
        "osu_allreduce": 2 * nbytes,
        "osu_reduce": 2 * nbytes,
        "osu_bcast": nbytes,
        "osu_allgather": (1 + ranks) * nbytes,
        "osu_alltoall": 2 * ranks * nbytes,
    }[bench]
    return ranks_per_host * per_rank


def simulate_benchmark(bench, cluster, nbytes, iterations=1, mpi="mpich"):
    """Seconds each rank spends in ``iterations`` of benchmark ``bench`` at ``nbytes`` on
    ``cluster`` (a `sim.cluster.Cluster`), the library ``mpi`` choosing the algorithms, shape
    (ranks,). A collective's ``iterations`` calls are each timed after a barrier, and after
    warm-up calls where the network keeps state (`loop_calls`); its copies inside a host
    move at the memory's rate for the buffers its call touches (`MemoryPath.within`). A
    point-to-point loop on token buckets is timed after OSU's own warm-up (`osu_warmup`; the
    difference of two simulations): OSU's ping-pong of 8 KiB between two emulated 1 Gbit/s
    hosts runs at the buckets' rate, 34.7 us one way measured, 34.4 simulated so and 17.0 from
    full buckets (2026-12-05)."""
    size = cluster.ranks
    if bench in COLLECTIVES and cluster.memory.cache_bytes:
        touched = host_working_set(bench, nbytes, size, cluster.ranks_per_host)
        cluster = dataclasses.replace(cluster, memory=cluster.memory.within(touched))
    warmup = loop_calls(cluster, bench, iterations, nbytes)[1]
    if bench in POINT_TO_POINT:
        timed = _point_to_point(bench, cluster, nbytes, warmup + iterations, mpi)
        return timed - _point_to_point(bench, cluster, nbytes, warmup, mpi) if warmup else timed
    clocks = [RankClock() for _ in range(size)]
    simulator = simulator_for(cluster, clocks, mpi)
    seconds = np.zeros(size)
    programs = [
        timed_calls(
            lambda r=r: COLLECTIVES[bench](nbytes, r, size, mpi),
            r,
            size,
            iterations,
            warmup,
            lambda: simulator.env.now,
            seconds,
            WRITES[bench],
            nbytes if bench in COPIES else 0,
            read_by_peers(bench, nbytes, r, size, mpi),
        )
        for r in range(size)
    ]
    simulator.run(programs)
    return seconds


def _point_to_point(bench, cluster, nbytes, iterations, mpi):
    """Seconds each rank spends in ``iterations`` of point-to-point ``bench`` from the start,
    (ranks,): a fresh simulation (the same for the same arguments: a loop's later iterations
    are the difference of two)."""
    clocks = [RankClock() for _ in range(cluster.ranks)]
    simulator = simulator_for(cluster, clocks, mpi)
    size = cluster.ranks
    simulator.run([BENCHMARKS[bench](nbytes, r, size, iterations, mpi) for r in range(size)])
    return np.array([clock.seconds for clock in clocks])


def simulator_for(cluster, clocks, mpi):
    """A message-level `Simulator` of ``cluster``'s ranks, each charging its ``clocks``."""
    nodes = [SimpleNamespace(rank=r, size=cluster.ranks, reporter=0) for r in range(cluster.ranks)]
    return Simulator(
        nodes,
        clocks,
        cluster.latency_s,
        cluster.bandwidth_Bps,
        cluster.compute,
        "message",
        cluster.make_network(),
        eager_bytes=cluster.eager_bytes,
        send_overhead_s=cluster.send_overhead_s,
        call_overhead_s=cluster.call_overhead_s,
        mpi=mpi,
        gamma=cluster.combine,
        library_gamma=cluster.library_combine,
        finish=cluster.finish,
        local_copy=cluster.local_copy,
        copy_read_by_peer=cluster.copy_read_by_peer,
        core_groups=cluster.core_groups,
        time_slice_s=cluster.time_slice_s,
        over_tcp=cluster.over_tcp,
        stack_cpu=cluster.stack_cpu,
        poll_wait_s=cluster.poll_wait_s,
    )


def osu_value(bench, seconds, nbytes, iterations):
    """The table's number for one size: microseconds (latency: half a round trip; a collective:
    the mean over ranks of a call), or MB/s (1e6 bytes) of a bandwidth test."""
    if bench == "osu_latency":
        return seconds[0] / (2 * iterations) * 1e6
    if bench in ("osu_bw", "osu_bibw"):
        moved = nbytes * WINDOW * iterations * (2 if bench == "osu_bibw" else 1)
        return moved / seconds[0] / 1e6
    if bench == "osu_mbw_mr":  # every pair's bytes over the senders' mean time, as OSU's
        senders = seconds[: len(seconds) // 2]
        return nbytes * WINDOW * iterations * len(senders) / float(np.mean(senders)) / 1e6
    return float(np.mean(seconds)) / iterations * 1e6


def build_parser():
    parser = OneLineParser(
        prog="python -m sim.osu",
        description="Print an OSU micro-benchmark's table as the cluster model predicts it.",
    )
    parser.add_argument("bench", choices=sorted(BENCHMARKS), help="the OSU benchmark")
    parser.add_argument("--ranks", type=int, default=None, help="ranks of the job (default: 2)")
    parser.add_argument(
        "--sizes",
        default=None,
        type=flag_type(parse_size_range),
        metavar="MIN:MAX",
        help="message sizes, e.g. 4:1MiB (default: OSU's)",
    )
    parser.add_argument(
        "--iterations",
        type=int,
        default=None,
        metavar="K",
        help=f"timed loops: on token buckets (default {SHAPED_ITERATIONS}, after OSU's own "
        f"warm-up), elsewhere point-to-point 1 and a collective's one call is all",
    )
    add_network_arguments(parser.add_argument_group("cluster"))
    return parser


def machine_options(args):
    """sim.run's cluster options for the machine alone, from ``sim.osu``'s flags."""
    return argparse.Namespace(
        **vars(args),
        nodes=args.ranks or 2,
        steps_sample=None,
        collectives="message",
        engine="events",
        ghost=None,
        speeds="1x",
        stragglers=None,
        fail=None,
        compute=None,
    )


def table(bench, cluster, sizes, iterations=None):
    """The lines of the simulated table, header first, in OSU's format, each as simulated
    (``iterations``: the ``--iterations`` flag)."""
    iterations = loop_calls(cluster, bench, iterations)[0]

    note = (
        f"simulated by twinsgd sim.osu: {cluster.ranks} ranks, {cluster.ranks_per_host} a host, "
        f"profile {cluster.profile or 'none'}, {cluster.mpi}"
    )
    sizes = list(sizes)
    values = side_by_side(_table_value, [(bench, cluster, n, iterations) for n in sizes])
    return format_table(bench, note, zip(sizes, values, strict=True))


def _table_value(bench, cluster, nbytes, iterations):
    """The table's number at ``nbytes``: `simulate_benchmark`, then `osu_value`."""
    seconds = simulate_benchmark(bench, cluster, nbytes, iterations, cluster.mpi)
    return osu_value(bench, seconds, nbytes, iterations)


def side_by_side(function, calls):
    """``function(*args)`` for each ``args`` of ``calls``, in order, each as soon as it and
    those before it are done: side by side on this process's cores where it has several
    (forked processes; each call a simulation, seconds to minutes for a site's table at its own
    scale), else one after the other; the same numbers either way. Ctrl-C reaches the forked
    processes too (one process group) and ends them with the command's one line. A process in
    which MPI is initialized is not forked: the MPI standard leaves fork after MPI_Init
    undefined (MPICH's shared memory, UCX's threads), so its calls run one after the other."""
    calls = list(calls)
    cores = (
        os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    )
    workers = min(len(calls), len(cores))  # (no affinity outside Linux: every core)
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        workers = 1
    if workers < 2:
        yield from (function(*args) for args in calls)
        return
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        yield from pool.map(function, *zip(*calls, strict=True))


@one_line_on_interrupt("python -m sim.osu")
def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.iterations is not None and args.iterations < 1:
            raise ValueError(f"--iterations must be >= 1, got {args.iterations}")
        if args.ranks is not None and args.ranks < 2:
            raise ValueError(f"--ranks must be >= 2, got {args.ranks}")
        profile = load_profile(args.profile) if args.profile else None
        cluster = build_cluster(machine_options(args), profile, None, "osu")
        sizes = osu_sizes(args.bench, *(args.sizes or ()))
    except ValueError as err:
        parser.error(str(err))
    for line in table(args.bench, cluster, sizes, args.iterations):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
