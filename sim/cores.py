"""A host's cores shared among more ranks than it has: round-robin turns, as Linux's fair scheduler
gives them here.

Measured on this machine (kernel 6.18, EEVDF, 2 cores): R processes that never block take turns
of 4 ms (the 250 Hz tick); each is off for ``(R / C - 1)`` turns between its own (3 spinners on
2 cores: 4 ms on, 4 ms off, 63 % of the time on; 8 spinners: 4 ms on, 12 ms off). A rank that
waits in MPICH's blocking calls polls and yields, so it takes its core only while there is no one
else to run: between two ranks ping-ponging, two more waiting in ``Recv`` left the round trip at
13 us. So the model: a rank holds a core while it computes, runs its own code or moves bytes;
it gives the core up while it waits for a message that has not arrived, and needs one again to
go on once it has; a rank whose turn ends while others wait for a core goes behind them. A
message to a rank that is not on a core therefore waits until its turn comes, up to
``(R / C - 1)`` turns: on fast links that, not the wire, is the time.

A rank back on a core after other ranks ran there finds its caches refilled by them: its next
work takes ``switch_s`` more (measured per model by `real.calibrate.measure_switch_s`: two
processes on one core taking turns, each turn a gradient after the other's and then the same
gradient warm; the MLP at batch 32, 0.29 ms warm, took 70-120 us more cold, 2026-11-27; the
CNN's steps of tens of ms vary more from turn to turn than any refill, which is therefore
taken as 0, 2026-12-01). The rule
here: a rank granted a core after it gave one up, with another rank granted a core meanwhile,
pays it on its next `run`; a rank that loses its core in the middle of its work and comes back
after others ran does the rest ``1 + switch_s / work`` times slower (`HostCores._refill`), at
most ``switch_s`` more a run. Without it, 4 ranks on 2 cores computed 10-23 % less than measured
in every configuration; with it, -12 to +7 % (docs/validation.md).

Not modelled: how a waiting rank shares a core with one that computes depends on where Linux
puts them. Pinned to one core beside a computing process (2026-11-27), a rank waiting in
MPICH's ``Recv`` or in `real.backend.probe` took half the core (a CNN step 61 -> 133 ms, the
MLP's 2.1 -> 3.5 ms), as an earlier machine of this kind showed (a 13.4 ms kernel 24.1 ms),
while a Python process polling and yielding took 1-3 %. Unpinned, as runs are, three
processes on the 2 cores (a parameter server and two workers of 60 ms CNN steps) ran as this
model says: synchronous 86.5 ms a step measured, 85.4 simulated; asynchronous 4.25 s against
4.47 on the server's clock. Waiting ranks taking turns against work longer than a turn (the
pinned picture) made the same runs 1.75-2.1x too slow, and waiting ranks that keep their
cores to their turn's end and hand them at once to a waiting rank whose message came made
the shared-memory servers of 4 ranks 35-37 % too fast; neither is kept. Nor is MPICH's
``Probe`` modelled, which polls without yielding: a rank in it keeps its core for its whole
turn, which is why ``real.backend`` waits in a yielding loop instead (`real.backend.probe`);
measured with ``Probe``, 4 ranks on 2 cores had come out 12-57 % fast, the parameter servers
most.

Ranks that talk over TCP (an emulated cluster: MPICH's sockets) spin while they wait as well
(what follows was fitted to measurements taken while ``real.backend`` waited in ``Probe``; taken
without it, on 2026-11-27, 4 hosts came to 11.0 % with ``wakes_preempt`` and 13.8 % without):
a 2 s receive took 2 s of CPU (half of it in the kernel, no voluntary switch), on the emulated
cluster as on shared memory (2026-11-27). Yet there the measured runs go as if a rank whose
message has come is put on a core at once, ahead of the ranks that compute (``wakes_preempt``:
it takes the core of the rank furthest into its turn, which goes first in line for the next),
and as if a rank held no core while the kernel moves its bytes. Why is not established (TCP's
interrupts, the qdisc's timers and the kernel's share of the sends are candidates); it is kept
because it reproduces the measurements best. Four hosts on 2 cores (8 configurations, one
run's measurements simulated again): a message waiting out a computing rank's turn made
them 48-55 % too slow; compute slowed by the cores' share, every rank at half speed at once
where the measured ranks take turns of whole steps, gave a median |error| of 16.1 % (their
wait at the next barrier 0.9 ms a step measured, 0.16 simulated); this, 11.3 %.

Examples
--------
Three ranks of 6 ms of work each on two cores. Ranks 0 and 1 start; at 4 ms their turns end
and rank 2 takes one core, rank 0 (first in line again) the other and ends at 6 ms; rank 1 gets
that core and ends at 8; rank 2 runs on into a second turn, as no one waits, and ends at 10 ms
(18 ms of work on 2 cores: 9 ms at best):

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

from collections import deque

DEFAULT_SLICE_S = 0.004  # a turn on a core: the 250 Hz tick, measured here (profiles may say)


class HostCores:
    """The ``cores`` cores of one host, shared by its ranks in turns of ``slice_s`` seconds.

    A rank calls `acquire` before it runs (it may wait its turn), `run` for seconds of work
    (preempted at the end of each turn while others wait), and `release` when it blocks.
    ``wakes_preempt``: a rank back from a wait (``acquire(rank, wake=True)``: its message has
    come) takes a core from a rank in `run` if none is free (the module's notes).
    ``switch_s``: what a rank's next `run` takes more when it is back on a core after other
    ranks were granted one since it left its own (its caches refilled; the module's notes).
    """

    def __init__(self, env, cores, slice_s=DEFAULT_SLICE_S, wakes_preempt=False, switch_s=0.0):
        if cores < 1 or not slice_s > 0 or switch_s < 0:
            raise ValueError(
                f"need cores >= 1, a turn > 0 s and a switch >= 0 s, got {cores}, {slice_s} "
                f"and {switch_s}"
            )
        self.env, self.cores, self.free, self.slice_s = env, cores, cores, slice_s
        self.wakes_preempt, self.switch_s = wakes_preempt, switch_s
        self._granted = 0  # cores granted so far, to tell whether others ran since a rank left
        self._left_at = {}  # rank off its core -> ``_granted`` when it gave it up
        self._cold = set()  # ranks back on a core after others ran: their next work refills
        self.ready = deque()  # (ranks, event) of the requests waiting, first come first
        self.turn_ends = {}  # rank -> when its turn on the core it holds ends
        self._working = {}  # rank in `run` -> the event that preempts it (wakes_preempt)

    def holds(self, rank):
        """Whether ``rank`` is on a core now."""
        return rank in self.turn_ends

    def acquire(self, *ranks, wake=False, first=False):
        """Process step: wait for a core for each of ``ranks`` that has none, all at once
        (behind the requests already waiting), then each holds its core for a turn; returns
        the ranks it put on a core. Two ranks: a copy through shared memory, which moves only
        while sender and receiver are both on a core. ``wake``: one rank whose message came,
        which with ``wakes_preempt`` takes the core of a rank in `run` if none is free, else
        goes first in line (as does a rank with ``first``: one that was preempted)."""
        if len(ranks) > self.cores:
            raise ValueError(f"{len(ranks)} ranks cannot run at once on {self.cores} cores")
        if not self.ready and self._fits(ranks):
            return self._grant(ranks)
        wake = wake and self.wakes_preempt
        if wake and (self._fits(ranks) or self._working):  # ahead of the line
            if not self._fits(ranks):
                self._preempt()
            return self._grant(ranks)
        turn = self.env.event()
        if wake or first:
            self.ready.appendleft((ranks, turn))
        else:
            self.ready.append((ranks, turn))
        try:
            return (yield turn)
        except BaseException:  # interrupted (a fault): leave the queue or give the cores back
            if turn.triggered:
                for rank in turn.value:
                    self.release(rank)
            else:
                self.ready.remove((ranks, turn))
            raise

    def _preempt(self):
        """Take the core of the rank in `run` furthest into its turn (its core is free now)."""
        rank = min(self._working, key=self.turn_ends.__getitem__)
        self._working.pop(rank).succeed()
        del self.turn_ends[rank]
        self._left_at[rank] = self._granted
        self.free += 1

    def _fits(self, ranks):
        return sum(rank not in self.turn_ends for rank in ranks) <= self.free

    def _grant(self, ranks):
        granted = tuple(rank for rank in ranks if rank not in self.turn_ends)
        self.free -= len(granted)
        for rank in granted:
            self.turn_ends[rank] = self.env.now + self.slice_s
            if self._left_at.pop(rank, self._granted) < self._granted:
                self._cold.add(rank)  # another rank had a core meanwhile: its caches are gone
            self._granted += 1
        return granted

    def release(self, rank):
        """``rank`` gives its core up (it blocks, or its program ended)."""
        if self.turn_ends.pop(rank, None) is not None:
            self._left_at[rank] = self._granted
            self.free += 1
            self._hand_on()

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
        of its turns it goes behind the ranks waiting for one, if any."""
        env, work = self.env, seconds
        seconds, paid = self._refill(rank, seconds, work, False)
        if self.wakes_preempt:
            return (yield from self._run_preemptible(rank, seconds, work, paid))
        while True:
            left = self.turn_ends[rank] - env.now
            if seconds <= left:
                if seconds > 0:
                    yield env.timeout(seconds)
                return
            if left > 0:
                yield env.timeout(left)
                seconds -= left
            if self.ready:
                self.release(rank)
                yield from self.acquire(rank)
                seconds, paid = self._refill(rank, seconds, work, paid)
            else:
                self.turn_ends[rank] = env.now + self.slice_s

    def _run_preemptible(self, rank, seconds, work, paid):
        """`run` where a rank back from a wait may take the core (``wakes_preempt``): the work
        stops there and goes on when the rank is back on a core, first in line."""
        env = self.env
        while seconds > 0:
            step = min(seconds, self.turn_ends[rank] - env.now)
            if step > 0:
                t0, preempted = env.now, env.event()
                self._working[rank] = preempted
                try:
                    yield env.timeout(step) | preempted
                finally:
                    if self._working.get(rank) is preempted:
                        del self._working[rank]
                if preempted.triggered:  # its core taken (`_preempt`): the rest after
                    seconds -= env.now - t0
                    yield from self.acquire(rank, first=True)
                    seconds, paid = self._refill(rank, seconds, work, paid)
                    continue
                seconds -= step
            if seconds <= 0:
                return
            if self.ready:  # its turn is over and others wait
                self.release(rank)
                yield from self.acquire(rank)
                seconds, paid = self._refill(rank, seconds, work, paid)
            else:
                self.turn_ends[rank] = env.now + self.slice_s

    def _hand_on(self):
        """Give free cores to the requests first in line, as long as the first one's fit."""
        while self.ready and self._fits(self.ready[0][0]):
            ranks, turn = self.ready.popleft()
            turn.succeed(self._grant(ranks))


def shared_cores(env, groups, slice_s, wakes_preempt=False, switch_s=0.0):
    """Per rank, the `HostCores` it shares (None for a rank with a core of its own), from
    ``groups``: ``(ranks, cores)`` pairs, the ranks of one host and its cores, for hosts with
    more ranks than cores."""
    by_rank = {}
    for ranks, cores in groups:
        host = HostCores(env, cores, slice_s, wakes_preempt, switch_s)
        by_rank.update(dict.fromkeys(ranks, host))
    return by_rank
