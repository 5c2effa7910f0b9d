"""A host's cores shared among more ranks than it has, as Linux's EEVDF scheduler shares them.

Measured on this machine (kernel 6.18, EEVDF, 2 cores, 250 Hz): a rank that waits in MPICH's
blocking calls polls and yields, so it stays runnable. Study 1's parameter server at 5 processes
traced by the kernel (`twinsgd.analysis.schedtrace`, 200 steps, 2026-12-01): the cores were
never idle and each of the five ranks held them 19.2-20.7 % of the time, 2/5 of a core each,
though computing took a quarter of the cores' time; a waiting rank mostly held a core 1-3 us
before it yielded, but 31 % of its polling was in stretches of over 1 ms while ranks with
work waited; one gradient in six lost its core, for 1-7 ms (the ranks off their cores 14-32 %
of their gradients' wall time). That is EEVDF's fair share with polling ranks as runnable as
working ones, so the model (`Fairness`):

- every rank has a virtual runtime ``v``, its seconds on a core; a core that no rank works on
  runs the ranks that poll, lowest ``v`` first; the mean of all, ``V``, moves at cores / ranks
  a second;
- a rank holds a core while it computes, runs its own code or moves bytes; it gives the core
  up while it waits for a message that has not come (it polls), and to go on it needs one again
  and must be eligible, ``v`` at most ``V``: a rank ahead waits until the others catch up;
- its turn ends on the first scheduler tick (``slice_s``, 4 ms) after its EEVDF slice
  (`eevdf_slice`, 1.5 ms on 2 cores; half of it when the core came to it while it polled, part
  of the slice used: the mean), and then it gives the core to the others, always runnable, and
  waits to be eligible again.

A short compute right after a wait so mostly runs to its end, while work without pause gets its
rank's share; a message to a rank off its core waits until that rank is eligible and a core is
free. A rendezvous Send's copy between two ranks of the host moves while its sender holds a
core and its receiver is eligible: MPICH's copy alternates between them and one core does it
(the backend's `_copy_on_cores`). The copies of an exchange and of a Sendrecv run whole on
their receivers' cores, one after another, as MPICH's single copy does (`_copies_on_cores`).

Against the round-robin turns it replaced (a waiting rank took no core, a turn ran 4 ms from
its grant, and a copy needed two cores at once), each simulating the same measurements
(docs/validation.md, 2026-12-01): study 2's synchronous server with two workers of the CNN, 3
ranks on 2 cores, 97.7 and 85.8 ms a step measured, 93.1 and 96.2 simulated (before: 50.6 and
54.2; the workers' compute 73-83 ms measured, 84-88 simulated, 44-47 before, 44.5 ms calibrated
on 2 ranks), the asynchronous +15 and +0.4 % (-36 and -44 %); study 1's parameter server at 5
processes, 8 runs, mean |error| 19 % (20 %), mean +8 % (-17 %); 4 ranks on 2 cores, 8
configurations, five rounds, mean |error| 11.5, 10.0, 6.1, 9.8 and 7.6 % (10.6, 9.7, 10.2, 8.3
and 10.1 %), the synchronous server now too fast (-10 to -35 %): one core a copy is too fast
for it, two cores at once (tried) too slow (+14 to +53 %).

A rank back on a core after other ranks ran there finds its caches refilled by them: its next
work takes ``switch_s`` more (measured per model by `real.machine_bench.measure_switch_s`: two
processes on one core taking turns, each turn a gradient after the other's and then the same
gradient warm; the MLP at batch 32, 0.29 ms warm, took 70-120 us more cold, 2026-11-27; the
CNN's steps of tens of ms vary more from turn to turn than any refill, which is therefore
taken as 0, 2026-12-01). The rule
here: a rank granted a core after it gave one up, with another rank granted a core meanwhile,
pays it on its next `run`; a rank that loses its core in the middle of its work and comes back
after others ran does the rest ``1 + switch_s / work`` times slower (`HostCores._refill`), at
most ``switch_s`` more a run. Without it, 4 ranks on 2 cores computed 10-23 % less than measured
in every configuration; with it, -12 to +7 % (docs/validation.md).

Not modelled: Linux's run queues are per core, and it places ranks on them and moves them (the
trace: each rank on one core for 0.1-0.5 s at a time); the model pools the host's cores. Nor
is MPICH's ``Probe``, which polls without yielding: a rank in it keeps its core for its whole
turn, which is why ``real.backend`` waits in a yielding loop instead (`real.backend.probe`);
measured with ``Probe``, 4 ranks on 2 cores had come out 12-57 % fast, the parameter servers
most.

Ranks that talk over TCP (an emulated cluster: hosts as network namespaces on this machine,
MPICH over sockets) are modelled as Linux's per-core run queues hold them (``shared_cores(...,
pinned=True)``): each rank stays on one core, the host's ranks in blocks (4 ranks on 2 cores: 0
and 1 on the first, 2 and 3 on the second), and the ranks of one core share it fairly, as
above (`Fairness` on a core of its own); a rank in a call holds no core (the kernel moves its
bytes) and polls. So a compute shorter than its slice mostly keeps its core beside ranks that
poll, and a longer one gets its share. Measured (2026-12-03, docs/validation.md): the MLP's
gradient pinned to a core beside a rank polling in MPICH's ``Recv`` over TCP took 1.19 ms
asleep against 3.09 ms polling, forty back to back, and 1.54 against 1.75 ms in the mean one
at a time. Until then a waiting rank here took no core from a rank with work on its core (it
polls and yields; the traces of short gradients that set it); two rounds of 4 emulated hosts
simulated both ways had the compute's median |error| 11.7 and 21.0 % that way, 8.0 and 11.2 %
this way (the synchronous, stale-synchronous and gossiping ranks' from −21, −26 and −10 % to
−4, −8 and +2 % in the first; the ring's +6 → +21 % in the second). Traced here
(`twinsgd.analysis.schedtrace` through `real.cluster`, 2026-12-01): the ring allreduce of 4
emulated hosts over 1 Gbit/s, cores never idle, 78 % of their time held by ranks not computing
in stretches of 2-15 us; the ranks' gradients began in two pairs 1.7-2.4 ms apart (the median
iteration; 0 and 2 first, or 1 and 3), each pair's gradient about as long as one alone: the
ranks of one core, then the other's. The model before had all four begin within 0.12 ms and two
of them wait a turn. Against the 8 configurations at 4 hosts on 2 cores (1 Gbit/s, one round's
measurements simulated twice by each model), the compute's median |error| 16 and 19 % (the
allreduces -2 to -8 %), where the round-robin turns that let a message put its rank on a core
at once (``wakes_preempt``, fitted and unexplained, the model before) gave 23 and 26 % (+20 to
+31 %), the totals' median 7.6 and 9.1 % against 6.5 and 10.7 % (docs/validation.md,
2026-12-01, night); the pooled fair share of shared memory made the allreduces' communication
35-50 % too slow (a message waited for a turn). Which ranks share a core is Linux's choice and
changes now and then (the trace: 0.1-0.5 s at a time); the blocks are a fixed guess.

Where every rank waits in a call (OSU's loop of collectives, a collective's steps), the
ranks past the cores still poll, and a message is seen only in its receiver's turn among them:
``[cluster] poll_wait_s`` more for each rank past the cores that wants one (`Pollers`),
measured by `real.calibrate` as a pair's one-way time with the others polling less with them
asleep. Without it, 2 emulated hosts of 2 ranks had MPICH's allreduce of 4 B-32 KiB 40-70 %
faster than `real.osu` measured it (2026-12-02).

Over TCP the kernel moves the bytes on the machines' CPUs (the copies into and out of the
sockets, TCP's segments and acknowledgements, the virtual links' softirqs), and that time is
taken from whatever computes on those cores (`StackCpu`): while bytes move, a compute on the
sender's core (its rank's queue) progresses at ``1 - send_s x (bytes sent a second)`` and on
the receiver's at ``1 - recv_s x (bytes received a second)``, the rates the token buckets give
the flows at each moment (`sim.fairshare.FluidStar`). ``send_s`` and ``recv_s`` are measured by
`real.stack_cpu` (``[network.stack]``): the compute a process pinned to each core loses while
two ranks pinned to two of them move bytes, the sender's core's loss and the others'. A
synchronous server's replies to its other workers so slow the gradient of a worker that has
its reply.

Examples
--------
Three ranks of 6 ms of work each on two cores. Ranks 0 and 1 start; their turns end on the 4
ms tick, and rank 2, in line, takes one core; rank 0, 4/3 ms ahead of the mean, takes the other
(no rank polls: nobody else would run there) and ends at 6 ms; rank 1 is eligible once rank 0,
done and polling, has caught up, at 6 ms, and ends at 8; rank 2 runs to the 8 ms tick, is
eligible and ends at 10 ms (18 ms of work on 2 cores: 9 ms at best):

>>> import simpy
>>> env = simpy.Environment()
>>> cores = HostCores(env, cores=2, slice_s=0.004)
>>> done = {}
>>> def rank(r):
...     yield from cores.acquire(r)
...     yield from cores.run(r, 0.006)
...     cores.release(r)
...     done[r] = round(env.now, 6)
>>> for r in range(3):
...     _ = env.process(rank(r))
>>> env.run()
>>> done
{0: 0.006, 1: 0.008, 2: 0.01}
"""

