"""The message patterns the node programs use, timed the way OSU's benchmarks time them.

Every function here is collective over the communicator it is given and returns seconds on its
rank 0 (None elsewhere). Sizes are bytes of float32 buffers (multiples of 4; ``8 B`` is two
floats). Three patterns, because a network does not cost the same in each (measured on veths
shaped to 1 Gbit/s: 335 KB took 2.68 ms one way in a ping-pong, 2.81 ms in a Sendrecv, since
each direction also carries the other's TCP acknowledgements):

- `ping_pong`: one-way time of a blocking Send/Recv round trip, halved (Send, Recv: the parameter
  server's push and reply);
- `exchange`: one ``Sendrecv`` of n bytes each way at once (a ring allreduce's step, gossip's
  exchange with one partner);
- `incast`: ranks 1..k each send n bytes to rank 0 at once, time until rank 0 has them all (k
  workers pushing to one server);
- `send_overhead`: LogP's o, the seconds a rank spends inside one small ``Send`` that does not
  wait for its receiver (one call after a barrier, its receiver not yet there);
- `eager_limit`: the largest ``Send`` that returns before its receiver is there (eager);
- `call_overhead`: what each message of a hot loop holds once and a step inside one of MPI's
  own collectives does not (MPICH: the hot Sendrecv less the second exchange of its own
  allreduce; else one mpi4py ``Sendrecv`` to itself on ``COMM_SELF``);
- `copy_read_by_peer`: a copy into a buffer the other rank has just read through the library
  (MPI's first copy in OSU's loop of a collective).

``ping_pong`` and ``exchange`` also time a pattern *in situ* (``step=``): as a training program
meets it rather than as OSU's hot loop does. Before each repetition both ranks run a compute
step (the model's gradient, written into the buffer the message is then cut from) and meet at a
barrier, untimed; the timed message sends a slice of what the step just wrote into a buffer of
its size that the step did not touch, so what the program pays is in the time: caches the step
has filled with its own data, the ranks leaving the barrier a little apart, the mpi4py call.
Through this machine's shared memory a 335 KB ``Sendrecv`` took 31-41 us hot and 42-52 us in
situ; the ring of a 2-rank MNIST MLP run took 52 us a step (median). A new receive buffer at
every repetition made it 75-116 us: with sizes up to 16 MiB interleaved, the allocator hands
back pages the kernel must fault in again, which a program that allocates one size over and
over does not meet.

Shared machine, so: a batch of repetitions after a barrier and warm-up, its *mean* kept (single
round trips are bimodal here, and the mean holds the modes in proportion); sizes *interleaved*,
one batch of each size per pass, so a burst of load spoils one batch of many sizes, which the
median over passes drops, rather than every batch of one size.
"""

import time

import numpy as np

from real.backend import exchange_arrays, probe, ring_allreduce_mpi
from real.mpi import MPI

_TAG = 17


