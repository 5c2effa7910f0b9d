"""The CPU the kernel spends moving a rank's bytes over TCP: seconds a byte on the sender's side
and on the receiver's.

Why: over TCP the bytes are moved by the CPUs of the machines at each end (the copies into and
out of the socket, TCP's segments and acknowledgements, a virtual link's softirqs), and that
time is taken from whatever computes there. On an emulated cluster (`real.cluster`: all hosts on
one machine) a parameter server's replies to its other workers slowed the gradient of a worker
that had its reply: traced, the workers' gradients were off their cores 19-24 % of their wall
time with no other rank computing (4 hosts on 2 cores, 1 Gbit/s, 2026-12-01), and the
simulator, which gave a rank in a call no core, had them 17-36 % short. A plain socket moving
200 MB between two emulated hosts kept the machine busy 0.25-0.30 CPU seconds (user, system
and softirq; 2026-12-02).

How (`stack_cpu`): rank 0 sends rank 1 chunks of ``CHUNK_BYTES`` for about ``SECONDS``, each
rank waiting in a loop that tests its request and sleeps (``POLL_S``), so that what the machine
is busy is the bytes' (MPICH's blocking calls spin: a core each, whatever moves). The busy time
is read from ``/proc/stat`` (user, nice, system, irq and softirq; not idle, iowait or steal, the
hypervisor's); both then wait as many polls with nothing moving, and that time is taken off. On
two machines each rank reads its own; on one (emulated hosts: one boot id) the pair is pinned to
two cores, the sender's side its core, the receiver's the rest of the machine. ``/proc/stat``
counts in ticks of 10 ms (USER_HZ 100) a core, so a quick transfer's busy time (0.6 s moving
70 MB between emulated 1 Gbit/s hosts: 3-8 ticks in all) is good to a few ticks, and a side can
read 0: the compute lost below, a median over windows, is what the simulator takes.

The busy time is not all a byte costs the compute beside it: its copies also evict that
compute's caches. So, given compute windows (`real.calibrate`: the model's training step in a
process pinned to each core), windows without and with the transfer alternate, the pair still
pinned, and what each core's process lost is that side's cost: the sender's core's, and the
rest of the machine's for the receiver (its core, and any core the kernel did its work on).
Measured here (2 cores, 1 Gbit/s, MPICH over TCP, 2026-12-02): the MLP's steps lost 1.9-2.9 ns
a byte in all where the busy time was 0.7-1.1 ns; a 128 x 128 matrix product, which fits its
cache, lost 1.2 ns. Split as the busy time was, the two sides came out 48/52 one night and
17/83 the next; each core's own loss, in five tries, 31/69 to 53/47.
"""

import os
import time

import numpy as np

from real.mpi import MPI

CHUNK_BYTES = 4 * 2**20  # a message of the transfer (one MPI Isend)
POLL_S = 1e-3  # a waiting rank sleeps this long between tests of its request
SECONDS = 2.0  # the transfer's length (about: whole chunks), ``quick``: a third
WINDOW_S = 0.5  # a window of compute with or without the transfer (`_compute_lost`)
WINDOW_PAIRS = 6  # windows without, then with it (``quick``: 3)
_TAG = 23


def busy_s(cpu=None):
    """CPU seconds the machine (``cpu``: that core alone) has been busy since boot: user, nice,
    system, irq and softirq time from ``/proc/stat``."""
    name = "cpu" if cpu is None else f"cpu{cpu}"
    with open("/proc/stat") as fh:
        for line in fh:
            fields = line.split()
            if fields and fields[0] == name:
                user, nice, system, _idle, _iowait, irq, softirq = map(int, fields[1:8])
                return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")
    raise OSError(f"/proc/stat has no line {name!r}")


def _wait(request):
    """Test ``request`` until it is done, sleeping between tests; returns the tests made."""
    polls = 1
    while not request.Test():
        time.sleep(POLL_S)
        polls += 1
    return polls


def _move(comm, buf, count):
    """Ranks 0 and 1: rank 0 sends ``count`` chunks to rank 1. Returns this rank's polls."""
    polls = 0
    for _ in range(count):
        if comm.rank == 0:
            polls += _wait(comm.Isend(buf, dest=1, tag=_TAG))
        else:
            polls += _wait(comm.Irecv(buf, source=0, tag=_TAG))
    return polls


def _idle(polls):
    """``polls`` tests and sleeps with nothing moving, as `_move`'s waiting costs."""
    for _ in range(polls):
        time.sleep(POLL_S)