import math
from collections import deque

DEFAULT_SLICE_S = 0.004  # a turn on a core: the 250 Hz tick, measured here (profiles may say)
BASE_SLICE_S = 0.00075  # EEVDF's request of a task, Linux's default ``base_slice`` (6.6 on)
_EPS_S = 1e-12  # eligible within this (float sums of seconds)


def eevdf_slice(cores):
    """Seconds of a task's slice under Linux's EEVDF on ``cores`` cores: ``base_slice`` times
    ``1 + log2(min(cores, 8))`` (``sched_tunable_scaling`` logarithmic, the default), 1.5 ms
    on 2 cores, 3 ms on 8 or more."""
    return BASE_SLICE_S * (1 + int(math.log2(min(cores, 8))))


def _fill_level(runtimes, most, amount):
    """The level to which ``amount`` seconds raise ``runtimes`` from the lowest up, each by
    ``most`` at most (``amount`` <= len * most).

    >>> _fill_level([0.0, 1.0, 5.0], 2.0, 3.0)  # 0 -> 2 (its most), 1 -> 2: 3 s in all
    2.0
    """

    # what is poured grows linearly between the points where a runtime starts or stops rising
    points = sorted([(v, 1) for v in runtimes] + [(v + most, -1) for v in runtimes])
    poured, rising, level = 0.0, 0, points[0][0]
    for point, change in points:
        more = rising * (point - level)
        if rising and poured + more >= amount:
            return level + (amount - poured) / rising
        poured, level, rising = poured + more, point, rising + change
    return level


