"""Jitter: each message's measured cost times a factor drawn from the spread a calibration measured.

A synchronous collective of N ranks waits for its slowest message at every step, so a model of
the median message is too fast, and more so as N grows: the wait for the slowest grows with N.
`real.calibrate` keeps, per message pattern, the quantiles of ``t / median(t)`` over the in-situ
repetitions of 64 KiB and more (what programs send), and the simulator multiplies each message's
measured cost by one draw (seeded, so a run is repeatable). Through this machine's shared memory
the factor's median is 1 by construction, its mean 1.04-1.08 on a quiet machine. A Sendrecv is
timed until both its directions are done, so its spread is of the slower of two messages: each of
its messages draws one of a pair (`Jitter.draw_of_pair`).

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
"""

import random

import numpy as np

from twinsgd.calibration.steptimes import GRID, check_quantiles, quantile_at, quantile_mean


class Jitter:
    """Factors drawn from ``quantiles`` (a quantile function on `steptimes.GRID`: 101
    non-decreasing values > 0 at probabilities 0, 0.01, ..., 1, interpolated linearly between
    them, as step times are kept), from a generator seeded by ``seed``."""

    __slots__ = ("_random", "quantiles")

    def __init__(self, quantiles, seed=0):
        self.quantiles = tuple(float(q) for q in quantiles)
        check_quantiles(self.quantiles, "jitter quantiles")
        self._random = random.Random(seed)

    def draw(self):
        """One factor (a float > 0)."""
        return quantile_at(self.quantiles, self._random.random())

    def draw_of_pair(self):
        """One factor of one of two messages whose slower one the quantiles measured (a
        Sendrecv is timed until both its directions are done): drawn at probability u² for a
        uniform u, the factor X with P(X <= x) = G(x) ** 0.5, G the measured distribution, so
        that the slower of two draws has G. Drawn as a whole, each direction would take the
        slower's spread and a lockstep pair the slower of two of those: 20 % more than
        measured a step here (mean 1.19, the slower of two draws 1.44)."""
        u = self._random.random()
        return quantile_at(self.quantiles, u * u)

    @property
    def mean(self):
        """The factor's mean."""
        return quantile_mean(self.quantiles)


def factor_quantiles(samples, min_bytes):
    """The quantiles on `steptimes.GRID` of ``t / median(t)`` over ``samples`` ({nbytes:
    [seconds, ...]}) of at least ``min_bytes``; None when no size has three repetitions there."""
    ratios = []
    for nbytes, seconds in samples.items():
        if nbytes >= min_bytes and len(seconds) >= 3:
            seconds = np.asarray(seconds, float)
            ratios.extend(seconds / np.median(seconds))
    if not ratios:
        return None
    return [float(f"{q:.4g}") for q in np.quantile(ratios, GRID)]
