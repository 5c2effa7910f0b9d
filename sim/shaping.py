"""Token-bucket shaped NICs: the emulated cluster's links (``tc tbf``) as the simulator sees them.

Why a model of its own: a token bucket is not an alpha-beta link. After an idle spell its first
``burst`` bytes pass at the speed of the machine (a veth is a memory copy), the rest at the
shaped rate; back to back, every byte waits for its token. So a 335 KB ring step costs 1.9 ms
after a compute phase has let the bucket fill and 2.9 ms right after another step (1 Gbit/s,
125 KB burst), and no one line of message size says which: a Sendrecv calibrated back to back
made the 2-host allreduce 17 % too slow, a ping-pong (whose every message finds a full bucket)
would make three pushes into one server too fast. The bucket's state does say, so it is
simulated.

The parameters come from two places (`real.calibrate` writes both into the profile): the
buckets' configured rate and burst per host, from `real.cluster`'s state, and per message
pattern what a calibration measured: the latency of a small message (alpha) and ``efficiency``,
payload bytes per shaped byte (tbf counts whole Ethernet frames, 1448 payload bytes of TCP in
1514; a Sendrecv's frames share each direction with the other's acknowledgements); and the rate
of bytes covered by tokens (``line_Bps``), from the one-way measurement; a message that fits
in a burst moves, while there are tokens, as fast as the one-way measurement moved one of its
size (in OSU's latency test a 4 KiB message took 1-4 us more than an empty one, where the
line rate at half a burst, 240 MB/s, adds 17). How the buckets pass the messages in flight
is `sim.fairshare`'s.
"""

from dataclasses import dataclass, field

FASTEST_BPS = 1e11  # a message within a burst moves at most this fast (its fit can say faster)

# Bucket bytes of a TCP flow queued ahead in its sender's NIC when it found the NIC idle
# (`Shaping.head_start_bytes`), measured on real.cluster's 1 Gbit/s tbf (Linux 6.x, MPICH over
# UCX's TCP, 2026-12-05): a rank's blocking Sends of 670 KB or 1.34 MB to two or three hosts,
# the next receiver's first bytes 3.4-3.9 ms after the first's in three runs of four (425-490
# KB at 125 MB/s), the 125 KB burst ahead of that (at 335 KB the first's whole message went).
TCP_HEAD_START_BYTES = 600_000.0


@dataclass(frozen=True, slots=True)
class ShapedPattern:
    """What a message of one pattern (``oneway``, ``sendrecv``) costs besides its tokens.

    ``alpha_s``: seconds from the last byte leaving to its arrival (a small message's time);
    ``efficiency``: payload bytes per byte of the bucket's rate (0 < efficiency <= 1).
    """

    alpha_s: float
    efficiency: float


@dataclass(frozen=True)
class Shaping:
    """The token buckets of a network's hosts and the cost of each message pattern.

    ``hosts``: ``(rate_Bps, burst_bytes)`` of the host of rank r at ``hosts[r % len(hosts)]``
    (both directions of its NIC shaped alike, as `real.cluster` does); ``line_Bps``: payload
    bytes per second while a bucket holds tokens (the machine's own speed: one number for every
    pattern); ``patterns``: pattern name -> `ShapedPattern` (``oneway``, ``sendrecv``);
    ``burst_cost``: the one-way cost model (``seconds(n)``) whose sizes up to the smallest
    burst give a message that fits in one its own rate (`payload_Bps`), or None (line_Bps);
    ``head_start_bytes``: the bucket bytes a flow that finds its sender's NIC idle moves before
    the flows that start behind it get more than it leaves (TCP's window, queued ahead of
    theirs in the NIC's FIFO: `sim.fairshare`; 0: max-min fair from the start).
    """

    hosts: tuple
    line_Bps: float
    patterns: dict = field(default_factory=dict)
    burst_cost: object = None
    head_start_bytes: float = 0.0

    def payload_Bps(self, nbytes):
        """Payload bytes a second of a message of ``nbytes`` while its buckets hold tokens:
        for one that fits in the smallest burst, its size over what the one-way measurement
        took beyond an empty message's time (at most `FASTEST_BPS`); else ``line_Bps``."""
        if self.burst_cost is None or nbytes > min(burst for _, burst in self.hosts):
            return self.line_Bps
        beyond = float(self.burst_cost.seconds(nbytes) - self.burst_cost.seconds(0.0))
        return nbytes / beyond if beyond * FASTEST_BPS > nbytes else FASTEST_BPS

    def bucket(self, rank):
        """A new, full `TokenBucket` for one direction of rank ``rank``'s NIC."""
        return TokenBucket(*self.hosts[rank % len(self.hosts)])


class TokenBucket:
    """One direction of one NIC shaped by a token bucket of ``rate_Bps`` and ``burst_bytes``
    (bucket bytes: frames), holding ``tokens``; full at time 0. `sim.fairshare` moves it."""

    __slots__ = ("burst_bytes", "rate_Bps", "tokens")

    def __init__(self, rate_Bps, burst_bytes):
        if not (rate_Bps > 0 and burst_bytes > 0):
            raise ValueError(
                f"a token bucket needs rate_Bps > 0 and burst_bytes > 0, got "
                f"{rate_Bps} and {burst_bytes}"
            )
        self.rate_Bps, self.burst_bytes = float(rate_Bps), float(burst_bytes)
        self.tokens = self.burst_bytes
