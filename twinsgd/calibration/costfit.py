"""Piecewise alpha-beta cost models, ``t(n) = alpha_k + n / beta_k`` on contiguous size ranges.

One Hockney line cannot follow a link whose speed depends on the message size: on a link shaped
by a token bucket (``tc tbf``) messages inside the burst pass at line rate and larger ones at the
shaped rate, and one line fitted to both misses the large messages by a third. SimGrid answers
with piecewise-linear factors over ranges of message sizes; `fit_segments` finds the fewest ranges
whose lines reproduce every measured time within a relative bound, and `PiecewiseCost` evaluates
the model (a plain-Python path for one size, since the simulator asks per message) and stores it
in a profile (`PiecewiseCost.to_dict`, `PiecewiseCost.from_dict`).

Examples
--------
A link that carries up to 64 KiB at 1 GB/s after 15 us, and more at 125 MB/s after 500 us:

>>> n = 2 ** np.arange(3, 24)
>>> t = np.where(n <= 2**16, 15e-6 + n / 1e9, 500e-6 + n / 125e6)
>>> cost = fit_segments(n, t)
>>> cost.fitted_segments, [round(a * 1e6, 6) for a in cost.latency_s[::2]]
(2, [15.0, 500.0])
>>> [round(b / 1e6, 6) for b in cost.bandwidth_Bps[::2]]
[1000.0, 125.0]

Between 64 and 128 KiB, where no size was measured and the lines do not cross, a bridge joins
the one's time at 64 KiB (80.5 us) to the other's at 128 KiB (1548.6 us):

>>> [round(b) for b in cost.min_bytes], round(cost.seconds(3 * 2**15) * 1e6, 2)
([8, 65536, 131072], 814.56)
>>> round(cost.seconds(2**20) * 1e3, 6), cost.max_rel_error < 1e-12
(8.888608, True)
"""

import itertools
import math
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

CONFIDENCE = 0.95  # of the intervals of alpha and beta
_NAN_PAIR = (math.nan, math.nan)
_MODEL_KEYS = ("min_bytes", "max_bytes", "latency_s", "bandwidth_Bps")
_KEYS = (
    *_MODEL_KEYS,
    "latency_ci_s",
    "bandwidth_ci_Bps",
    "max_rel_residual",
    "sizes",
    "seconds",
    "rel_residuals",
)


