"""Busy cores: how much slower one process's training step is while k processes compute at once
on its host, as measured there (`real.calibrate`'s ``[compute.busy.MODEL]``).

Why: the cores of one host share their caches, their memory and, where a core runs two hardware
threads, the core itself. On a 16-core machine (Intel Xeon under gVisor, 2026-11-27) the MLP's
step in the real program took 1.26-1.60 ms at 2 ranks and 2.0-2.5 ms at 16 (every rank on a core
of its own), and not alike: at 16 ranks one rank's median step was 1.5 ms and another's 3.0 ms,
for the whole run. A synchronous step waits for the slowest, so the spread matters as much as
the mean. The calibration's pair of ranks sees none of this.

So the calibration runs the step in k processes at once for k = 1, 2, 4, ... up to the host's
cores, each timing its own steps, and keeps per k the quantiles of each process's median step
over the median of one process alone (`GRID`: 0, 10, ..., 100 %). The simulator gives each
rank of a host of k busy ranks (``min(ranks, cores)``) one factor of the distribution at k,
spread evenly over it and dealt to the ranks in a seeded order (`rank_factors`), over the mean
at the k its compute was measured at (`reference_busy`).

Examples
--------
Two processes at once run 1.1x to 1.3x as long as one alone; the two ranks of a host where both
compute take the middles of the two halves of that spread, 1.15x and 1.25x:

>>> busy = BusyCores((1, 2), ((1.0,) * 11, tuple(1.1 + 0.02 * i for i in range(11))))
>>> sorted(round(f, 3) for f in busy.rank_factors(2, 2, np.random.default_rng(0)))
[1.15, 1.25]
>>> round(busy.mean_at(2), 3), round(busy.mean_at(1), 3)
(1.2, 1.0)
"""

import itertools
import math
from dataclasses import dataclass

import numpy as np

GRID = tuple(i / 10 for i in range(11))  # probabilities of the stored quantiles


@dataclass(frozen=True)
class BusyCores:
    """Per count of processes computing at once on a host (``processes``, increasing, from 1),
    the quantiles on `GRID` of one process's step time over one process's alone
    (``factors``, one tuple of 11 non-decreasing values > 0 per count)."""

    processes: tuple
    factors: tuple

    def __post_init__(self):
        if not self.processes or len(self.processes) != len(self.factors):
            raise ValueError("busy cores: one row of factors per count of processes")
        if list(self.processes) != sorted(set(self.processes)) or self.processes[0] < 1:
            raise ValueError(f"busy cores: processes must increase from >= 1, got {self.processes}")
        for k, row in zip(self.processes, self.factors, strict=True):
            ok = len(row) == len(GRID) and all(math.isfinite(x) and x > 0 for x in row)
            if not ok or any(b < a for a, b in itertools.pairwise(row)):
                raise ValueError(
                    f"busy cores at {k}: {len(GRID)} factors, finite, > 0, non-decreasing"
                )

    def quantiles_at(self, busy):
        """The factors' quantiles (on `GRID`) at ``busy`` processes, shape (11,): linear in
        ``busy`` between the measured counts, the nearest measured count outside them."""
        k = np.asarray(self.processes, float)
        rows = np.asarray(self.factors, float)
        return np.array([np.interp(busy, k, rows[:, j]) for j in range(len(GRID))])

    def mean_at(self, busy):
        """The mean factor at ``busy`` processes (trapezoids over the quantile function)."""
        q = self.quantiles_at(busy)
        return float(np.mean((q[1:] + q[:-1]) / 2))

    def rank_factors(self, ranks, busy, rng):
        """Factors of the ``ranks`` ranks of one host on which ``busy`` compute at once, a tuple
        of ``ranks`` floats: the distribution at ``busy`` at probabilities (i + 0.5) / ranks,
        dealt in an order drawn from ``rng`` (a numpy Generator; a rank keeps its factor for the
        whole run, as a process keeps its place on the machine)."""
        q = self.quantiles_at(busy)
        factors = np.interp((np.arange(ranks) + 0.5) / ranks, GRID, q)
        return tuple(float(f) for f in rng.permutation(factors))

    def to_dict(self):
        """Plain values for a TOML profile (``[compute.busy.MODEL]``)."""
        return {
            "processes": list(self.processes),
            "factors": [[float(f"{x:.4g}") for x in row] for row in self.factors],
        }

    @classmethod
    def from_dict(cls, document, model=""):
        """The inverse of `to_dict`; ValueError naming the table for what is missing or wrong."""
        try:
            return cls(
                tuple(int(k) for k in document["processes"]),
                tuple(tuple(float(x) for x in row) for row in document["factors"]),
            )
        except KeyError as err:
            raise ValueError(f"[compute.busy.{model}] needs {err.args[0]!r}") from None
        except (TypeError, ValueError) as err:
            raise ValueError(f"[compute.busy.{model}]: {err}") from None


def busy_cores_from_windows(ratios, spread):
    """`BusyCores` from measured windows, both keyed by k (from 1): ``ratios[k]`` each window's
    mean step of its k processes over one process's alone just before; ``spread[k]`` each
    process's step over its window's mean, pooled over the windows. The factors at k: the
    median ratio times the spread's quantiles (a window's drift leaves the spread alone).

    >>> busy = busy_cores_from_windows({1: [1.0], 2: [1.2, 1.3, 5.0]}, {1: [1.0], 2: [0.9, 1.1]})
    >>> [round(x, 2) for x in busy.factors[1][::5]], round(busy.mean_at(2), 2)
    ([1.17, 1.3, 1.43], 1.3)
    """
    processes = tuple(sorted(ratios))
    rows = tuple(
        tuple(float(np.median(ratios[k]) * q) for q in np.quantile(spread[k], GRID))
        for k in processes
    )
    return BusyCores(processes, rows)
