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
pattern what a calibration measured: the latency of a small message (alpha), the rate of bytes
covered by tokens (``line_Bps``), and ``efficiency``, payload bytes per shaped byte (tbf counts
whole Ethernet frames, 1448 payload bytes of TCP in 1514; a Sendrecv's frames share each
direction with the other's acknowledgements).
"""

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ShapedPattern:
    """What a message of one pattern (``oneway``, ``sendrecv``) costs besides its tokens.

    ``alpha_s``: seconds from the last byte leaving to its arrival (a small message's time);
    ``line_Bps``: payload bytes per second while tokens last; ``efficiency``: payload bytes per
    byte of the bucket's rate (0 < efficiency <= 1).
    """

    alpha_s: float
    line_Bps: float
    efficiency: float


@dataclass(frozen=True)
class Shaping:
    """The token buckets of a network's hosts and the cost of each message pattern.

    ``hosts``: ``(rate_Bps, burst_bytes)`` of the host of rank r at ``hosts[r % len(hosts)]``
    (both directions of its NIC shaped alike, as `real.cluster` does); ``patterns``: pattern
    name -> `ShapedPattern` (``oneway``, ``sendrecv``).
    """

    hosts: tuple
    patterns: dict = field(default_factory=dict)

    def bucket(self, rank):
        """A new, full `TokenBucket` for one direction of rank ``rank``'s NIC."""
        return TokenBucket(*self.hosts[rank % len(self.hosts)])


class TokenBucket:
    """One direction of one NIC shaped by a token bucket of ``rate_Bps`` and ``burst_bytes``
    (bucket bytes: frames). Full at time 0.

    Examples
    --------
    >>> bucket = TokenBucket(rate_Bps=100.0, burst_bytes=50.0)
    >>> fast = ShapedPattern(alpha_s=0.0, line_Bps=200.0, efficiency=1.0)
    >>> bucket.seconds(0.0, 60, fast)  # 50 tokens last 0.5 s at 200 B/s (100 bytes), 60 < 100
    0.3
    >>> bucket.seconds(0.0, 200, fast)  # 100 bytes in 0.5 s, then 100 at 100 B/s in 1 s
    1.5
    >>> bucket.spend(0.0, 200, 1.5, fast)
    >>> bucket.tokens, bucket.seconds(1.5, 100, fast)  # empty: back to back, the rate
    (0.0, 1.0)
    """

    __slots__ = ("burst_bytes", "last", "rate_Bps", "tokens")

    def __init__(self, rate_Bps, burst_bytes):
        if not (rate_Bps > 0 and burst_bytes > 0):
            raise ValueError(f"a token bucket needs rate_Bps > 0 and burst_bytes > 0, got "
                             f"{rate_Bps} and {burst_bytes}")
        self.rate_Bps, self.burst_bytes = float(rate_Bps), float(burst_bytes)
        self.tokens, self.last = self.burst_bytes, 0.0

    def _tokens_at(self, now):
        return min(self.burst_bytes, self.tokens + (now - self.last) * self.rate_Bps)

    def seconds(self, now, nbytes, pattern):
        """Seconds for ``nbytes`` of payload starting at ``now``.

        In payload bytes (tokens and rate times ``pattern.efficiency``): bytes leave at
        ``line_Bps`` L while tokens last, the tokens draining at L - r as they refill at r; once
        they are gone, at the rate r. So the first ``T L / (L - r)`` bytes (T the tokens at the
        start) go at L, the rest at r."""
        return self._flow(now, nbytes, pattern)[0]

    def spend(self, now, nbytes, seconds, pattern):
        """Take the tokens of ``nbytes`` of payload that started at ``now`` and took
        ``seconds`` (at least what this bucket lets through; longer when another bucket on the
        way was slower, refilling this one meanwhile); the bucket's clock moves to the end."""
        own, left = self._flow(now, nbytes, pattern)
        refill = (seconds - own) * self.rate_Bps * pattern.efficiency
        self.tokens = min(self.burst_bytes, (left + refill) / pattern.efficiency)
        self.last = now + seconds

    def _flow(self, now, nbytes, pattern):
        """(seconds, payload tokens left at the end) of ``nbytes`` starting at ``now``."""
        tokens = self._tokens_at(now) * pattern.efficiency
        line, rate = pattern.line_Bps, self.rate_Bps * pattern.efficiency
        if line <= rate:  # the bucket never holds the line back
            return nbytes / line, min(self.burst_bytes * pattern.efficiency,
                                      tokens - nbytes + nbytes * rate / line)
        covered = tokens * line / (line - rate)  # payload bytes sent before the tokens run out
        if nbytes <= covered:
            return nbytes / line, tokens - nbytes * (line - rate) / line
        return covered / line + (nbytes - covered) / rate, 0.0


def shaped_seconds(buckets, now, nbytes, pattern):
    """Seconds a message holds its route when every bucket on it must let it through (in series,
    cut-through: the slowest decides), and spend their tokens. ``buckets``: the route's."""
    seconds = max((bucket.seconds(now, nbytes, pattern) for bucket in buckets),
                  default=nbytes / pattern.line_Bps)
    for bucket in buckets:
        bucket.spend(now, nbytes, seconds, pattern)
    return seconds