@dataclass(frozen=True, kw_only=True)
class PiecewiseCost:
    """Message time ``t(n) = latency_s[k] + n / bandwidth_Bps[k]`` for n in segment k's range.

    Made by `fit_segments`, `PiecewiseCost.constant` or `PiecewiseCost.from_dict`. Segment k covers
    ``[min_bytes[k], max_bytes[k])`` bytes, the last one closed; the ranges are contiguous. A size
    below the first range uses the first segment's line and one above the last the last's: that is
    extrapolation, and nothing warns of it.

    Per segment: ``latency_ci_s``, ``bandwidth_ci_Bps`` (95 % intervals, (lo, hi); NaN when
    unknown), ``max_rel_residual`` (the largest ``|t_fit / t - 1|`` of its points; NaN with no
    points). Per measured point, sorted by size: ``sizes`` (bytes), ``times_s`` (seconds) and
    ``rel_residuals`` (``t_fit / t - 1``).

    Examples
    --------
    >>> cost = PiecewiseCost.constant(2e-6, 5e9)
    >>> cost.seconds(1000), cost.seconds(np.array([0, 5000]))
    (2.2e-06, array([2.e-06, 3.e-06]))
    >>> cost.alpha_s(10**9), cost.beta_Bps(10**9)
    (2e-06, 5000000000.0)
    """

    min_bytes: tuple
    max_bytes: tuple
    latency_s: tuple
    bandwidth_Bps: tuple
    latency_ci_s: tuple
    bandwidth_ci_Bps: tuple
    max_rel_residual: tuple
    sizes: tuple = ()
    times_s: tuple = ()
    rel_residuals: tuple = ()
    _breaks: tuple = field(init=False, repr=False, compare=False)
    _arrays: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        k = len(self.latency_s)
        assert k >= 1 and all(
            len(v) == k
            for v in (self.min_bytes, self.max_bytes, self.bandwidth_Bps, self.max_rel_residual)
        )
        breaks = tuple(self.min_bytes[1:])
        object.__setattr__(self, "_breaks", breaks)
        object.__setattr__(
            self,
            "_arrays",
            (
                np.array(breaks, dtype=np.float64),
                np.array(self.latency_s, dtype=np.float64),
                np.array(self.bandwidth_Bps, dtype=np.float64),
            ),
        )

    @classmethod
    def constant(cls, alpha_s, beta_Bps):
        """The one-segment model ``alpha_s + n / beta_Bps`` for all n >= 0 (a profile that gives
        only a latency, seconds, >= 0, and a bandwidth, bytes/s, > 0); no intervals, no points."""
        if not (math.isfinite(alpha_s) and alpha_s >= 0):
            raise ValueError(f"alpha_s must be finite and >= 0 seconds, got {alpha_s}")
        if not (math.isfinite(beta_Bps) and beta_Bps > 0):
            raise ValueError(f"beta_Bps must be finite and > 0 bytes/s, got {beta_Bps}")
        return cls(
            min_bytes=(0.0,),
            max_bytes=(math.inf,),
            latency_s=(float(alpha_s),),
            bandwidth_Bps=(float(beta_Bps),),
            latency_ci_s=(_NAN_PAIR,),
            bandwidth_ci_Bps=(_NAN_PAIR,),
            max_rel_residual=(math.nan,),
        )

    @property
    def fitted_segments(self):
        """How many segments were fitted to points (the rest are bridges between two fitted
        ones, `fit_segments`, or of a model given without residuals)."""
        return sum(math.isfinite(x) for x in self.max_rel_residual)

    def seconds(self, nbytes):
        """Time of an ``nbytes`` message, seconds: a float for an int or float, else an array of
        ``nbytes``'s shape. No checks (the simulator calls it per message): sizes are >= 0."""
        if isinstance(nbytes, int | float):  # NOTE: plain Python for one size, for performance
            k = bisect_right(self._breaks, nbytes)
            return self.latency_s[k] + nbytes / self.bandwidth_Bps[k]
        n = np.asarray(nbytes, dtype=np.float64)
        breaks, alpha, beta = self._arrays
        k = np.searchsorted(breaks, n, side="right")
        return alpha[k] + n / beta[k]

    def alpha_s(self, nbytes):
        """The latency of the segment of ``nbytes``, seconds (float, or array of its shape)."""
        return self._of_segment(nbytes, self.latency_s, self._arrays[1])

    def beta_Bps(self, nbytes):
        """The bandwidth of the segment of ``nbytes``, bytes/s (float, or array of its shape)."""
        return self._of_segment(nbytes, self.bandwidth_Bps, self._arrays[2])

    def _of_segment(self, nbytes, values, array):
        if isinstance(nbytes, int | float):
            return values[bisect_right(self._breaks, nbytes)]
        return array[np.searchsorted(self._arrays[0], np.asarray(nbytes, float), side="right")]

    @property
    def max_rel_error(self):
        """The largest ``|t_fit / t - 1|`` over the measured points (NaN without points)."""
        return max(map(abs, self.rel_residuals), default=math.nan)

    def to_dict(self):
        """The model as a dict of plain lists of numbers, for a TOML table.

        Keys: per segment ``min_bytes``, ``max_bytes``, ``latency_s``, ``bandwidth_Bps``,
        ``latency_ci_s`` and ``bandwidth_ci_Bps`` (lists of [lo, hi]), ``max_rel_residual``; per
        measured point ``sizes`` (bytes, ints when whole), ``seconds``, ``rel_residuals``. Floats
        may be inf or NaN (TOML's ``inf``, ``nan``); write them with ``repr`` for an exact trip.
        """
        return {
            "min_bytes": list(self.min_bytes),
            "max_bytes": list(self.max_bytes),
            "latency_s": list(self.latency_s),
            "bandwidth_Bps": list(self.bandwidth_Bps),
            "latency_ci_s": [list(ci) for ci in self.latency_ci_s],
            "bandwidth_ci_Bps": [list(ci) for ci in self.bandwidth_ci_Bps],
            "max_rel_residual": list(self.max_rel_residual),
            "sizes": [int(n) if n.is_integer() else n for n in self.sizes],
            "seconds": list(self.times_s),
            "rel_residuals": list(self.rel_residuals),
        }

    @classmethod
    def from_dict(cls, d):
        """Rebuild a model from `to_dict`'s dict (say, a TOML table). The four keys of the
        model, ``min_bytes``, ``max_bytes``, ``latency_s`` and ``bandwidth_Bps``, are required,
        the others optional; ``from_dict(m.to_dict())`` equals ``m`` in those four exactly.

        Raises
        ------
        TypeError
            ``d`` is not a mapping.
        ValueError
            One line naming the key: missing or unknown; not a list of numbers, one per segment
            (pairs for the intervals, one per point for the points); a latency < 0 or a bandwidth
            <= 0 or not finite; ranges that are empty or not contiguous; a size or time <= 0.
        """
        if not isinstance(d, Mapping):
            raise TypeError(f"cost model: expected a dict, got {type(d).__name__}")
        if unknown := sorted(set(d) - set(_KEYS)):
            raise ValueError(f"cost model: unknown key {unknown[0]!r}; keys are {', '.join(_KEYS)}")
        for key in _MODEL_KEYS:
            if key not in d:
                raise ValueError(f"cost model: key {key!r} is missing")
        k = len(_numbers(d, "latency_s", None))
        model = {key: _numbers(d, key, k) for key in _MODEL_KEYS}
        _check_model(**model)
        nan = [math.nan] * k
        extra = {
            "latency_ci_s": _numbers(d, "latency_ci_s", k, [_NAN_PAIR] * k, pairs=True),
            "bandwidth_ci_Bps": _numbers(d, "bandwidth_ci_Bps", k, [_NAN_PAIR] * k, pairs=True),
            "max_rel_residual": _numbers(d, "max_rel_residual", k, nan),
        }
        p = len(_numbers(d, "sizes", None, []))
        points = {key: _numbers(d, key, p, []) for key in ("sizes", "seconds", "rel_residuals")}
        for key in ("sizes", "seconds"):
            if not all(math.isfinite(x) and x > 0 for x in points[key]):
                raise ValueError(f"cost model: every {key!r} entry must be finite and > 0")
        return cls(
            **model,
            **extra,
            sizes=points["sizes"],
            times_s=points["seconds"],
            rel_residuals=points["rel_residuals"],
        )


