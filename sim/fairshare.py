"""Messages as fluid flows sharing token-bucket NICs max-min fairly: TCP's sharing, simulated.

Theory of operation: every message in flight is a flow from its sender's bucket out to its
receiver's bucket in (`sim.shaping.TokenBucket`: the emulated cluster's tbf). A flow moves at
most at its own line rate (`Shaping.payload_Bps`: the line's, or a message within a burst its
size's); a bucket passes bytes at the fastest of its flows' line rates while it holds tokens and
at its shaped rate once they are gone; the flows through it share what it passes, max-min
fairly (progressive filling, as SimGrid's flow model does): every flow grows at the same pace
until a bucket it crosses, or its own line rate, is full, then stays.
Between two events the rates are constant, so one process (`FluidStar._run`) computes them,
sleeps until the next event -- a flow done, a bucket out of tokens, a new flow -- and moves
every flow's bytes and every bucket's tokens forward by what passed.

Why: FIFO links get the last arrival of N messages into one NIC right (alpha + N n / beta) but
not who finishes first. On the wire three replies from one server finish together and the
workers' next pushes overlap nothing; FIFO hands the first worker its reply at a third of the
time and lets its push overlap the rest (a parameter server at 4 hosts simulated 15-37 % too
fast). And a gossip node's two exchanges run side by side on the wire, one after the other
behind a held NIC under FIFO (+51 %).

A flow that finds its sender's NIC idle goes first (`Shaping.head_start_bytes`): for its first
bytes it takes whatever its buckets pass, and flows that start behind it on that NIC take only
what it leaves (its window of bytes is queued ahead of theirs in the NIC's FIFO), then all share
max-min fairly. Those flows begin to move, and their receivers see their messages, only then.
Why: TCP over tbf does not share a fan-out as equals. A server's blocking Sends of 670 KB to
three emulated 1 Gbit/s hosts (each into the kernel in 0.2 ms) reached their receivers
complete at 8.9, 15.3 and 15.9 ms (medians of 25), the second and third first seen 3.4 and 4.6
ms after the first: about 600 KB of the first flow, the 125 KB burst included, went ahead;
under max-min fairness all three end together at 16 ms, and a synchronous server's workers at
4 hosts were simulated +14 % slow in total, their communication +46 % (2026-12-05,
docs/validation.md).

Units: bucket bytes (frames) for tokens and rates; a flow of n payload bytes of a pattern with
efficiency e carries ``n / e`` bucket bytes.
"""

import math

from simpy.events import Event

_DONE = 1e-9  # a flow with this many bucket bytes left (relative to its size) has finished


class _Flow:
    __slots__ = ("began", "buckets", "cap", "done", "ends", "head", "rate", "remaining", "size")

    def __init__(self, buckets, size, done, cap, ends, head):
        self.buckets, self.size, self.remaining, self.done = buckets, size, size, done
        self.ends = ends  # (source host, dest host)
        self.cap = cap  # its own line rate, bucket bytes a second
        self.rate = 0.0
        self.head = head  # still going first out of its sender's NIC (`FluidStar`)
        self.began = None  # when it first moved (s)


