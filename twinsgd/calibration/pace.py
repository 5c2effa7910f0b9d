"""This machine's speed of the moment against its speed when it was calibrated: the factor that
turns seconds timed now into the calibration's seconds.

Why: the simulator times a node program's own code (the optimizer's update, the mixing of
weights, a codec's encoding) in its own process, beside gradients that come from the profile.
This machine (a 2-vCPU guest) runs at two speeds, 1.3-1.6x apart, switching every few seconds
whichever processes run (docs/validation.md, "Where it misses"): one simulation run again
minutes later came out 16-19 % apart (2026-12-01), its own code timed at a speed the
profile's gradients were not. A fixed reference kernel, timed at calibration (``[compute]
reference_s``) and now, tracks that speed: over 25 s of both, an Adam step's numpy took
825-1112 us (1.33x) and 4.69-4.99 times the reference's time.

    >>> probes = iter([3e-4, 4e-4]).__next__  # the reference now takes 0.3 ms, later 0.4
    >>> pace = Pace(2e-4, probe=probes, clock=iter([0.0, 0.1, 0.5]).__next__)
    >>> [round(pace(), 3) for _ in range(3)]  # probed at 0 s, kept at 0.1 s, probed at 0.5 s
    [0.667, 0.667, 0.5]
"""

from time import perf_counter

import numpy as np

PROBE_EVERY_S = 0.25  # wall seconds between probes: the speed holds for 0.5-5 s here
REPEATS = 5  # a probe's timings of the kernel, the fastest kept (an interrupt slows one)
_ARRAYS = []  # the reference kernel's operands, made on first use


def _reference_kernel():
    """About 0.2 ms of what own code does: small matrix products, elementwise numpy over a few
    thousand floats, a Python loop."""
    if not _ARRAYS:
        rng = np.random.default_rng(0)
        _ARRAYS.extend(
            (
                rng.random((64, 256), dtype=np.float32),
                rng.random((256, 64), dtype=np.float32),
                rng.random(20_000, dtype=np.float32),
            )
        )
    a, b, x = _ARRAYS
    total = 0.0
    for _ in range(4):
        total += float((a @ b).sum())
    y = x * 1.0001 + x
    return total + sum(range(2000)) + float(y[0])


def reference_seconds(repeats=REPEATS):
    """Seconds the reference kernel takes now: the fastest of ``repeats`` timings."""
    best = float("inf")
    for _ in range(repeats):
        t0 = perf_counter()
        _reference_kernel()
        best = min(best, perf_counter() - t0)
    return best


class Pace:
    """Calling it gives ``reference_s`` (the calibration's reference time) over the reference's
    time now: multiply seconds timed now by it to have them at the calibration's speed. It
    probes at most every ``every_s`` seconds of ``clock`` (a probe costs about 1 ms)."""

    def __init__(self, reference_s, every_s=PROBE_EVERY_S, probe=reference_seconds, clock=None):
        if not reference_s > 0:
            raise ValueError(f"the reference's seconds must be > 0, got {reference_s}")
        self.reference_s, self.every_s = float(reference_s), every_s
        self._probe, self._clock = probe, clock or perf_counter
        self._next, self.factor = -float("inf"), 1.0

    def __call__(self):
        now = self._clock()
        if now >= self._next:
            self.factor = self.reference_s / self._probe()
            self._next = now + self.every_s
        return self.factor