class Fairness:
    """Each rank's virtual runtime ``v`` on a host whose ranks all stay runnable: EEVDF's
    fair share, as a rank that waits in MPI polls and so keeps asking for a core.

    A rank on a core gains its seconds there; a core that no rank works on runs the ranks that
    poll, lowest ``v`` first (the kernel runs the eligible task of earliest deadline and a
    polling rank yields to the next: filling from the bottom). A rank is eligible for a core
    while its ``v`` is at most ``V``, the mean of all; one past it waits until the others catch
    up, ``V`` moving at cores / ranks a second while every core runs someone."""

    def __init__(self, env):
        self.env, self.v, self.since = env, {}, env.now  # since: the runtimes are as of then

    def join(self, rank):
        """A rank that starts (at the mean, as Linux places a new task)."""
        self.v[rank] = self.mean() if self.v else 0.0

    def leave(self, rank):
        """A rank whose program ended: it asks for no core any more."""
        self.v.pop(rank, None)

    def mean(self):
        return sum(self.v.values()) / len(self.v)

    def advance(self, holding, polling, cores):
        """Bring every ``v`` to now: each rank of ``holding`` held a core since the last call,
        and the cores they left ran the ranks of ``polling``, filled from the lowest ``v``."""
        now, v = self.env.now, self.v
        spent, self.since = now - self.since, now
        if spent <= 0:
            return
        for rank in holding:
            v[rank] += spent
        spare = min(cores - len(holding), len(polling)) * spent  # one core a rank at most
        if spare <= 0:
            return
        level = _fill_level([v[rank] for rank in polling], spent, spare)
        for rank in polling:
            v[rank] = min(max(v[rank], level), v[rank] + spent)

    def behind_s(self, rank, cores):
        """Seconds until ``rank`` is eligible (<= 0: now), the cores all busy meanwhile."""
        return (self.v[rank] - self.mean()) * len(self.v) / cores