class FluidStar:
    """Concurrent messages over token-bucket NICs, sharing them max-min fairly.

    Parameters
    ----------
    env : simpy.Environment
    shaping : sim.shaping.Shaping
        Each rank's NIC (both directions alike) and the cost of each message pattern.

    Examples
    --------
    >>> import simpy
    >>> from sim.shaping import ShapedPattern, Shaping
    >>> env = simpy.Environment()
    >>> plain = ShapedPattern(alpha_s=0.0, efficiency=1.0)
    >>> star = FluidStar(env, Shaping(((100.0, 1e-9),), 100.0, {"oneway": plain}))
    >>> ends = [star.transfer(s, 0, 100.0, "oneway") for s in (1, 2)]  # two into one
    >>> began = env.run(until=ends[0])  # side by side at 50 B/s each: both done at 2 s
    >>> env.now, began, ends[1].value  # both began to move at once, at 0 s
    (2.0, 0, 0)
    """

    def __init__(self, env, shaping):
        self.env, self.shaping = env, shaping
        self._nics = {}  # rank -> (bucket out, bucket in)
        self._flows = []
        self._last = 0.0  # when the state was last moved forward
        self._wake = None  # the event the process sleeps on besides its timer
        # NOTE: a flow's line rate in bucket bytes by one pattern's efficiency (one-way's,
        # listed first), so that messages of one size have one line rate whatever their
        # pattern (the efficiencies differ < 1 %)
        self._first = next(iter(shaping.patterns.values()))
        self._caps = {}  # nbytes -> a flow's own line rate, bucket bytes a second
        self._changed = None  # the event of who waits for the rates to change (`changed`)
        self._leading = []  # the flows going first with flows behind them (`_share`)
        self.sent = {}  # host -> bucket bytes it has sent up to ``_last`` (`moved`)
        self.received = {}  # host -> bucket bytes it has received up to ``_last``
        env.process(self._run())

    def changed(self):
        """An event that succeeds when the flows' rates next change (a flow begins or ends, a
        bucket runs out of tokens)."""
        if self._changed is None:
            self._changed = Event(self.env)
        return self._changed

    def moved(self, host):
        """(sent, received, sending, receiving): the bucket bytes ``host`` has sent and
        received up to now, and the bucket bytes a second it sends and receives now (the
        rates hold until the next event, `changed`)."""
        elapsed = self.env.now - self._last
        out = into = 0.0
        for flow in self._flows:
            if flow.rate:
                if flow.ends[0] == host:
                    out += flow.rate
                if flow.ends[1] == host:
                    into += flow.rate
        sent = self.sent.get(host, 0.0) + out * elapsed
        return sent, self.received.get(host, 0.0) + into * elapsed, out, into

    def transfer(self, source, dest, nbytes, pattern):
        """An event that succeeds when ``nbytes`` of payload from rank ``source`` to rank
        ``dest`` have all passed both buckets, its value the time they began to move (later
        than now behind a flow that goes first)."""
        shaped = self.shaping.patterns[pattern]
        done = Event(self.env)
        self._advance()
        buckets = (self._nic(source)[0], self._nic(dest)[1])
        cap = self._caps.get(nbytes)
        if cap is None:
            cap = self._caps[nbytes] = self.shaping.payload_Bps(nbytes) / self._first.efficiency
        idle = self.shaping.head_start_bytes > 0 and all(
            flow.buckets[0] is not buckets[0] for flow in self._flows
        )
        flow = _Flow(buckets, nbytes / shaped.efficiency, done, cap, (source, dest), idle)
        self._flows.append(flow)
        self._poke()
        return done

    def _nic(self, rank):
        nic = self._nics.get(rank)
        if nic is None:
            nic = self._nics[rank] = (self.shaping.bucket(rank), self.shaping.bucket(rank))
        return nic

    def _poke(self):
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _run(self):
        """The process: rates, then sleep until the next event, then move the state on."""
        env = self.env
        while True:
            self._finish()
            if self._changed is not None:  # the rates change now
                changed, self._changed = self._changed, None
                changed.succeed()
            if not self._flows:
                self._wake = Event(env)
                yield self._wake
                continue
            self._share()
            self._wake = Event(env)
            yield env.any_of([self._wake, env.timeout(self._next_event_s())])
            self._advance()

    def _share(self):
        """Rates by progressive filling over the flows' two buckets and their own line rates,
        max-min fair, in two rounds: the flows behind one that goes first out of their NIC
        (`Shaping.head_start_bytes`) are filled second, from what the others leave. A bucket
        with tokens passes the fastest line rate of its flows, one without its shaped rate."""
        fastest = {}
        for flow in self._flows:
            for bucket in flow.buckets:
                if fastest.get(bucket, 0.0) < flow.cap:
                    fastest[bucket] = flow.cap
        head_start = self.shaping.head_start_bytes
        for flow in self._flows:  # a head that has moved its head start goes on as an equal
            if flow.head and flow.size - flow.remaining >= head_start * (1 - 1e-12):
                flow.head = False
        led = {id(flow.buckets[0]) for flow in self._flows if flow.head}
        first, behind = [], []  # filled in that order
        for flow in self._flows:
            (behind if not flow.head and id(flow.buckets[0]) in led else first).append(flow)
        ahead = {id(flow.buckets[0]) for flow in behind}
        self._leading = [f for f in first if f.head and id(f.buckets[0]) in ahead]
        left = {}  # constraint (a bucket's id, or a flow's) -> [capacity left, flows unfixed]
        for flow in self._flows:
            flow.rate = None
            left[id(flow)] = [flow.cap, 0]
            for bucket in flow.buckets:
                if id(bucket) not in left:
                    tokens = bucket.tokens > _DONE * bucket.burst_bytes
                    left[id(bucket)] = [fastest[bucket] if tokens else bucket.rate_Bps, 0]
        _fill(first, left)
        _fill(behind, left)
        now = self.env.now
        for flow in self._flows:
            if flow.began is None and flow.rate > 0:
                flow.began = now

    def _next_event_s(self):
        """Seconds to the next flow done or bucket emptied (the rates change then); at least
        two steps of the clock's float, so that the state moves: a bucket's last crumbs of
        tokens drained at a message's own rate within a burst (GB/s) would otherwise take
        less than the clock can add to its time (1e-15 s is nothing to a clock at 1,000 s),
        and the simulation would stand still."""
        soonest = min(flow.remaining / flow.rate for flow in self._flows if flow.rate > 0)
        head_start = self.shaping.head_start_bytes
        for flow in self._leading:  # its head start moved, the flows behind it share
            if flow.rate > 0:
                soonest = min(soonest, (head_start - (flow.size - flow.remaining)) / flow.rate)
        for bucket, through in self._through().items():
            drain = through - bucket.rate_Bps
            if bucket.tokens > _DONE * bucket.burst_bytes and drain > 0:
                soonest = min(soonest, bucket.tokens / drain)
        return max(soonest, 2 * math.ulp(self.env.now))

    def _through(self):
        """Bucket -> bucket bytes per second passing through it now."""
        through = {}
        for flow in self._flows:
            for bucket in flow.buckets:
                through[bucket] = through.get(bucket, 0.0) + flow.rate
        return through

    def _advance(self):
        """Move every flow and bucket forward to now at the current rates."""
        now = self.env.now
        elapsed, self._last = now - self._last, now
        if elapsed <= 0:
            return
        through = self._through()
        sent, received = self.sent, self.received
        for flow in self._flows:
            moved = flow.rate * elapsed
            flow.remaining -= moved
            source, dest = flow.ends
            sent[source] = sent.get(source, 0.0) + moved
            received[dest] = received.get(dest, 0.0) + moved
        for rank_nic in self._nics.values():
            for bucket in rank_nic:
                gained = (bucket.rate_Bps - through.get(bucket, 0.0)) * elapsed
                bucket.tokens = min(bucket.burst_bytes, max(0.0, bucket.tokens + gained))

    def _finish(self):
        """Hand the flows that have finished their end."""
        still = []
        for flow in self._flows:
            if flow.remaining <= _DONE * max(flow.size, 1.0):
                flow.done.succeed(self.env.now if flow.began is None else flow.began)
            else:
                still.append(flow)
        self._flows = still


def _fill(flows, left):
    """Progressive filling of ``flows`` (their rates None) over ``left``: constraint id ->
    [capacity left, flows unfixed], its counts 0 on entry and on return; each flow grows at
    the same pace until one of its constraints is full."""
    for flow in flows:
        for key in (id(flow), *map(id, flow.buckets)):
            left[key][1] += 1
    active = flows
    while active:
        share = max(0.0, min(cap / n for cap, n in left.values() if n))  # (crumbs below 0)
        tight = {key for key, (cap, n) in left.items() if n and cap / n <= share * (1 + 1e-12)}
        frozen = [f for f in active if id(f) in tight or any(id(b) in tight for b in f.buckets)]
        for flow in frozen:
            flow.rate = share
            for key in (id(flow), *map(id, flow.buckets)):
                entry = left[key]
                entry[0] -= share
                entry[1] -= 1
        active = [f for f in active if f.rate is None]