def _numbers(d, key, count, default=None, pairs=False):
    """``d[key]`` as a tuple of floats (of float pairs when ``pairs``), ``count`` of them unless
    ``count`` is None; ``default`` when the key is absent."""
    if key not in d and default is not None:
        return tuple(default)
    try:
        value = np.asarray(d[key], dtype=np.float64)
    except (TypeError, ValueError):
        value = None
    shape = "a list of [lo, hi] pairs" if pairs else "a list of numbers"
    if value is None or value.ndim != (2 if pairs else 1) or (pairs and value.shape[1] != 2):
        raise ValueError(f"cost model: {key!r} must be {shape}, got {d[key]!r}")
    if count is not None and len(value) != count:
        raise ValueError(f"cost model: {key!r} must have {count} entries, got {len(value)}")
    if pairs:
        return tuple((float(lo), float(hi)) for lo, hi in value)
    return tuple(float(x) for x in value)


def _check_model(min_bytes, max_bytes, latency_s, bandwidth_Bps):
    if not latency_s:
        raise ValueError("cost model: 'latency_s' must have at least one segment")
    if not (all(math.isfinite(a) for a in latency_s) and latency_s[0] >= 0):
        raise ValueError(
            f"cost model: 'latency_s' must be finite and the first >= 0, got {list(latency_s)}"
        )
    if not all(math.isfinite(b) and b > 0 for b in bandwidth_Bps):
        raise ValueError(
            f"cost model: 'bandwidth_Bps' must be finite and > 0, got {list(bandwidth_Bps)}"
        )
    if not all(
        a + lo / b > 0
        for a, lo, b in list(zip(latency_s, min_bytes, bandwidth_Bps, strict=True))[1:]
    ):
        raise ValueError(
            "cost model: a segment's time must be > 0 where it starts "
            "('latency_s' + 'min_bytes' / 'bandwidth_Bps')"
        )
    if not all(math.isfinite(lo) and lo >= 0 for lo in min_bytes):
        raise ValueError(f"cost model: 'min_bytes' must be finite and >= 0, got {list(min_bytes)}")
    if not all(hi > lo for lo, hi in zip(min_bytes, max_bytes, strict=True)):
        raise ValueError("cost model: 'max_bytes' must exceed 'min_bytes' in every segment")
    if max_bytes[:-1] != min_bytes[1:]:
        raise ValueError("cost model: 'max_bytes' must equal the next segment's 'min_bytes'")