def stack_cpu(comm, quick=False, compute=None):
    """The CPU a byte sent from rank 0 to rank 1 costs, on rank 0 (None elsewhere): a dict of
    ``send_s_per_byte`` and ``recv_s_per_byte`` (what the simulator takes: the busy time,
    or given ``compute`` each side's compute lost), the busy time (``busy_send_s_per_byte``,
    ``busy_recv_s_per_byte``), ``bytes`` and ``seconds`` of that transfer, and, given
    ``compute``, the compute it took (``lost_s_per_byte``; ``lost_by_core_s_per_byte``;
    ``lost``, the fraction per window pair; ``window_s`` and
    ``window_bytes``, a window's seconds and the bytes moved in one). The module's notes say how.

    ``compute`` (rank 0, one machine): ``(start, finish)``, functions that start a window of
    the seconds given in processes computing, one pinned to each core of this rank's affinity
    in its order, and return each one's median step seconds in it. Windows with and without the
    transfer alternate; the compute lost is what a byte costs (its caches and switches besides
    the busy time): the first core's process's loss is the sender's (rank 0 is pinned there),
    the others' the receiver's. Collective; ranks past 1 wait, sleeping."""
    from real.netbench import quiet_barrier
    from real.train import boot_id

    ids = comm.allgather(boot_id())
    one_machine = ids[0] == ids[1]
    pair = comm.Split(0 if comm.rank < 2 else MPI.UNDEFINED, comm.rank)
    if comm.rank > 1:
        quiet_barrier(comm)
        comm.gather(None, root=0)
        return None
    cpus, pinned = sorted(os.sched_getaffinity(0)), None
    if one_machine and len(cpus) >= 2:  # the sender on one core, the receiver on another
        pinned = set(cpus)
        os.sched_setaffinity(0, {cpus[comm.rank]})
    core = cpus[0] if pinned is not None and comm.rank == 0 else None

    def read():  # (this rank's core alone, or 0; the whole machine)
        return (busy_s(core) if core is not None else 0.0, busy_s())

    try:
        buf = np.zeros(CHUNK_BYTES // 4, dtype=np.float32)
        _move(pair, buf, 1)  # warm: connections, pages
        quiet_barrier(pair)
        t0 = time.perf_counter()
        _move(pair, buf, 1)
        chunk_s = pair.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        count = max(2, round((SECONDS / 3 if quick else SECONDS) / chunk_s))
        quiet_barrier(pair)
        before, t0 = read(), time.perf_counter()
        polls = _move(pair, buf, count)
        quiet_barrier(pair)  # the receiver has it all
        moving, took = read(), time.perf_counter() - t0
        _idle(polls)
        quiet_barrier(pair)
        idle = read()
        with_compute = pair.bcast(compute is not None and pinned is not None, root=0)
        lost = _compute_lost(pair, buf, chunk_s, quick, compute) if with_compute else None
    finally:
        if pinned is not None:
            os.sched_setaffinity(0, pinned)
    pair.Free()
    quiet_barrier(comm)
    used = [(b - a) - (c - b) for a, b, c in zip(before, moving, idle, strict=True)]
    readings = comm.gather(used, root=0)
    if comm.rank != 0:
        return None
    nbytes = count * CHUNK_BYTES
    (sender_core, sender_machine), (_, receiver_machine) = readings[:2]
    if one_machine:  # one machine's busy time: the sender's core, the rest the receiver's
        send, recv = max(0.0, sender_core), max(0.0, sender_machine - sender_core)
    else:
        send, recv = max(0.0, sender_machine), max(0.0, receiver_machine)
    result = {
        "send_s_per_byte": send / nbytes,
        "recv_s_per_byte": recv / nbytes,
        "busy_send_s_per_byte": send / nbytes,
        "busy_recv_s_per_byte": recv / nbytes,
        "bytes": nbytes,
        "seconds": took,
    }
    if lost is not None:
        by_core, pairs, window_s, window_bytes = lost
        result.update(
            send_s_per_byte=by_core[0],
            recv_s_per_byte=sum(by_core[1:]),
            lost_s_per_byte=sum(by_core),
            lost_by_core_s_per_byte=by_core,
            lost=pairs,
            window_s=window_s,
            window_bytes=window_bytes,
        )
    return result


def _compute_lost(pair, buf, chunk_s, quick, compute):
    """On rank 0 of ``pair`` (None on rank 1): the CPU seconds of compute a byte moved takes on
    each core (the median over window pairs of its process's loss), each window pair's loss
    over all the processes (the mean share of a step's time), a window's seconds and the
    bytes moved in one. Windows of a process computing on each core (``compute``:
    `stack_cpu`'s), each without and then with chunks moving from rank 0 to rank 1 for about
    as long."""
    from real.netbench import quiet_barrier

    count = max(2, round(WINDOW_S / chunk_s))
    seconds, nbytes = count * chunk_s, count * CHUNK_BYTES
    losses = []  # per window pair, each process's share of a step's time not its own
    for _ in range(3 if quick else WINDOW_PAIRS):
        steps = {}
        for moving in (False, True):
            quiet_barrier(pair)
            if pair.rank == 0:
                compute[0](seconds)
            if moving:
                _move(pair, buf, count)
            else:
                time.sleep(seconds)
            if pair.rank == 0:
                steps[moving] = np.asarray(compute[1]())
        if pair.rank == 0:
            losses.append(1.0 - steps[False] / steps[True])
    if pair.rank != 0:
        return None
    # each core's process lost that share of its core for the window
    by_core = np.maximum(0.0, np.median(losses, axis=0)) * seconds / nbytes
    pairs = [round(float(np.mean(x)), 4) for x in losses]
    return [float(x) for x in by_core], pairs, seconds, nbytes