class HostCores:
    """The ``cores`` cores of one host, shared by its ranks in turns that end on ticks of
    ``slice_s`` seconds, each rank getting its fair share (`Fairness`; the module's notes).
    (Plain turns among the ranks with work, a waiting rank taking no core, were the model of
    ranks over TCP until 2026-12-03.)

    A rank calls `acquire` before it runs (it may wait its turn, and to be eligible), `run` for
    seconds of work (preempted at the end of each turn), `release` when it blocks and `leave`
    when its program ends. ``eevdf_slice_s``: a rank's slice, by default Linux's for
    ``cores`` (`eevdf_slice`). ``switch_s``: what a rank's next `run` takes more when it is
    back on a core after other ranks were granted one since it left its own (its caches
    refilled; the module's notes).
    """

    def __init__(
        self,
        env,
        cores,
        slice_s=DEFAULT_SLICE_S,
        switch_s=0.0,
        eevdf_slice_s=None,
    ):
        eevdf_slice_s = eevdf_slice(cores) if eevdf_slice_s is None else eevdf_slice_s
        if cores < 1 or not slice_s > 0 or switch_s < 0 or not eevdf_slice_s > 0:
            raise ValueError(
                f"need cores >= 1, a tick > 0 s, a switch >= 0 s and a slice > 0 s, got "
                f"{cores}, {slice_s}, {switch_s} and {eevdf_slice_s}"
            )
        self.env, self.cores, self.free, self.slice_s = env, cores, cores, slice_s
        self.switch_s, self.eevdf_slice_s = switch_s, eevdf_slice_s
        self.fair = Fairness(env)
        self._queued = set()  # the ranks in ``ready``
        self._ineligible = {}  # rank waiting to be eligible -> the events that let it go early
        self._preempted = set()  # ranks whose next grant starts a whole slice
        self._granted = 0  # cores granted so far, to tell whether others ran since a rank left
        self._left_at = {}  # rank off its core -> ``_granted`` when it gave it up
        self._cold = set()  # ranks back on a core after others ran: their next work refills
        self.ready = deque()  # (rank, event) of the ranks waiting for a core, first come first
        self.turn_ends = {}  # rank -> when its turn on the core it holds ends
        self.stack = None  # the kernel's work for the hosts' messages on these cores, or None

    def holds(self, rank):
        """Whether ``rank`` is on a core now."""
        return rank in self.turn_ends

    def acquire(self, rank):
        """Process step: wait for a core for ``rank`` (behind the ranks already waiting, and
        in the fair share until it is eligible), then it holds the core for a turn (a rank on
        a core already keeps its own)."""
        if rank in self.turn_ends:
            return
        self._join(rank)
        yield from self._until_eligible(rank)
        if rank in self.turn_ends:  # given a core meanwhile
            return
        if not self.ready and self.free:
            self._grant(rank)
            return
        turn = self.env.event()
        self._account()
        self._queued.add(rank)
        self.ready.append((rank, turn))
        try:
            yield turn
        except BaseException:  # interrupted (a fault): leave the queue or give the core back
            if turn.triggered:
                self.release(rank)
            else:
                self._account()
                self._queued.discard(rank)
                self.ready.remove((rank, turn))
            raise

    def _account(self):
        """Bring the fair share's runtimes to now, before who holds a core or polls changes
        (nothing to do, nor any set to make, if they are as of now already)."""
        if self.env.now > self.fair.since:
            self.fair.advance(self.turn_ends, self._polling(), self.cores)

    def _join(self, rank):
        """``rank`` starts sharing the cores fairly, if it has not yet."""
        if rank not in self.fair.v:
            self._account()
            self.fair.join(rank)

    def until_eligible(self, rank):
        """Process step: wait until ``rank``, off its core, is eligible for one (now if it
        holds one)."""
        self._join(rank)
        yield from self._until_eligible(rank)

    def _until_eligible(self, rank):
        """Process step: wait until ``rank`` (off its core) is eligible for one: until
        the others have caught up with its runtime, or a core is free that no rank polling
        would take (`_offer`)."""
        while len(self.fair.v) > self.cores and rank not in self.turn_ends:
            self._account()
            wait = self.fair.behind_s(rank, self.cores)
            if wait <= max(_EPS_S, 16 * math.ulp(self.env.now)):  # (a wait the clock cannot
                return  # take, late in a long run, would come back unchanged: forever)
            told = self.env.event()  # True: a core is its (`_offer`); False: look again
            # (a receiver may wait in its own acquire and in a sender's copy at once)
            self._ineligible.setdefault(rank, []).append(told)
            self._offer()  # a core no one else would run
            try:
                yield self.env.timeout(wait) | told
            finally:
                self._account()
                events = self._ineligible[rank]
                events.remove(told)
                if not events:
                    del self._ineligible[rank]
            if told.triggered and told.value:
                return

    def _tell(self, rank, value):
        """Wake ``rank``'s waits to be eligible: with a core (True) or to look again."""
        for told in self._ineligible.get(rank, ()):
            if not told.triggered:
                told.succeed(value)

    def _offer(self):
        """Free cores that no request in line takes go to the ranks waiting to be eligible,
        lowest runtime first: to one eligible now (ahead of a rank whose turn just ended), or
        to the lowest if no rank polls (nobody else would run there)."""
        while self.free and not self.ready:
            waiting = [rank for rank in self._ineligible if rank not in self.turn_ends]
            if not waiting:
                return
            self._account()
            lowest = min(waiting, key=self.fair.v.__getitem__)
            if self.fair.behind_s(lowest, self.cores) > _EPS_S and self._polling():
                return  # a polling rank runs on it
            self._grant(lowest)  # (which tells it)

    def _polling(self):
        """The ranks that wait for a message, polling: on no core, in no line."""
        return self.fair.v.keys() - self.turn_ends.keys() - self._queued - self._ineligible.keys()

    def leave(self, rank):
        """``rank``'s program ended (it holds no core): it asks for none any more."""
        if rank in self.fair.v:
            self._account()
            self.fair.leave(rank)
            for waiting in list(self._ineligible):  # fewer ranks share: a new mean
                self._tell(waiting, False)

    def _grant(self, rank):
        """``rank`` takes a free core for a turn."""
        self._account()
        self._queued.discard(rank)
        self.free -= 1
        self.turn_ends[rank] = self._turn_end(rank)
        self._tell(rank, True)  # (waiting to be eligible, given a core by `_offer`)
        if self._left_at.pop(rank, self._granted) < self._granted:
            self._cold.add(rank)  # another rank had a core meanwhile: its caches are gone
        self._granted += 1

    def _turn_end(self, rank):
        """When the turn of ``rank``, granted a core now, ends: the first tick (a multiple of
        ``slice_s``) after its EEVDF slice: a whole one back from a preemption, else half (its
        core came to it while it polled, part of the slice gone: the mean)."""
        now = self.env.now
        whole = rank in self._preempted
        self._preempted.discard(rank)
        end = now + (self.eevdf_slice_s if whole else self.eevdf_slice_s / 2)
        return math.ceil(end / self.slice_s - 1e-9) * self.slice_s

    def release(self, rank):
        """``rank`` gives its core up (it blocks, or its program ended)."""
        if rank in self.turn_ends:
            self._account()
            del self.turn_ends[rank]
            self._left_at[rank] = self._granted
            self.free += 1
            self._hand_on()
            self._offer()

    def _refill(self, rank, left, work, paid):
        """``left`` seconds of ``rank``'s `run` of ``work`` seconds (warm) as they are when it is
        (back) on a core, and whether the run has paid its refill: if other ranks ran there
        since it left (its caches refilled by them), the work left runs ``1 + switch_s / work``
        times slower: ``switch_s`` more at the run's start, its share ``switch_s * left / work``
        after a turn lost in the middle, once a run (the rate holds for the rest of it).

        Why a rate, not ``switch_s`` again each cold turn: a refill as long as a turn took the
        whole turn and the work never ended (3 ranks on 2 cores, 1.5 ms refills on 1 ms turns:
        the simulator ran on forever, 2026-12-01; a noisy calibration can measure such a
        refill); and a turn refills what the work done in it touches, a share of the whole."""
        if rank not in self._cold:
            return left, paid
        self._cold.discard(rank)
        if paid or not self.switch_s:
            return left, paid
        if left >= work:  # at the start: all of it
            return left + self.switch_s, True
        return left + self.switch_s * left / work, True

    def run(self, rank, seconds):
        """Process step: ``seconds`` of work by ``rank``, which holds a core; at the end of each
        of its turns it goes behind the ranks waiting for one, if any. With a `StackCpu` the
        kernel's work for the bytes moving meanwhile is done first: the work ends that much
        later."""
        env, work, stack = self.env, seconds, self.stack
        seconds, paid = self._refill(rank, seconds, work, False)
        while True:
            left = self.turn_ends[rank] - env.now
            if stack is not None:  # the kernel's work for the bytes moving takes its share
                t0, (busy, load) = env.now, stack.state()
                wall = min(left, seconds / (1.0 - min(load, 0.99)))
                if wall > 0:  # until done at this load, or the load changes
                    yield env.timeout(wall) | stack.fluid.changed()
                    seconds -= env.now - t0 - (stack.state()[0] - busy)
                if seconds <= _EPS_S:
                    return
                if env.now < self.turn_ends[rank]:
                    continue
            elif seconds <= left:
                if seconds > 0:
                    yield env.timeout(seconds)
                return
            elif left > 0:
                yield env.timeout(left)
                seconds -= left
            if not self._others_wait():  # on it goes
                self.turn_ends[rank] = self._turn_end(rank)
                continue
            self.release(rank)  # its turn is over
            self._preempted.add(rank)
            yield from self.acquire(rank)  # (once eligible again, in the fair share)
            seconds, paid = self._refill(rank, seconds, work, paid)

    def _others_wait(self):
        """Whether a rank that ends its turn gives its core up: while more ranks share the
        cores than there are (they are all runnable, polling or not)."""
        return len(self.fair.v) > self.cores

    def _hand_on(self):
        """Give free cores to the ranks first in line."""
        while self.ready and self.free:
            rank, turn = self.ready.popleft()
            self._grant(rank)
            turn.succeed()


