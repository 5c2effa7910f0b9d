"""Jitter: each message's measured cost times a factor drawn from the spread a calibration measured.

A synchronous collective of N ranks waits for its slowest message at every step, so a model of
the median message is too fast, and more so as N grows: the wait for the slowest grows with N.
`real.calibrate` keeps, per message pattern and per measured size, the quantiles of
``t / median(t)`` over the in-situ repetitions of 64 KiB and more (what programs send), and the
simulator multiplies each message's measured cost by one draw from its size's spread (seeded, so
a run is repeatable). Through this machine's shared memory the factor's median is 1 by
construction, its mean 1.04-1.08 on a quiet machine. A Sendrecv is timed until both its
directions are done, so its spread is of the slower of two messages: each of its messages draws
one of a pair (`Jitter.draw_of_pair`).

Why by size: a hiccup of the machine (a process off its core for a millisecond) adds time, not a
factor. Pooled over sizes, a millisecond on a 53 us message of 64 KiB became a factor of 20 for
every size: a calibration on 2026-12-02 whose one-way spread had 4 % of its factors at 15-43x
(mean 1.89) gave the 2-rank parameter servers' 670 KB messages sends of 5-10 ms, where the runs
measured no message over 2x its median at the 99th percentile, and their communication came out
62-131 % long. A message draws from the spread of the largest measured size not above its own
(the smallest's below it), so a hiccup keeps about the size at which it was measured.

Examples
--------
Factors spread evenly from 0.5 to 1.5: draws stay inside, and their mean is the spread's:

>>> jitter = Jitter([0.5 + k / 100 for k in range(101)], seed=1)
>>> draws = [jitter.draw() for _ in range(10_000)]
>>> min(draws) >= 0.5 and max(draws) <= 1.5, round(jitter.mean, 6), round(sum(draws) / 1e4, 2)
(True, 1.0, 1.0)

The slower of two draws of a pair has the measured spread:

>>> pairs = [max(jitter.draw_of_pair(), jitter.draw_of_pair()) for _ in range(10_000)]
>>> round(sum(pairs) / 1e4, 2)
1.0

By size: 64 KiB measured with a tail to 30x, 1 MiB without; a 670 KB message draws from the 512
KiB row, up to 1.2x, a 16 KiB one from the smallest row:

>>> tail, calm = [1.0] * 96 + [30.0] * 5, [1.0] * 90 + [1.2] * 11
>>> sized = Jitter([tail, calm], seed=2, sizes=[65536, 524288])
>>> max(sized.draw(670_000) for _ in range(1000)), max(sized.draw(16384) for _ in range(1000)) > 2
(1.2, True)
"""

import itertools
import random
from bisect import bisect_right

import numpy as np

from twinsgd.calibration.steptimes import GRID, check_quantiles, quantile_at, quantile_mean


