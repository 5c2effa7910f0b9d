"""Jitter: each message's measured cost times a factor drawn from the spread a calibration measured.

A synchronous collective of N ranks waits for its slowest message at every step, so a model of
the median message is too fast, and more so as N grows: the wait for the slowest grows with N.
`real.calibrate` keeps, per message pattern, the quantiles of ``t / median(t)`` over the in-situ
repetitions of 64 KiB and more (what programs send), and the simulator multiplies each message's
measured cost by one draw (seeded, so a run is repeatable). Through this machine's shared memory
the factor's median is 1 by construction, its mean 1.04-1.08 on a quiet machine.

Examples
--------
Factors spread evenly from 0.5 to 1.5: draws stay inside, and their mean is the spread's:

>>> jitter = Jitter([0.5 + k / 100 for k in range(101)], seed=1)
>>> draws = [jitter.draw() for _ in range(10_000)]
>>> min(draws) >= 0.5 and max(draws) <= 1.5, round(jitter.mean, 6), round(sum(draws) / 1e4, 2)
(True, 1.0, 1.0)
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