# ---------------------------------------------------------------------------- fitting
def fit_segments(nbytes, seconds, max_rel_error=0.05, max_segments=4):
    """Fit the fewest alpha-beta segments that reproduce every measured time within a bound.

    Parameters
    ----------
    nbytes : (p,) array of int
        Message sizes, bytes, all > 0, at least 2 distinct, in any order. A size may repeat
        (several measurements of it): every point is used.
    seconds : (p,) array of float
        The time of each message, seconds, all > 0 (one-way, or per exchange: whatever is to be
        modelled).
    max_rel_error : float, default 0.05
        The bound on every point's relative error ``|t_fit / t - 1|``, > 0.
    max_segments : int, default 4
        At most this many segments, >= 1.

    Returns
    -------
    PiecewiseCost
        The fewest segments that meet the bound, and among those the least sum of squared
        relative errors. When no fit with at most ``max_segments`` segments meets it, the one
        whose largest error is smallest (fewest segments, then least squares, at that error) and
        no exception: its ``max_rel_error`` shows the miss.

    Raises
    ------
    ValueError
        Shapes differ; fewer than 2 distinct sizes; a size or time <= 0 or not finite;
        ``max_rel_error`` not > 0; ``max_segments`` < 1; no fit with at most ``max_segments``
        segments has a positive bandwidth in each (times that do not grow with size).

    Notes
    -----
    Within a segment, points (n_i, t_i): minimise ``sum(((alpha + gamma n_i) / t_i - 1)**2)``
    over ``gamma = 1 / beta >= 0`` and, in the first segment, ``alpha >= 0`` (relative
    residuals: the times span decades, and an unweighted fit lets the largest messages decide
    both numbers), solved in closed form: two unknowns make ``lsq_linear``'s bounded problem a
    2x2 system or, when a bound binds, one of its two faces. A segment whose best ``gamma`` is 0
    has times that do not grow: it is never chosen.

    The first segment's alpha is a latency; a later segment's is the intercept of its line and
    may be negative: beyond a token bucket's burst of B bytes at rate r, ``t(n) = c + (n - B) /
    r``, whose intercept ``c - B / r`` is below zero (about -0.5 ms for 64 KB at 1 Gbit/s). A
    model is checked to be > 0 where each segment starts.

    Breakpoints: dynamic programming over the m sorted distinct sizes. A segment is a run of at
    least 2 consecutive distinct sizes; every run is fitted once (O(m**2) fits), and the DP picks
    the runs that cover all sizes with the fewest segments, then the least total squared error,
    using only runs whose every point is within the bound. When the bound is out of reach, the
    bound is raised to the smallest run error for which ``max_segments`` suffice (a binary
    search over the runs' errors).

    Boundaries: between segments whose last and first sizes are a < b, the boundary is where the
    two lines cross if that is strictly between a and b (the model is continuous there), else a
    bridge joins them: a segment from a to b on the line through the first line's time at a and
    the second's at b (continuous too; it has no points, so no intervals and a NaN residual).
    Where the times do not grow from a to b, the geometric midpoint ``sqrt(a b)`` instead (the
    model jumps there). The first range starts at the smallest size, the last ends at the
    largest. ``max_segments`` counts the fitted segments, not the bridges.

    Intervals: per segment, ``CONFIDENCE`` (95 %) Wald intervals of alpha and gamma from the
    weighted least squares covariance ``s**2 (A^T A)^-1``, ``s**2`` the residual variance with
    ``points - 2`` degrees of freedom and a Student t quantile; beta's interval is gamma's,
    inverted (hi inf when gamma's reaches 0). The intervals ignore the
    bounds and the choice of breakpoints. With 2 points (no degrees of freedom) they are NaN.

    The bound holds for every point, so noise larger than it makes segments chase the noise:
    give per-size medians (as ``real.calibrate`` measures them) or a bound above the noise.

    Examples
    --------
    >>> n = np.array([8, 8, 1024, 1024, 2**20, 2**20])  # sizes may repeat
    >>> t = (2e-6 + n / 5e9) * np.array([1.02, 0.98, 0.99, 1.01, 1.02, 0.98])
    >>> cost = fit_segments(n, t)
    >>> len(cost.latency_s), round(cost.latency_s[0] * 1e6, 3)  # one segment; alpha, us
    (1, 1.999)
    >>> round(cost.bandwidth_Bps[0] / 1e9, 3)  # beta, GB/s
    5.004
    >>> [round(x, 3) for x in cost.rel_residuals], round(cost.max_rel_error, 3)
    ([-0.02, 0.02, 0.01, -0.01, -0.02, 0.02], 0.02)
    >>> [round(x * 1e6, 2) for x in cost.latency_ci_s[0]]  # 95 % intervals
    [1.94, 2.06]
    >>> [round(x / 1e9, 2) for x in cost.bandwidth_ci_Bps[0]]
    [4.8, 5.22]

    A bound out of reach is no error: 3 distinct sizes make at most one segment.

    >>> round(fit_segments(n, t, max_rel_error=0.01).max_rel_error, 4)
    0.0204
    """
    n = np.asarray(nbytes, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    if n.ndim != 1 or n.shape != t.shape:
        raise ValueError(
            f"nbytes and seconds must be 1-d of one length, got shapes {n.shape} and {t.shape}"
        )
    if not (np.all(np.isfinite(n)) and np.all(n > 0)):
        raise ValueError("message sizes must be finite and > 0")
    if not (np.all(np.isfinite(t)) and np.all(t > 0)):
        raise ValueError("times must be finite and > 0")
    if len(np.unique(n)) < 2:
        raise ValueError(f"need at least 2 distinct message sizes, got {np.unique(n).tolist()}")
    if not max_rel_error > 0:
        raise ValueError(f"max_rel_error must be > 0, got {max_rel_error}")
    if not (isinstance(max_segments, int) and max_segments >= 1):
        raise ValueError(f"max_segments must be an int >= 1, got {max_segments!r}")
    order = np.argsort(n, kind="stable")
    return _fit_segments(n[order], t[order], max_rel_error, max_segments)


def _fit_segments(n, t, bound, max_segments):
    starts = np.flatnonzero(np.r_[True, n[1:] != n[:-1], True])  # (m + 1,) first point per size
    sums, alpha, beta, worst, sse = _runs(n, t, starts)
    usable = np.isfinite(beta) & np.triu(np.ones_like(beta, dtype=bool), 1)  # >= 2 sizes, grows
    plan = _plan(usable & (worst <= bound), sse)
    if plan is None or len(plan) > max_segments:
        plan = _smallest_bound(usable, worst, sse, bound, max_segments)
    return _model(n, t, starts, plan, sums, alpha, beta)


def _runs(n, t, starts):
    """Fit every run of distinct sizes i..j: entry [i, j] of (m, m) arrays of the sums (a 5-tuple
    of a*a, a*b, b*b, a, b with a = 1/t, b = n/t over its points), alpha, beta, the largest
    |relative residual| and the sum of squared ones. Entries with j <= i are meaningless."""
    a, b = 1 / t, n / t
    per_size = np.add.reduceat(np.stack([a * a, a * b, b * b, a, b]), starts[:-1], axis=1)
    m = per_size.shape[1]
    sums = np.zeros((5, m, m))
    for i in range(m):  # run sums from each start on: positive terms, no cancellation
        sums[:, i, i:] = np.cumsum(per_size[:, i:], axis=1)
    alpha, gamma = _bounded_line(*sums)
    free_alpha, free_gamma = _line(*sums)
    later = (np.arange(m) > 0)[:, None]  # runs that do not start at the smallest size
    alpha, gamma = np.where(later, free_alpha, alpha), np.where(later, free_gamma, gamma)
    with np.errstate(divide="ignore"):
        beta = 1 / gamma  # inf where the times do not grow
    worst, sse = np.full((m, m), np.inf), np.full((m, m), np.inf)
    ends = starts[1:]
    for i in range(m):  # the residuals as the model computes them, to the bit
        p = slice(starts[i], None)
        r = (alpha[i, i:, None] + n[p] / beta[i, i:, None]) / t[p] - 1
        inside = np.arange(starts[i], len(n)) < ends[i:, None]
        worst[i, i:] = np.max(np.where(inside, np.abs(r), 0), axis=1)
        sse[i, i:] = np.sum(np.where(inside, r * r, 0), axis=1)
    return sums, alpha, beta, worst, sse


def _bounded_line(saa, sab, sbb, sa, sb):
    """The least squares (alpha, gamma) >= 0 of ``alpha a_i + gamma b_i = 1`` from the sums of
    a*a, a*b, b*b, a, b (arrays, elementwise). Unit columns: the normal matrix is [[1, c], [c, 1]].
    When the free solution breaks a bound, the better of the two faces (alpha = 0 or gamma = 0),
    whose squared errors are ``points - rb**2`` and ``points - ra**2``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ra, rb, c = sa / np.sqrt(saa), sb / np.sqrt(sbb), sab / np.sqrt(saa * sbb)
        det = 1 - c * c
        x, y = (ra - c * rb) / det, (rb - c * ra) / det
        free = (det > 0) & (x >= 0) & (y >= 0)
        alpha_face = ra * ra > rb * rb  # gamma = 0 is the better face
        alpha = np.where(free, x / np.sqrt(saa), np.where(alpha_face, sa / saa, 0.0))
        gamma = np.where(free, y / np.sqrt(sbb), np.where(alpha_face, 0.0, sb / sbb))
    return alpha, gamma


def _line(saa, sab, sbb, sa, sb):
    """The least squares (alpha, gamma) of ``alpha a_i + gamma b_i = 1`` with alpha free in
    sign and gamma >= 0 (gamma = 0, times that do not grow, where the free gamma is not > 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ra, rb, c = sa / np.sqrt(saa), sb / np.sqrt(sbb), sab / np.sqrt(saa * sbb)
        det = 1 - c * c
        x, y = (ra - c * rb) / det, (rb - c * ra) / det
        grows = (det > 0) & (y > 0)
        alpha = np.where(grows, x / np.sqrt(saa), sa / saa)
        gamma = np.where(grows, y / np.sqrt(sbb), 0.0)
    return alpha, gamma


def _plan(usable, sse):
    """The runs [(i, j), ...] covering all m distinct sizes with the fewest runs, then the least
    total ``sse``, using only ``usable`` ones; None if there is no such cover."""
    usable, sse, m = usable.tolist(), sse.tolist(), len(usable)
    best = [(0, 0.0, -1)] + [None] * m  # best[j]: (runs, sse, start of last run) to cover 0..j-1
    for j in range(2, m + 1):
        for i in range(j - 1):
            if best[i] is not None and usable[i][j - 1]:
                score = (best[i][0] + 1, best[i][1] + sse[i][j - 1])
                if best[j] is None or score < best[j][:2]:
                    best[j] = (*score, i)
    if best[m] is None:
        return None
    plan, j = [], m
    while j > 0:
        plan.append((best[j][2], j - 1))
        j = best[j][2]
    return plan[::-1]


def _smallest_bound(usable, worst, sse, bound, max_segments):
    """The plan at the smallest bound above ``bound`` that ``max_segments`` runs can meet."""
    levels = np.unique(worst[usable & (worst > bound)])
    fits = [None] * len(levels)

    def meets(k):
        fits[k] = fits[k] or _plan(usable & (worst <= levels[k]), sse)
        return fits[k] is not None and len(fits[k]) <= max_segments

    if not len(levels) or not meets(len(levels) - 1):
        raise ValueError(
            f"no fit of at most {max_segments} segments has a positive bandwidth in "
            f"each: the times do not grow with message size"
        )
    lo, hi = 0, len(levels) - 1  # meets(hi) holds; find the first level that meets
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if meets(mid) else (mid + 1, hi)
    return fits[hi]


def _model(n, t, starts, plan, sums, alpha, beta):
    """The `PiecewiseCost` of the chosen runs, with boundaries, bridges, intervals and
    residuals."""
    lines = [(float(alpha[i, j]), float(beta[i, j])) for i, j in plan]
    parts = [slice(starts[i], starts[j + 1]) for i, j in plan]
    # each point by its own segment's line: what seconds() gives, the boundaries being between
    r = np.concatenate(
        [(a + n[part] / b) / t[part] - 1 for (a, b), part in zip(lines, parts, strict=True)]
    )
    intervals = [
        _intervals(*line, r[part], sums[:, i, j])
        for line, part, (i, j) in zip(lines, parts, plan, strict=True)
    ]
    worst = [float(np.max(np.abs(r[part]))) for part in parts]
    segments = [(float(n[0]), *lines[0], *intervals[0], worst[0])]  # (from, alpha, beta, ...)
    for k, ((_, j), (i, _)) in enumerate(itertools.pairwise(plan)):
        last, first = float(n[starts[j]]), float(n[starts[i]])
        start, bridge = _boundary(last, first, lines[k], lines[k + 1])
        if bridge is not None:
            segments.append((last, *bridge, _NAN_PAIR, _NAN_PAIR, math.nan))
        segments.append((start, *lines[k + 1], *intervals[k + 1], worst[k + 1]))
    columns = list(zip(*segments, strict=True))
    return PiecewiseCost(
        min_bytes=columns[0],
        max_bytes=(*columns[0][1:], float(n[-1])),
        latency_s=columns[1],
        bandwidth_Bps=columns[2],
        latency_ci_s=columns[3],
        bandwidth_ci_Bps=columns[4],
        max_rel_residual=columns[5],
        sizes=tuple(n.tolist()),
        times_s=tuple(t.tolist()),
        rel_residuals=tuple(r.tolist()),
    )


def _boundary(last, first, low, high):
    """(where the line ``high`` starts, the bridge before it or None) between the lines ``low``
    and ``high`` (alpha, beta) fitted up to size ``last`` and from size ``first`` on.

    Where the lines cross strictly between ``last`` and ``first``, there (no bridge: the model
    is continuous). Else a bridge from ``last`` to ``first``: the line through the two lines'
    times at those sizes, so that a size between two measured ones costs what lies between
    theirs. Without it the second line, extended down to a midpoint, can cost less than the
    size below (a quick calibration's Sendrecv, 2026-12-02: 14.1 us measured at 128 KiB, 38.2
    at 512 KiB, the line of 512 KiB-2 MiB, intercept -28 us, 4.9 us at 256 KiB). Times that do
    not grow there (no bridge has a bandwidth) keep the old rule: the geometric midpoint, or
    ``first`` if ``high``, whose intercept may be negative, is not > 0 there."""
    (a0, b0), (a1, b1) = low, high
    if b0 != b1 and last < (cross := (a1 - a0) / (1 / b0 - 1 / b1)) < first and a1 + cross / b1 > 0:
        return cross, None
    below, above = a0 + last / b0, a1 + first / b1
    if above > below > 0:
        slope = (above - below) / (first - last)  # seconds a byte
        return first, (below - slope * last, 1 / slope)
    middle = math.sqrt(last * first)
    return (middle if a1 + middle / b1 > 0 else first), None


def _intervals(alpha, beta, r, sums):
    """The ``CONFIDENCE`` intervals ((lo, hi) of alpha, (lo, hi) of beta) of one segment from its
    relative residuals ``r`` and sums (a*a, a*b, b*b, a, b); NaN with no degrees of freedom."""
    dof = len(r) - 2
    if dof < 1:
        return _NAN_PAIR, _NAN_PAIR
    from scipy.stats import t as student

    saa, sab, sbb = (float(x) for x in sums[:3])
    gamma = 1 / beta
    s2 = float(np.sum(r * r)) / dof
    det = 1 - sab * sab / (saa * sbb)  # of the unit-column normal matrix
    q = float(student.ppf(0.5 + CONFIDENCE / 2, dof))
    ha, hg = q * math.sqrt(s2 / (saa * det)), q * math.sqrt(s2 / (sbb * det))
    beta_hi = 1 / (gamma - hg) if gamma > hg else math.inf
    return (alpha - ha, alpha + ha), (1 / (gamma + hg), beta_hi)