class Jitter:
    """Factors drawn from ``quantiles`` (a quantile function on `steptimes.GRID`: 101
    non-decreasing values > 0 at probabilities 0, 0.01, ..., 1, interpolated linearly between
    them, as step times are kept), from a generator seeded by ``seed``. With ``sizes``
    (increasing bytes), ``quantiles`` holds one such function per size, and a message of n bytes
    draws from that of the largest size <= n (the first below them all)."""

    __slots__ = ("_later_sizes", "_random", "bands", "quantiles")

    def __init__(self, quantiles, seed=0, sizes=None):
        rows, sizes = ([quantiles], [0]) if sizes is None else (list(quantiles), list(sizes))
        if not rows or len(rows) != len(sizes):
            raise ValueError(f"one quantile function per size: {len(rows)} for {len(sizes)}")
        if any(not (isinstance(s, int | float) and s >= 0) for s in sizes) or any(
            b <= a for a, b in itertools.pairwise(sizes)
        ):
            raise ValueError(f"sizes must be increasing bytes >= 0, got {sizes}")
        pairs = zip(sizes, rows, strict=True)
        self.bands = tuple((int(s), tuple(float(q) for q in row)) for s, row in pairs)
        for size, row in self.bands:
            check_quantiles(row, "jitter quantiles" if len(rows) == 1 else f"jitter at {size} B")
        self.quantiles = self.bands[0][1]  # one size: its quantiles
        self._later_sizes = [size for size, _ in self.bands[1:]]
        self._random = random.Random(seed)

    def quantiles_at(self, nbytes):
        """The quantile function a message of ``nbytes`` draws from."""
        if not self._later_sizes:  # one spread for all sizes: no search (the message path)
            return self.quantiles
        return self.bands[bisect_right(self._later_sizes, nbytes)][1]

    def draw(self, nbytes=0):
        """One factor (a float > 0) for a message of ``nbytes``."""
        return quantile_at(self.quantiles_at(nbytes), self._random.random())

    def draw_of_pair(self, nbytes=0):
        """One factor of one of two messages of ``nbytes`` whose slower one the quantiles
        measured (a Sendrecv is timed until both its directions are done): drawn at probability
        u² for a uniform u, the factor X with P(X <= x) = G(x) ** 0.5, G the measured
        distribution, so that the slower of two draws has G. Drawn as a whole, each direction
        would take the slower's spread and a lockstep pair the slower of two of those: 20 % more
        than measured a step here (mean 1.19, the slower of two draws 1.44)."""
        u = self._random.random()
        return quantile_at(self.quantiles_at(nbytes), u * u)

    def mean_at(self, nbytes):
        """The factor's mean for a message of ``nbytes``."""
        return quantile_mean(self.quantiles_at(nbytes))

    @property
    def mean(self):
        """The factor's mean over the measured sizes (each size alike)."""
        return float(np.mean([quantile_mean(row) for _, row in self.bands]))

    def to_dict(self):
        """The profile's form: the 101 quantiles, or with several sizes ``{"sizes": [...],
        "quantiles": [[...], ...]}`` (`from_table` reads either)."""
        if len(self.bands) == 1 and self.bands[0][0] == 0:
            return list(self.quantiles)
        return {"sizes": [s for s, _ in self.bands], "quantiles": [list(r) for _, r in self.bands]}

    @classmethod
    def from_table(cls, value, seed=0):
        """A Jitter from a profile's value: 101 quantiles (one spread for every size, as
        profiles written before 2026-12-02 keep it) or ``{"sizes", "quantiles"}``."""
        if isinstance(value, dict):
            if set(value) != {"sizes", "quantiles"}:
                raise ValueError(f"needs sizes and quantiles, got {sorted(value)}")
            return cls(value["quantiles"], seed, value["sizes"])
        return cls(value, seed)


FENCE_FACTOR = 2.0  # a repetition more than this many times its size's median may be left out


def undisturbed(factors):
    """``factors`` (each repetition's time over its size's median) without those a disturbance
    of the machine made long: past Tukey's far-out fence on their logarithms (Q3 + 3 IQR),
    where that fence is at `FENCE_FACTOR` or above. A message's own spread stays.

    Why: a calibration on a quiet machine (shared memory, 2026-12-03) had 15-20 % of its in-situ
    one-way repetitions of 64 KiB-1 MiB at 4-50x the median (the factor's mean 1.6-2.6), where
    its Sendrecv and exchange in the same minutes had means 0.96-1.07 and the programs'
    messages, measured right after, no inflation at all; drawn from, that spread made the
    2-rank servers' communication 142-187 % long. The programs' own messages stayed within 2x
    their median at the 99th percentile (2026-12-02). A network whose messages are that slow
    that often in earnest (a congested link) loses that tail too: `real.calibrate` says how
    many repetitions it left out.

    >>> body = [0.9, 0.95, 1.0, 1.0, 1.05, 1.1, 1.2, 1.5]
    >>> undisturbed(np.array(body + [4.6, 13.0])).tolist() == body
    True
    >>> undisturbed(np.array([0.5, 1.0, 1.0, 2.5, 3.0])).tolist()  # a wide spread is kept whole
    [0.5, 1.0, 1.0, 2.5, 3.0]
    """
    logs = np.log(factors)
    q1, q3 = np.quantile(logs, [0.25, 0.75])
    fence = max(np.log(FENCE_FACTOR), q3 + 3 * (q3 - q1))
    return factors[logs <= fence]


def factor_quantiles(samples, min_bytes, left_out=None):
    """A `Jitter`'s profile form (`Jitter.to_dict`) of ``samples`` ({nbytes: [seconds, ...]}):
    per size of at least ``min_bytes`` with three repetitions or more, the quantiles on
    `steptimes.GRID` of ``t / median(t)``, the repetitions a disturbance made long left out
    (`undisturbed`); None when no size has them. ``left_out``: a dict that gets, per size,
    (repetitions left out, repetitions)."""
    sizes = sorted(n for n, s in samples.items() if n >= min_bytes and len(s) >= 3)
    if not sizes:
        return None
    rows = []
    for nbytes in sizes:
        seconds = np.asarray(samples[nbytes], float)
        factors = seconds / np.median(seconds)
        kept = undisturbed(factors)
        if left_out is not None:
            left_out[nbytes] = (len(factors) - len(kept), len(factors))
        rows.append([float(f"{q:.4g}") for q in np.quantile(kept, GRID)])
    return {"sizes": sizes, "quantiles": rows}