class Pollers:
    """Over TCP, the ranks of one machine's cores that wait in a call: they poll and yield
    (`sim.cores`), and a message that lands for one of them is seen in its turn among them.

    Measured through `real.cluster` (2026-12-02, AMD EPYC, 2 cores): ranks 0 and 2 of 4 (two
    emulated 1 Gbit/s hosts of 2) took 17-21 us one way for 4 B and 4 KiB while ranks 1 and 3
    slept, and 47-84 us while they waited in MPICH's ``Recv``; OSU's 4-rank allreduce of 16 B
    took 175-340 us where its steps priced as measured with the others asleep made 46-126
    (docs/osu.md). So a rank that polls
    sees what came for it ``poll_wait_s`` later for each rank past the cores that wants one:
    ``count`` polling (itself among them) plus those holding a core (computing), less
    ``cores``; none while they fit (a pair alone on 2 cores, as the calibration's patterns
    are measured). ``poll_wait_s`` is `real.calibrate`'s (``[cluster] poll_wait_s``): the
    one-way time of that pair with the others polling less with them asleep, over the ranks
    then past the cores.
    """

    def __init__(self, cores, queues, poll_wait_s):
        self.cores, self.queues, self.poll_wait_s = cores, tuple(queues), poll_wait_s
        self.count = 0  # ranks in a call now

    def seen_after_s(self):
        """Seconds until a polling rank sees what has just come for it."""
        holding = sum(len(queue.turn_ends) for queue in self.queues)
        past = self.count + holding - self.cores
        return past * self.poll_wait_s if past > 0 else 0.0