def quiet_barrier(comm, poll_s=1e-3):
    """A barrier that sleeps while it waits (MPICH's Barrier spins a whole core, which on a
    2-core machine is the core the measuring ranks need). Collective."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(poll_s)


def repetitions(nbytes, quick):
    """(passes, repetitions per batch, warm-up repetitions per batch) for ``nbytes``: fewer for
    large messages, as OSU does."""
    passes = 12 if quick else 20
    if nbytes <= 64 * 1024:
        return passes, 20 if quick else 50, 10
    return (passes, 5, 2) if nbytes <= 2**20 else (8, 3, 1)


def in_situ_repetitions(nbytes, quick):
    """(passes, repetitions per batch, warm-up repetitions per batch) of an in-situ pattern:
    each repetition costs a compute step too, so fewer than `repetitions`."""
    if nbytes <= 2**20:
        return (6, 3, 1) if quick else (10, 5, 1)
    return (4, 2, 1) if quick else (6, 3, 1)


def ping_pong(comm, sizes, quick=False, step=None, samples=None, refill_s=0.0, rewrite=False):
    """One-way seconds per size between ranks 0 and 1 (others wait quietly); ``step``: in situ
    (the module's docstring), and ``samples`` (a dict) then gets every repetition's seconds by
    size, on rank 0; ``refill_s``: token buckets' refill time, let pass before each batch
    (`_interleaved`); ``rewrite``: each rank writes the bytes it sends just before each
    repetition, untimed (`_on_pair`). Collective."""
    return _on_pair(comm, sizes, quick, _round_trip, True, step, samples, refill_s, rewrite)


def exchange(comm, sizes, quick=False, step=None, samples=None, refill_s=0.0, rewrite=False):
    """Seconds of one ``Sendrecv`` of n bytes each way between ranks 0 and 1; ``step``,
    ``samples``, ``refill_s`` and ``rewrite``: as `ping_pong`'s. Collective."""
    return _on_pair(comm, sizes, quick, _sendrecv, False, step, samples, refill_s, rewrite)


def nonblocking_exchange(comm, sizes, quick=False, step=None, samples=None):
    """Seconds of gossip's exchange of n bytes each way between ranks 0 and 1: an ``Irecv``
    and an ``Isend`` and a ``Waitall`` of both (`real.backend.exchange_arrays`, as the
    programs' `Exchange` runs); ``step`` and ``samples``: as `ping_pong`'s. Not a ``Sendrecv``:
    through this machine's shared memory (AMD EPYC, 2026-12-02) it took 1.15-1.6x one in situ
    (670 KB: 311-357 us against 225-273 in three rounds). Collective."""
    return _on_pair(comm, sizes, quick, _isend_irecv, False, step, samples)


def eager_send(comm, sizes, step, quick=False, refill_s=0.0):
    """Seconds rank 0 spends inside a blocking ``Send`` of n bytes to rank 1 per size, in situ
    (``step``: the module's docstring), for sizes the eager protocol sends (`eager_limit`):
    LogP's o as programs pay it. Where the sender's CPU moves the bytes it grows with them: over
    TCP the kernel copies them into the socket, 51 us at 4 KB, 214 at 256 KB and 362 at 670
    KB between emulated 1 Gbit/s hosts right after a compute step (2026-11-28), against 5 us
    for a hot 8-byte Send (`send_overhead`); the bytes leave as they are copied. Rank 1 takes
    each message in ``Recv``. ``refill_s``: as `ping_pong`'s. Collective; rank 0 gets the
    seconds, the others None."""
    return _on_pair(comm, sizes, quick, _one_send, False, step, None, refill_s)


def probe_delay(comm, sizes, step, quick=False):
    """The one-way time of an in-situ ping-pong of each size (``step``: `ping_pong`'s) whose
    receiver takes the message as a program's ``Recv`` does, waiting in `real.backend.probe`
    first, beside the same with a plain ``Recv``; the two alternate repetition by repetition,
    so the machine's drift falls on both. ``[(plain s, probed s, taken s), ...]`` by size,
    medians, on rank 0 (``taken``: its ``Recv`` after the probe); None elsewhere.

    A receiver in the probe loop sees a rendezvous Send's request only when it polls, and
    posts its receive from Python after: in situ through shared memory, 670 KB took 126-151 us
    one way with ``Recv`` and 159-175 with the probe first, 8 KiB 18-25 against 27-34
    (2026-12-02); a synchronous server's sends of 670 KB took 240 us while its worker's
    receives (from the probe's return) took 190. Collective."""
    pair = comm.Split(0 if comm.rank < 2 else MPI.UNDEFINED, comm.rank)
    result = None
    if pair != MPI.COMM_NULL:
        times = {n: ([], [], []) for n in sizes}  # size -> plain, probed, taken seconds
        inbox = {n: np.zeros(max(1, n // 4), np.float32) for n in sizes}
        for n in sizes:
            passes, count, warmup = in_situ_repetitions(n, quick)
            for k in range(passes * (count + warmup)):
                for probed in (False, True):
                    payload = step()[: n // 4]
                    pair.Barrier()
                    t0 = time.perf_counter()
                    taken_s = (_probed_round_trip if probed else _round_trip)(
                        pair, payload, inbox[n]
                    )
                    if k % (count + warmup) >= warmup:
                        times[n][probed].append((time.perf_counter() - t0) / 2)
                        if probed:
                            times[n][2].append(taken_s)
        pair.Free()
        if comm.rank == 0:
            result = [tuple(float(np.median(t)) for t in three) for three in times.values()]
    quiet_barrier(comm)
    return result


def beside_pollers(comm, nbytes=8, quick=False):
    """One-way time of ranks 0 and 1's ping-pong of ``nbytes`` (half the mean round trip of a
    batch) with the other ranks asleep, and with them waiting in MPI's ``Barrier``, which
    polls; batches of the two alternate, so that the machine's drift falls on both. (seconds
    asleep, seconds polling), each the median over passes, on rank 0; None elsewhere.

    Past the cores, ranks that poll take turns with the pair, and a message waits for its
    receiver's: through `real.cluster` (4 ranks on 2 cores, 2 emulated hosts) ranks 0 and 2
    took 17-21 us one way asleep and 47-84 us polling (2026-12-02). Collective."""
    pair = comm.Split(0 if comm.rank < 2 else MPI.UNDEFINED, comm.rank)
    passes, count, warmup = (10, 200, 50) if quick else (20, 400, 100)
    buf, inbox = written(nbytes), np.zeros(max(1, nbytes // 4), np.float32)
    times = {False: [], True: []}  # polling -> each batch's one-way seconds
    for _ in range(passes):
        for polling in (False, True):
            if pair != MPI.COMM_NULL:
                pair.Barrier()
                for _ in range(warmup):
                    _round_trip(pair, buf, inbox)
                t0 = time.perf_counter()
                for _ in range(count):
                    _round_trip(pair, buf, inbox)
                times[polling].append((time.perf_counter() - t0) / count / 2)
            if polling:
                comm.Barrier()  # the others have polled here since the batch began
            else:
                quiet_barrier(comm)
    if pair != MPI.COMM_NULL:
        pair.Free()
    if comm.rank != 0:
        return None
    return float(np.median(times[False])), float(np.median(times[True]))


def incast(comm, sizes, quick=False, refill_s=0.0):
    """Seconds until rank 0 holds n bytes from each of ranks 1..size-1, all sent at once after
    a barrier (rank 0 has a receive posted for each sender and takes them as they arrive).
    Needs 3 ranks or more to be an incast; returns None on every rank with fewer. Collective.

    The receives name their senders rather than ``ANY_SOURCE``: MPICH over TCP between
    emulated hosts of two ranks each never completed an ``ANY_SOURCE`` receive here."""
    if comm.size < 3:
        return None
    buffers = [written(n) for n in sizes]
    inbox = [[np.zeros(n // 4, dtype=np.float32) for _ in range(comm.size)] for n in sizes]

    def batch(j, count, warmup=False):
        """Mean over ``count`` rounds of rank 0's time from leaving a barrier to holding every
        message (the barrier after each round, which starts the next together, is not timed)."""
        total = 0.0
        for _ in range(count):
            comm.Barrier()
            t0 = time.perf_counter()
            if comm.rank == 0:
                MPI.Request.Waitall(
                    [comm.Irecv(inbox[j][s], source=s, tag=_TAG) for s in range(1, comm.size)]
                )
            else:
                comm.Send(buffers[j], dest=0, tag=_TAG)
            total += time.perf_counter() - t0
        return total / count

    return _interleaved(comm, sizes, quick, batch, refill_s=refill_s)


def fan_out_gap(comm, hosts, nbytes=2**20, repetitions=20, refill_s=0.0):
    """Seconds between the first two receivers' first sight of their messages when rank 0
    sends ``nbytes`` to one rank on each of two other hosts with blocking Sends back to back,
    as a synchronous server replies: the median over ``repetitions`` (after 3 not kept). Each
    receiver spins in ``Iprobe`` from leaving a barrier; its time is from there. Over TCP the
    first flow's window, queued ahead in the sender's NIC, goes first (`sim.fairshare`); an
    equal share would have both seen at once. ``hosts``: every rank's host (`placement`);
    ``refill_s``: a pause before each repetition (token buckets refilled). Collective; rank 0
    gets the seconds, the others None; None everywhere with fewer than 3 hosts."""
    others = [hosts.index(h) for h in dict.fromkeys(hosts) if h != hosts[0]]  # each's first
    group = [0, *others[:2]]
    if len(group) < 3:
        return None
    fan = comm.Split(
        0 if comm.rank in group else MPI.UNDEFINED,
        group.index(comm.rank) if comm.rank in group else 0,
    )
    gap = None
    if fan != MPI.COMM_NULL:
        buf, gaps = written(nbytes), []
        for k in range(repetitions + 3):
            fan.Barrier()
            time.sleep(refill_s)
            fan.Barrier()
            t0, seen = time.perf_counter(), 0.0
            if fan.rank == 0:
                for dest in (1, 2):
                    fan.Send(buf, dest=dest, tag=_TAG)
            else:
                while not fan.Iprobe(source=0, tag=_TAG):
                    pass
                seen = time.perf_counter() - t0
                fan.Recv(buf, source=0, tag=_TAG)
            times = fan.gather(seen, root=0)
            if fan.rank == 0 and k >= 3:
                gaps.append(abs(times[2] - times[1]))
        fan.Free()
        gap = float(np.median(gaps)) if comm.rank == 0 else None
    quiet_barrier(comm)  # the others wait here, sleeping
    return gap


def send_overhead(comm, count=2000):
    """LogP's o: median seconds rank 0 spends in one 8-byte blocking ``Send`` to rank 1 right
    after a barrier, which completes without waiting for the receiver (eager protocol), over
    ``count`` rounds; rank 1 posts its receive later (after four of the pair's round trips),
    as a broadcast's other ranks do. Collective; ranks >= 2 wait quietly.

    Why one call after a barrier, to a receiver not yet there: OSU's loops and the programs
    call MPI so. Through this machine's shared memory 200 Sends in a row took 0.63 us each, a
    lone one to a receiver already waiting 0.64, to one that came later 0.85-1.04 (2026-12-05);
    OSU's broadcast root of 2 ranks took 0.81-1.02 us a call, and the simulated broadcast,
    whose root pays o, was 0.2 us a call short with the back-to-back o in every round.
    Between two emulated 1 Gbit/s hosts 8.2 us back to back, 8.5 lone."""
    pair = comm.Split(0 if comm.rank < 2 else MPI.UNDEFINED, comm.rank)
    seconds = None
    if pair != MPI.COMM_NULL:
        buf = np.zeros(2, dtype=np.float32)
        round_trips = []
        for _ in range(50):
            pair.Barrier()
            t0 = time.perf_counter()
            _round_trip(pair, buf, buf)
            round_trips.append(time.perf_counter() - t0)
        later_s = 4 * float(np.median(round_trips))
        calls = []
        for _ in range(count):
            pair.Barrier()
            t0 = time.perf_counter()
            if pair.rank == 0:
                pair.Send(buf, dest=1, tag=_TAG)
                calls.append(time.perf_counter() - t0)
            else:
                while time.perf_counter() - t0 < later_s:  # (outside MPI: not yet receiving)
                    pass
                pair.Recv(buf, source=0, tag=_TAG)
        seconds = float(np.median(calls)) if pair.rank == 0 else None
        pair.Free()
    quiet_barrier(comm)
    return seconds if comm.rank == 0 else None


def call_overhead(comm, library="mpich", count=1000, batches=15):
    """Seconds a step inside one of MPI's own collectives saves against the same message in a
    hot loop of calls, which holds the program's return from one call and entry into the next;
    between ranks 0 and 1 of ``comm``, on rank 0 (others wait quietly). Collective.

    MPICH's allreduce of 2 ranks is one exchange up to 8 bytes (recursive doubling) and two
    above (Rabenseifner's): its 16-byte call less its 4-byte one is an exchange from inside the
    library, and the hot ``Sendrecv`` of 4 bytes less that is the saving (batches of the three
    interleaved, the saving taken in each pass and its median over passes; at least 0):
    0.8-1.0 us through this machine's shared memory (2026-12-05), 1.1 us between two emulated
    hosts. Why per pass: a difference of three medians taken apart came out 0.06 us in one
    calibration of 18 (2026-12-05; 0.81-0.98 in the others), and every simulated step of MPI's
    small allreduce then cost 2.3 us, not 1.4; a pass's three batches meet the machine's
    moment together. Any other ``library``: one call on its own, a hot ``Sendrecv`` of 4 bytes
    to itself on ``COMM_SELF`` (1.3-1.5 us and 0.8 us)."""
    if library == "mpich":
        return _inside_saving(comm, count, batches)
    seconds = None
    if comm.rank == 0:
        alone, out, into = MPI.COMM_SELF, np.zeros(1, np.float32), np.zeros(1, np.float32)
        means = []
        for _ in range(batches + 1):  # the first batch warms up
            t0 = time.perf_counter()
            for _ in range(count):
                alone.Sendrecv(out, 0, _TAG, into, 0, _TAG)
            means.append((time.perf_counter() - t0) / count)
        seconds = float(np.median(means[1:]))
    quiet_barrier(comm)
    return seconds


def _inside_saving(comm, count, batches):
    """`call_overhead` measured with MPICH's own allreduce (its docstring)."""
    pair = comm.Split(0 if comm.rank < 2 else MPI.UNDEFINED, comm.rank)
    saving = None
    if pair != MPI.COMM_NULL:
        peer = 1 - pair.rank
        out, into = np.zeros(1, np.float32), np.zeros(1, np.float32)
        four, sixteen = np.zeros(4, np.float32), np.zeros(4, np.float32)
        calls = {
            "sendrecv": lambda: pair.Sendrecv(out, peer, _TAG, into, peer, _TAG),
            "one exchange": lambda: pair.Allreduce(out, into),  # 4 bytes: recursive doubling
            "two exchanges": lambda: pair.Allreduce(four, sixteen),  # 16: Rabenseifner's
        }
        means = {name: [] for name in calls}
        for p in range(batches + 1):  # the first pass warms up
            for name, call in calls.items():
                pair.Barrier()
                t0 = time.perf_counter()
                for _ in range(count):
                    call()
                if p:
                    means[name].append((time.perf_counter() - t0) / count)
        hot, one, two = (np.array(means[name]) for name in calls)
        saving = float(np.clip(np.median(hot - (two - one)), 0.0, np.median(hot)))
        pair.Free()
    quiet_barrier(comm)
    return saving if comm.rank == 0 else None


def eager_limit(comm, late_s=0.02):
    """The largest message (bytes, a power of 2 from 1 KiB to 4 MiB; 0 if none) whose blocking
    ``Send`` returns before its receiver has posted the receive: MPI's eager protocol (buffered,
    the bytes go on their own) below it, rendezvous above. Rank 1 posts each receive
    ``late_s`` late; a send that returns in less than half that did not wait. Measured here:
    1 MiB over TCP, 4 KiB through shared memory. Collective; the limit on rank 0."""
    pair = comm.Split(0 if comm.rank < 2 else MPI.UNDEFINED, comm.rank)
    limit = None
    if pair != MPI.COMM_NULL:
        limit, eager = 0, True
        for k in range(10, 23):
            buf = np.zeros(2**k // 4, dtype=np.float32)
            pair.Barrier()
            if pair.rank == 0:
                t0 = time.perf_counter()
                pair.Send(buf, dest=1, tag=_TAG)
                eager = eager and time.perf_counter() - t0 < late_s / 2
                limit = 2**k if eager else limit
            else:
                time.sleep(late_s)
                pair.Recv(buf, source=0, tag=_TAG)
        pair.Free()
    quiet_barrier(comm)
    return limit if comm.rank == 0 else None


def allreduce_in_situ(comm, sizes, step, quick=False, outside=None, paired=None, second=None):
    """Seconds of the programs' own allreduce of n bytes between ranks 0 and 1, in situ (the
    module's docstring): the ring (`real.backend.ring_allreduce_mpi`, a ``Sendrecv`` each way,
    the add of the received half) and the division into the mean, as the real backend's comm
    times them. What is left past its messages and its add is the work programs pay around
    them (`real.calibrate`). ``outside`` (a dict): gets, by size, the seconds each repetition
    spent outside its MPI calls (the slicing, the add, the division: Python's and numpy's
    work). ``second`` (a dict): gets, by size, each repetition's seconds from the end of its
    first ``Sendrecv`` to the end of its second: the ring's next step as a program runs it,
    right after the last, with the add of what it received between (the program's loop, the
    add, the call; the bytes it sends were just written). ``paired`` (a dict, with
    ``second``): gets, by size, each repetition's allreduce less that next step and less an
    in-situ ``Sendrecv`` of n/2 bytes each way timed in the same repetition just before it
    (its own compute step and barrier first, as `exchange` in situ times it, as the first
    step runs): all at the machine's speed of that moment. This machine's moves 1.4-1.6x
    within seconds, and with the Sendrecv taken from the separate `exchange` phase the
    remainder came out at 59 and 431 us for 1 MiB in two calibrations of one day
    (2026-12-02), -175 to +706 us for 4 MiB in three rounds of a minute. Collective; on rank
    0, None elsewhere (with ``outside`` or ``paired``, each size's median repetition of the
    allreduce alone)."""
    if outside is None and paired is None and second is None:
        return _on_pair(comm, sizes, quick, _ring_mean, halve=False, step=step)
    if paired is not None and second is None:
        raise ValueError("paired needs second: the allreduce less its two steps")
    own = {}  # every allreduce's seconds, by size

    def ring_mean(pair, buf, inbox):
        if paired is not None:  # this repetition's Sendrecv of n/2, after a step of its own
            half = step()[: buf.size // 2]
            pair.Barrier()
            t0 = time.perf_counter()
            _sendrecv(pair, half, inbox[: half.size])
            exchanged_s = time.perf_counter() - t0
            buf = step()[: buf.size]  # the allreduce after a step of its own, as programs
            pair.Barrier()
        timed = _TimedSendrecv(pair)
        t0 = time.perf_counter()
        _ring_mean(timed, buf, inbox)
        seconds = time.perf_counter() - t0
        own.setdefault(buf.nbytes, []).append(seconds)
        if outside is not None:
            outside.setdefault(buf.nbytes, []).append(seconds - timed.inside_s)
        if second is not None:  # 2 ranks: two Sendrecvs
            first_end, second_end = timed.ends
            second.setdefault(buf.nbytes, []).append(second_end - first_end)
        if paired is not None:
            rest = seconds - exchanged_s - (second_end - first_end)
            paired.setdefault(buf.nbytes, []).append(rest)

    _on_pair(comm, sizes, quick, ring_mean, halve=False, step=step)
    return [float(np.median(own[n])) for n in sizes] if comm.rank == 0 else None


class _TimedSendrecv:
    """``comm``, whose ``Sendrecv`` calls add their seconds to ``inside_s`` and their ends
    (`time.perf_counter`) to ``ends``."""

    def __init__(self, comm):
        self._comm, self.inside_s, self.ends = comm, 0.0, []

    def Sendrecv(self, *args, **kwargs):
        t0 = time.perf_counter()
        self._comm.Sendrecv(*args, **kwargs)
        t1 = time.perf_counter()
        self.inside_s += t1 - t0
        self.ends.append(t1)

    def __getattr__(self, name):
        return getattr(self._comm, name)


def _on_pair(
    comm, sizes, quick, pattern, halve, step=None, samples=None, refill_s=0.0, rewrite=False
):
    """Time ``pattern(pair, buf, inbox)`` between ranks 0 and 1 per size; others wait.
    ``step``: a callable run before each repetition that returns a float32 array of at least
    ``max(sizes) / 4`` elements, the head of which it has just written: in situ. ``samples``
    (in situ only): a dict that gets each timed repetition's seconds (halved with
    ``halve``) by size, on rank 0, warm-ups left out. ``rewrite`` (hot only): each rank
    writes its send buffer before each repetition (the writes' time taken off), as MPI's
    collectives send what they have just copied, added or received: those lines are dirty in
    the sender's cache, and through shared memory such a Sendrecv took 1.3-2.0x the clean one
    from 64 KiB to 1 MiB (2026-12-02)."""
    pair = comm.Split(0 if comm.rank < 2 else MPI.UNDEFINED, comm.rank)
    seconds = None
    if pair != MPI.COMM_NULL:
        if step is None:
            buffers = [written(n) for n in sizes]
            inbox = [np.zeros(n // 4, dtype=np.float32) for n in sizes]

            def batch(j, count, warmup=False):
                """Back to back (a barrier before each would add its exit's skew); rewriting,
                each repetition writes first, and the writes alone, timed after, come off."""
                pair.Barrier()  # both ranks are busy from here: a spinning barrier costs nothing
                t0 = time.perf_counter()
                for k in range(count):
                    if rewrite:
                        buffers[j].fill(float(k))
                    pattern(pair, buffers[j], inbox[j])
                t1 = time.perf_counter()
                for k in range(count if rewrite else 0):
                    buffers[j].fill(float(k))
                writes_s = time.perf_counter() - t1 if rewrite else 0.0
                return max(t1 - t0 - writes_s, 1e-9) / count

            plan = repetitions
        else:
            inbox = [np.zeros(n // 4, dtype=np.float32) for n in sizes]
            kept = {n: [] for n in sizes}

            def batch(j, count, warmup=False):
                total = 0.0
                for _ in range(count):
                    payload = step()[: sizes[j] // 4]
                    pair.Barrier()
                    t0 = time.perf_counter()
                    pattern(pair, payload, inbox[j])
                    seconds = time.perf_counter() - t0
                    total += seconds
                    if not warmup:
                        kept[sizes[j]].append(seconds / 2 if halve else seconds)
                return total / count

            plan = in_situ_repetitions
        seconds = _interleaved(pair, sizes, quick, batch, plan, refill_s)
        pair.Free()
        if step is not None and samples is not None and comm.rank == 0:
            samples.update(kept)
    quiet_barrier(comm)
    if comm.rank != 0:
        return None
    return [s / 2 for s in seconds] if halve else seconds


def _interleaved(comm, sizes, quick, batch, plan=repetitions, refill_s=0.0):
    """Median over passes of ``batch(j, count)`` (a batch's mean seconds), each pass one batch
    of every size after its warm-up batch (``batch(j, count, warmup=True)``; ``plan(nbytes,
    quick)``: passes, repetitions and warm-up); on rank 0 of ``comm``, None elsewhere.

    ``refill_s``: on token buckets (an emulated cluster), the seconds they take to fill, let
    pass before each batch. Interleaved, a batch would otherwise start on the buckets the last
    size emptied: between two emulated 1 Gbit/s hosts the 335 KB one-way took 1.91-1.93 ms
    that way, 1.75 ms from full buckets. (The 4 KiB one, 19-23 us either way against OSU's
    13-15 in sizes ascending, differs for another reason.)"""
    plans = [plan(n, quick) for n in sizes]
    means = np.full((max(plan[0] for plan in plans), len(sizes)), np.nan)
    for p in range(len(means)):
        for j, (passes, per_batch, warmup) in enumerate(plans):
            if p >= passes:
                continue
            if warmup:
                _refilled(comm, refill_s)
                batch(j, warmup, warmup=True)
            _refilled(comm, refill_s)
            means[p, j] = batch(j, per_batch)
    if comm.rank != 0:
        return None
    return [float(x) for x in np.nanmedian(means, axis=0)]


def _refilled(comm, refill_s):
    """Together, let ``refill_s`` seconds pass with nothing sent (the buckets fill)."""
    if refill_s:
        comm.Barrier()
        time.sleep(refill_s)


def written(nbytes):
    """A float32 send buffer of ``nbytes`` whose pages hold data. A fresh ``np.zeros`` of more
    than a few pages is calloc's untouched memory, every page the kernel's one zero page until
    written: a send from it reads one cached 4 KiB page over and over (through shared memory a
    256 KiB one way took 11.4 us from it, 25 us from written pages, 2026-12-02)."""
    return np.ones(max(1, nbytes // 4), dtype=np.float32)


def _round_trip(pair, buf, inbox):
    """OSU's ping-pong: each rank sends from ``buf`` and receives into ``inbox``, never sending
    back the bytes it has just received. Those are dirty in the receiver's cache, and through
    shared memory moving them took twice as long (256 KiB: 36-40 us one way against 18-19
    with two buffers, 2026-12-02); OSU's tables, which `sim.calibrate --from-osu` fits, and the
    libraries' own broadcasts move clean ones."""
    if pair.rank == 0:
        pair.Send(buf, dest=1, tag=_TAG)
        pair.Recv(inbox, source=1, tag=_TAG)
    else:
        pair.Recv(inbox, source=0, tag=_TAG)
        pair.Send(buf, dest=0, tag=_TAG)


def _probed_round_trip(pair, buf, inbox):
    """`_round_trip` with each receive as `real.backend`'s: the probe loop, then ``Recv``;
    returns the seconds of this rank's ``Recv`` after its probe (what a program's clock
    charges as the receive's comm, its probe's time being the wait)."""
    status, peer = MPI.Status(), 1 - pair.rank
    if pair.rank == 0:
        pair.Send(buf, dest=peer, tag=_TAG)
    probe(pair, peer, _TAG, status)
    t0 = time.perf_counter()
    pair.Recv(inbox, source=peer, tag=_TAG)
    taken_s = time.perf_counter() - t0
    if pair.rank == 1:
        pair.Send(buf, dest=peer, tag=_TAG)
    return taken_s


def _ring_mean(pair, buf, inbox):
    ring_allreduce_mpi(pair, buf, pair.rank, pair.size)
    np.divide(buf, pair.size, out=buf)


def _one_send(pair, buf, inbox):
    if pair.rank == 0:
        pair.Send(buf, dest=1, tag=_TAG)
    else:
        pair.Recv(inbox, source=0, tag=_TAG)


def _isend_irecv(pair, buf, inbox):
    peer = 1 - pair.rank
    exchange_arrays(pair, {peer: buf}, {peer: inbox}, _TAG)


def _sendrecv(pair, buf, inbox):
    peer = 1 - pair.rank
    pair.Sendrecv(buf, dest=peer, sendtag=_TAG, recvbuf=inbox, source=peer, recvtag=_TAG)


def placement(comm):
    """Where the ranks are: ``(hosts, inter, intra)``, the host name of every rank
    (``MPI_Get_processor_name``; an emulated host's own), the first rank on another host than
    rank 0 (None if all share one) and the first other rank on rank 0's host (None if it is
    alone there). Collective; the same on every rank."""
    hosts = comm.allgather(MPI.Get_processor_name())
    inter = next((r for r, h in enumerate(hosts) if h != hosts[0]), None)
    intra = next((r for r, h in enumerate(hosts) if r > 0 and h == hosts[0]), None)
    return hosts, inter, intra


def with_partner(comm, partner):
    """``comm`` renumbered so that ``partner`` is rank 1 (rank 0 stays rank 0, the others keep
    their order): the pair functions above then measure ranks 0 and ``partner``. Collective."""
    key = 0 if comm.rank == 0 else 1 if comm.rank == partner else 2 + comm.rank
    return comm.Split(0, key)


def shared_rate(comm, pairs, sizes, quick=False):
    """Bytes a second that ``pairs`` (``[(sender, receiver), ...]`` of ``comm``) move all at once:
    each sender sends n bytes to its receiver right after a barrier; the time is until the last
    receiver holds its message (the slowest rank's). Per size, on rank 0; None elsewhere. The
    senders of one host to another host measure its NIC shared; the pairs inside one host, its
    memory shared. Collective (ranks in no pair wait)."""
    role = {s: ("send", r) for s, r in pairs} | {r: ("recv", s) for s, r in pairs}
    buffers = [written(n) for n in sizes]

    def batch(j, count, warmup=False):
        total = 0.0
        for _ in range(count):
            comm.Barrier()
            t0 = time.perf_counter()
            if comm.rank in role:
                kind, peer = role[comm.rank]
                if kind == "send":
                    comm.Send(buffers[j], dest=peer, tag=_TAG)
                else:
                    comm.Recv(buffers[j], source=peer, tag=_TAG)
            total += comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        return total / count

    seconds = _interleaved(comm, sizes, quick, batch)
    if comm.rank != 0:
        return None
    return [len(pairs) * n / s for n, s in zip(sizes, seconds, strict=True)]


def copy_read_by_peer(pair, sizes, quick=False):
    """Seconds (rank 0's, the median repetition per size; None elsewhere) of ``np.copyto`` of
    n bytes into a buffer the other rank of ``pair`` has just read through the library: both
    ranks send that buffer to each other (``Sendrecv``), meet at a barrier, then copy their
    send buffer into it, the Python call in the time (the caller takes it off). Why: MPI's
    allreduce, reduce and allgather copy the caller's send buffer into the receive buffer
    first (OSU's separate buffers), and in OSU's loop part of that buffer was read by the
    other ranks in the call before. Through this machine's shared memory MPICH moves a large
    message in one copy, its receiver reading the sender's buffer (CMA), and a write to lines
    another core has read waits for them: in MPICH's allreduce of 256 KiB on 2 ranks (fast
    phase) that copy took 18.4 us against 6 warm; with ``MPIR_CVAR_CH4_CMA_ENABLE=0`` (two
    copies through shared cells, the buffer never read by the other rank) 7.0 against 62.7 with
    CMA (slow phase; 2026-12-05). Between hosts the receiver never reads the sender's memory."""
    peer = 1 - pair.rank
    seconds = []
    for nbytes in sizes:
        source, into, inbox = (written(nbytes) for _ in range(3))
        times = []
        for _ in range(7 if quick else 15):
            pair.Sendrecv(into, dest=peer, sendtag=_TAG, recvbuf=inbox, source=peer, recvtag=_TAG)
            pair.Barrier()
            t0 = time.perf_counter()
            np.copyto(into, source)
            times.append(time.perf_counter() - t0)
        seconds.append(float(np.median(times)))
    return seconds if pair.rank == 0 else None


WIRE_ENTRIES = (128, 2048, 32768)  # top-k entries of the messages `wire_in_situ` times: 1-262 KB


def wire_in_situ(comm, step, quick=False):
    """Seconds a program spends writing a compressed message's wire bytes before it sends
    them and reading a message from the bytes it received (`compression.wire`), in situ:
    after a compute step, as a program meets them (hot, a 6.7 KB message takes 1.4 and 3.5 us;
    in a 2-rank training run a 13 KB one 9-22 and 12-23 us: `real.calibrate` takes those from
    the program itself and this pattern's per-byte slope). Every rank runs its steps; none
    communicates.

    Returns, on rank 0 (None elsewhere), ``(nbytes, write_s, read_s)``: lists over top-k
    messages of `WIRE_ENTRIES` entries of a 2**20-entry gradient, the median repetition each.
    """
    from twinsgd.programs.compression import make_codec
    from twinsgd.programs.compression.wire import from_wire, to_wire

    rng = np.random.default_rng(0)
    gradient = rng.standard_normal(2**20).astype(np.float32)
    messages = [make_codec(f"topk:{k / 2**20!r}").encode(gradient) for k in WIRE_ENTRIES]
    repeats = 8 if quick else 25
    nbytes, write_s, read_s = [], [], []
    for msg in messages:
        writes, reads = [], []
        for _ in range(repeats):
            step()
            t0 = time.perf_counter()
            wire = to_wire(msg)
            t1 = time.perf_counter()
            from_wire(wire)
            t2 = time.perf_counter()
            writes.append(t1 - t0)
            reads.append(t2 - t1)
        nbytes.append(msg.nbytes)
        write_s.append(float(np.median(writes)))
        read_s.append(float(np.median(reads)))
    comm.Barrier()
    return (nbytes, write_s, read_s) if comm.rank == 0 else None


def own_code(rows, rng, book):
    """A stand-in for a program's own code between two operations, as the training programs'
    is: a batch of 32 rows drawn from a training set and summed, and a step's bookkeeping in a
    dict (about 23 us warm on this machine). Returns its seconds."""
    t0 = time.perf_counter()
    batch = rows[rng.integers(0, len(rows), 32)]
    book["loss"] = float(batch.sum())
    for k in range(30):
        book["seconds"] += k * 0.5
    return time.perf_counter() - t0


def cold_own_code(comm, nbytes, quick=False):
    """Seconds a program's own code (`own_code`) takes more right after its rank received a
    message of ``nbytes`` than warm, the median of interleaved tries between ranks 0 and 1 (the
    others wait): the caches that the message's copy (through shared memory) or the kernel's
    sockets (between hosts) filled, refilled. Measured 2026-11-27 after 670 KB (the MLP's
    gradient): 14-27 us through shared memory, 59-74 us over TCP between emulated hosts.
    Returns (that extra, at least 0; the stand-in's own seconds warm, the median: the code
    over which it was paid) on rank 0, None elsewhere. Collective."""
    pair = comm.Split(0 if comm.rank < 2 else MPI.UNDEFINED, comm.rank)
    extra = None
    if pair != MPI.COMM_NULL:
        rows = np.random.default_rng(0).random((2000, 784), dtype=np.float32)
        rng, book = np.random.default_rng(1), {"loss": 0.0, "seconds": 0.0}
        buf, status, cold, warm = np.zeros(max(1, nbytes // 4), np.float32), MPI.Status(), [], []
        for _ in range(40 if quick else 150):
            pair.Barrier()
            if pair.rank == 1:
                pair.Send(buf, dest=0, tag=_TAG)
                continue
            probe(pair, 1, _TAG, status)  # as the real backend waits
            pair.Recv(buf, source=1, tag=_TAG)
            cold.append(own_code(rows, rng, book))
            own_code(rows, rng, book)
            warm.append(own_code(rows, rng, book))
        if pair.rank == 0:
            extra = (max(0.0, float(np.median(cold) - np.median(warm))), float(np.median(warm)))
        pair.Free()
    quiet_barrier(comm)
    return extra if comm.rank == 0 else None
