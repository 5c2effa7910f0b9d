"""The program's own code on ranks of one machine at once: they slow each other.

Measured on this machine (AMD EPYC, 2 cores, 2026-12-03, medians of 60-80 interleaved
repetitions): two ranks leave a barrier and Adam's update of the MLP (167,560 weights) runs in
one of them, or in both. Between two emulated 1 Gbit/s hosts one alone took 265-309 us, both at
once 1.39-1.57x that (after nothing, a 670 KB `Sendrecv` or 2 ms of spinning; 1.25x after
2 ms asleep); through shared memory 1.04-1.24x. With the other rank spinning in Python or
polling in an MPI receive the update kept its speed alone; with the other copying 16 MB over
and over it took 1.4x: the two compete for the memory. Run back to back the slowdown fades
(ten updates: 1.25x first, 1.04x tenth), and 0.3 s windows of updates in two processes measured
0.90-0.99x: a training step's update mostly falls beside the other's gradient. A synchronous
program lines them up: every rank leaves the allreduce at once and updates. The simulator times
own code in its own process, alone, and the ring, MPI's allreduce and gossip at 2 emulated
hosts came out 14-18 % short of compute (docs/validation.md).

So a machine's ranks in their own code at once share it as processor sharing does: with k of
them in it, each progresses at ``1 / factor(k)`` of its speed alone, ``factor`` the update's
measured slowdown at k ranks that start it together (`real.netbench.update_at_once`, a
profile's ``[compute.busy_update.MODEL]``), recomputed whenever one starts or ends. A rank
computing a gradient or waiting in a call does not count. As on cores shared past their count
(`sim.backend._OwnCode`), a step that ends in the middle of own code ends where that code would
end alone; the longer it takes beside the others is charged, as compute, once it has passed.

Examples
--------
Two ranks start 1 ms of own code together, where two at once take 1.5x: both end at 1.5 ms.
A third starts 1 ms later alone and takes its 1 ms:

>>> import simpy
>>> env = simpy.Environment()
>>> share = MemoryShare(env, lambda k: 1.0 + 0.5 * (k - 1))
>>> ends = {}
>>> def own(rank, start, seconds):
...     yield env.timeout(start)
...     yield from share.run(rank, seconds)
...     ends[rank] = round(env.now * 1e3, 6)
>>> for rank, start in ((0, 0.0), (1, 0.0), (2, 2e-3)):
...     _ = env.process(own(rank, start, 1e-3))
>>> env.run()
>>> ends
{0: 1.5, 1: 1.5, 2: 3.0}
"""

from functools import partial

_EPS_S = 1e-12  # own code this close to done is done (float residue of the shares)


class MemoryShare:
    """The own code of the ranks of one machine, shared as their memory is: ``factor(k)``, the
    slowdown of each of k at once over one alone (1 at k = 1)."""

    def __init__(self, env, factor):
        self.env, self.factor = env, factor
        self._left = {}  # rank -> seconds of its own code left, as alone
        self._done = {}  # rank -> the event of its end
        self._since = 0.0  # when `_left` was last brought up to date
        self._plan = 0  # the number of the wake-up planned last (older ones are stale)

    def run(self, rank, seconds):
        """Process step: ``seconds`` (as alone) of ``rank``'s own code, beside the others'."""
        self._catch_up()
        self._left[rank] = seconds
        done = self._done[rank] = self.env.event()
        self._replan()
        try:
            yield done
        except BaseException:  # interrupted (a fault): its code leaves the others' share
            if rank in self._left:
                self._catch_up()
                del self._left[rank], self._done[rank]
                self._replan()
            raise

    def _catch_up(self):
        """Take off each running rank's progress since the last change."""
        now, running = self.env.now, len(self._left)
        if running and now > self._since:
            progress = (now - self._since) / self.factor(running)
            for rank in self._left:
                self._left[rank] -= progress
        self._since = now

    def _replan(self):
        """Wake up when the rank with the least left ends at the present share."""
        self._plan += 1
        if self._left:
            plan, least = self._plan, max(0.0, min(self._left.values()))
            wake = self.env.timeout(least * self.factor(len(self._left)))
            wake.callbacks.append(lambda _: self._wake(plan))

    def _wake(self, plan):
        if plan != self._plan:  # a start or an end since changed the shares
            return
        self._catch_up()
        for rank in [r for r, left in self._left.items() if left <= _EPS_S]:
            del self._left[rank]
            self._done.pop(rank).succeed()
        self._replan()


def slowdown(update, k):
    """Own code's slowdown at ``k`` ranks at once from the update's `BusyCores` ``update``: its
    mean factor at k over one alone, at least 1 (a measurement a little under it is noise)."""
    return max(1.0, update.mean_at(k) / update.mean_at(1))


def memory_shares(env, update, per_machine, nodes):
    """Per rank, the `MemoryShare` of its machine (consecutive blocks of ``per_machine`` ranks),
    or None for every rank where ``update`` (the `calibration.busycores.BusyCores` of the
    update at k ranks at once) is None or a machine holds one rank."""
    if update is None or per_machine <= 1:
        return [None] * nodes
    shares = [MemoryShare(env, partial(slowdown, update)) for _ in range(0, nodes, per_machine)]
    return [shares[rank // per_machine] for rank in range(nodes)]