def pollers(by_rank, groups, poll_wait_s):
    """Per rank of ``groups`` (`shared_cores`'s ``(ranks, cores)``; ``by_rank``: its result),
    the `Pollers` of its group's cores; empty without a ``poll_wait_s``."""
    if not poll_wait_s:
        return {}
    found = {}
    for ranks, cores in groups:
        queues = {id(by_rank[r]): by_rank[r] for r in ranks}.values()
        found.update(dict.fromkeys(ranks, Pollers(cores, queues, poll_wait_s)))
    return found


class StackCpu:
    """The kernel's CPU work for the messages of some hosts, done on one core: TCP's copies,
    its segments and acknowledgements, the virtual links' softirqs, ``send_s`` seconds a byte
    sent and ``recv_s`` a byte received (``[network.stack]``, measured by `real.stack_cpu`).
    One core's run queue has it (`shared_cores` with ``pinned``). ``hosts``: (host, share)
    pairs, the hosts whose work this core does and the share of it (a host of ranks on
    several cores spreads it evenly). ``fluid``: the `sim.fairshare.FluidStar` whose flows
    move the bytes, in its bucket bytes (frames: within a few per cent of the payload)."""

    def __init__(self, fluid, hosts, send_s, recv_s):
        self.fluid, self.hosts, self.send_s, self.recv_s = fluid, tuple(hosts), send_s, recv_s

    def state(self):
        """(Seconds of kernel work this core has done so far, the share of the core it takes
        now: 0 with no bytes moving.)"""
        busy = load = 0.0
        for host, share in self.hosts:
            sent, received, out, into = self.fluid.moved(host)
            busy += share * (self.send_s * sent + self.recv_s * received)
            load += share * (self.send_s * out + self.recv_s * into)
        return busy, load


def attach_stack(cores, host_of, fluid, send_s, recv_s):
    """Give each of ``cores``' run queues (rank -> `HostCores`, from `shared_cores`) the
    kernel's work (`StackCpu`) for the hosts of its ranks (``host_of[rank]``: the host number
    ``fluid``'s flows go between)."""
    queues_of = {}  # host -> its ranks' queues (a dict as an ordered set)
    for rank, queue in cores.items():
        queues_of.setdefault(host_of[rank], {})[queue] = None
    hosts_of = {}  # queue -> (host, share) of the hosts whose work it does
    for host, queues in queues_of.items():
        for queue in queues:
            hosts_of.setdefault(queue, []).append((host, 1.0 / len(queues)))
    for queue, hosts in hosts_of.items():
        queue.stack = StackCpu(fluid, hosts, send_s, recv_s)


def shared_cores(env, groups, slice_s, pinned=False, switch_s=0.0, eevdf_slice_s=None):
    """Per rank, the `HostCores` it shares (None for a rank with a core of its own), from
    ``groups``: ``(ranks, cores)`` pairs, the ranks of one host and its cores, for hosts with
    more ranks than cores. ``pinned``: each core is a run queue of its own, shared fairly by a
    block of the host's ranks (ranks over TCP; the module's notes); else the host's cores are
    shared fairly by all its ranks."""
    by_rank = {}
    for ranks, cores in groups:
        slice_of_task = eevdf_slice(cores) if eevdf_slice_s is None else eevdf_slice_s
        if not pinned:
            host = HostCores(env, cores, slice_s, switch_s, slice_of_task)
            by_rank.update(dict.fromkeys(ranks, host))
            continue
        ranks = list(ranks)
        for core in range(cores):
            queue = HostCores(env, 1, slice_s, switch_s, slice_of_task)
            block = ranks[core * len(ranks) // cores : (core + 1) * len(ranks) // cores]
            by_rank.update(dict.fromkeys(block, queue))
    return by_rank
