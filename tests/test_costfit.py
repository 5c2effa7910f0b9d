"""calibration.costfit: piecewise alpha-beta fits against the models that made the data, measured
times, scipy's bounded least squares, and the profile round trip."""

import math
import tomllib

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.optimize import lsq_linear

from twinsgd.calibration.costfit import PiecewiseCost, fit_segments

SIZES = 2 ** np.arange(3, 24)  # 8 B .. 8 MiB, bytes

# One-way seconds of an MPI ping-pong (MPICH over TCP) between two network namespaces on veths
# shaped to 1 Gbit/s by tc tbf, and the time per exchange of a bidirectional Sendrecv there.
PING_PONG = ([8, 64 * 1024, 2**20, 8 * 2**20], [13.8e-6, 273e-6, 8451e-6, 73185e-6])
SENDRECV = (
    [8, 4096, 64 * 1024, 335_360, 2**20, 4 * 2**20],
    [24.5e-6, 53.8e-6, 548e-6, 2807e-6, 9398e-6, 36278e-6],
)


def tbf_like(n, burst=2**16):
    """Within the burst, 15 us + n at 1 GB/s; beyond it, 500 us + n at 125 MB/s (seconds)."""
    return np.where(n <= burst, 15e-6 + n / 1e9, 500e-6 + n / 125e6)


def assert_within(cost, nbytes, seconds, bound=0.05):
    """Every point's relative error is within ``bound``, by the residuals and by seconds()."""
    assert cost.max_rel_error <= bound
    assert np.all(np.abs(cost.seconds(np.asarray(nbytes)) / seconds - 1) <= bound)


# ---------------------------------------------------------------------------- known models
def test_a_tbf_like_link_with_noise_gives_back_its_two_segments():
    n = np.repeat(SIZES, 5)
    t = tbf_like(n) * np.random.default_rng(0).uniform(0.98, 1.02, n.size)  # 2 % noise
    cost = fit_segments(n, t)
    assert cost.fitted_segments == 2 and len(cost.latency_s) == 3  # and a bridge between them
    assert cost.latency_s[::2] == pytest.approx((15e-6, 500e-6), rel=0.03)
    assert cost.bandwidth_Bps[::2] == pytest.approx((1e9, 125e6), rel=0.03)
    # the lines do not cross between 64 and 128 KiB: a bridge from the one's time at 64 KiB to
    # the other's at 128 KiB, with no points of its own
    assert (cost.min_bytes[1], cost.max_bytes[1]) == (2**16, 2**17)
    assert np.isnan(cost.max_rel_residual[1]) and np.isnan(cost.latency_ci_s[1]).all()
    ends = [cost.latency_s[k] + x / cost.bandwidth_Bps[k] for k, x in ((0, 2**16), (2, 2**17))]
    assert cost.seconds(2**16) == pytest.approx(ends[0], rel=1e-12)
    assert cost.seconds(2**17 * (1 - 1e-12)) == pytest.approx(ends[1], rel=1e-9)
    assert cost.seconds(1.5 * 2**16) == pytest.approx(sum(ends) / 2, rel=1e-12)
    assert_within(cost, n, t)
    assert cost.max_rel_error == pytest.approx(max(cost.max_rel_residual))


@pytest.mark.parametrize(("alpha_s", "beta_Bps"), [(2e-6, 5e9), (0.3e-6, 25e9), (50e-6, 1.25e8)])
def test_exactly_linear_times_give_one_segment_with_their_alpha_and_beta(alpha_s, beta_Bps):
    cost = fit_segments(SIZES, alpha_s + SIZES / beta_Bps)
    assert len(cost.latency_s) == 1
    assert cost.latency_s[0] == pytest.approx(alpha_s, rel=1e-6)
    assert cost.bandwidth_Bps[0] == pytest.approx(beta_Bps, rel=1e-6)
    assert (cost.min_bytes, cost.max_bytes) == ((8.0,), (2.0**23,))
    assert cost.max_rel_error < 1e-12
    ((lo, hi),) = cost.latency_ci_s  # no noise: the interval closes on the value
    assert lo == pytest.approx(alpha_s, rel=1e-6) and hi == pytest.approx(alpha_s, rel=1e-6)


def test_lines_that_cross_between_two_sizes_meet_at_the_crossing():
    """Small messages at 1 GB/s after 5 us, large ones at 4 GB/s after 20 us (a protocol switch):
    the lines cross at 20,000 B, between 16 and 32 KiB, and the model is continuous there."""
    small, large = 5e-6 + SIZES / 1e9, 20e-6 + SIZES / 4e9
    cost = fit_segments(SIZES, np.minimum(small, large))
    assert cost.fitted_segments == 2
    assert cost.max_bytes[0] == pytest.approx(20_000, rel=1e-9)
    below, above = cost.seconds(cost.max_bytes[0] * (1 - 1e-12)), cost.seconds(cost.max_bytes[0])
    assert below == pytest.approx(above, rel=1e-9) and above == pytest.approx(25e-6, rel=1e-9)


def test_sizes_beyond_the_measured_ones_extrapolate_the_end_segments():
    cost = fit_segments(SIZES, tbf_like(SIZES))
    assert cost.seconds(1) == pytest.approx(15e-6 + 1 / 1e9)
    assert cost.seconds(2**30) == pytest.approx(500e-6 + 2**30 / 125e6)
    assert (cost.alpha_s(0), cost.beta_Bps(2**30)) == (cost.latency_s[0], cost.bandwidth_Bps[-1])


def test_a_bound_out_of_reach_returns_the_smallest_worst_error_not_an_exception():
    cost = fit_segments(SIZES, tbf_like(SIZES), max_segments=1)
    assert len(cost.latency_s) == 1 and cost.max_rel_error > 0.3
    loose = fit_segments(SIZES, tbf_like(SIZES), max_rel_error=cost.max_rel_error * 1.001)
    assert len(loose.latency_s) == 1 and loose.max_rel_error == cost.max_rel_error


# ---------------------------------------------------------------------------- measured times
def test_the_measured_ping_pong_is_two_segments_within_5_percent():
    cost = fit_segments(*PING_PONG)
    assert cost.fitted_segments == 2
    # beyond the bucket's burst the line's intercept is negative: c - B / r
    assert cost.latency_s == pytest.approx((13.77e-6, -796.71e-6), abs=0.01e-6)
    assert cost.bandwidth_Bps == pytest.approx((252.8e6, 113.39e6), rel=1e-3)
    assert cost.max_rel_residual == pytest.approx((0.0, 0.0), abs=1e-9)
    assert cost.max_bytes[0] == pytest.approx(166_637.5, rel=1e-6)  # where the lines cross
    assert np.isnan(cost.latency_ci_s).all()  # 2 points a segment: no degrees of freedom
    assert_within(cost, *PING_PONG)
    one_line = fit_segments(*PING_PONG, max_segments=1)  # what one Hockney line does
    assert one_line.max_rel_error == pytest.approx(0.379, abs=1e-3)


def test_the_measured_sendrecv_is_two_segments_within_5_percent():
    cost = fit_segments(*SENDRECV)
    assert cost.fitted_segments == 2
    assert cost.max_rel_residual == pytest.approx((0.0, 0.0326), abs=1e-4)
    assert cost.bandwidth_Bps == pytest.approx((139.5e6, 115.0e6), rel=1e-3)
    lo, hi = cost.bandwidth_ci_Bps[1]  # 4 points: 2 degrees of freedom
    assert lo < cost.bandwidth_Bps[1] < hi
    assert_within(cost, *SENDRECV)


# ---------------------------------------------------------------------------- properties
@st.composite
def piecewise_models(draw):
    """(k, segment index of each of SIZES, alphas s, betas B/s): 1-3 segments of >= 2 sizes."""
    k = draw(st.integers(1, 3))
    cuts = [0]
    for left in range(k - 1, 0, -1):  # room for `left` more segments of 2 sizes after this one
        cuts.append(draw(st.integers(cuts[-1] + 2, len(SIZES) - 2 * left)))
    segment = np.searchsorted(cuts, np.arange(len(SIZES)), side="right") - 1
    alphas = [10 ** draw(st.floats(-6, -3)) for _ in range(k)]
    betas = [10 ** draw(st.floats(7, 11)) for _ in range(k)]
    return k, segment, np.array(alphas), np.array(betas)


@settings(max_examples=80, deadline=None)
@given(model=piecewise_models())
def test_random_piecewise_lines_are_fitted_within_5_percent(model):
    k, segment, alphas, betas = model
    t = alphas[segment] + SIZES / betas[segment]
    cost = fit_segments(SIZES, t)
    assert cost.fitted_segments <= k
    assert_within(cost, SIZES, t)
    if np.all(np.diff(t) > 0):  # times that grow with size: so does the model between them
        between = np.geomspace(SIZES[0], SIZES[-1], 400)
        assert np.all(np.diff(cost.seconds(between)) >= 0)


def test_the_95_percent_intervals_hold_the_true_alpha_and_beta_in_most_noisy_runs():
    n = np.repeat(SIZES, 3)
    alpha_s, beta_Bps, hits = 20e-6, 1e9, np.zeros(2)
    for seed in range(50):
        t = (alpha_s + n / beta_Bps) * np.random.default_rng(seed).normal(1, 0.01, n.size)
        cost = fit_segments(n, t)
        assert len(cost.latency_s) == 1
        ((a_lo, a_hi),) = cost.latency_ci_s
        ((b_lo, b_hi),) = cost.bandwidth_ci_Bps
        hits += [a_lo <= alpha_s <= a_hi, b_lo <= beta_Bps <= b_hi]
    assert np.all(hits >= 0.8 * 50), hits


@settings(max_examples=60, deadline=None)
@given(
    exponents=st.lists(st.floats(1, 24), min_size=3, max_size=12),
    slope=st.floats(-1, 1),
    seed=st.integers(0, 2**16),
)
@example(exponents=[3, 6, 10, 16, 20], slope=-1, seed=1)  # alpha = 0
@example(exponents=[3, 6, 10, 16, 20], slope=1, seed=1)  # 1/beta = 0
def test_the_one_segment_fit_is_scipys_bounded_least_squares(exponents, slope, seed):
    """The closed form agrees with lsq_linear's, bounds binding or not (times that fall with size
    at first push alpha or 1/beta against 0)."""
    n = np.unique(np.round(2.0 ** np.array(exponents)))
    if len(n) < 3:
        return
    noise = np.random.default_rng(seed).uniform(0.8, 1.2, n.size)
    t = (1e-5 + n / 1e9) * (n / n[0]) ** -slope * noise
    A = np.column_stack([1 / t, n / t])
    scale = np.linalg.norm(A, axis=0)
    oracle = lsq_linear(A / scale, np.ones_like(t), bounds=(0, np.inf), method="bvls").x / scale
    if oracle[1] == 0:  # 1/beta at its bound: no bandwidth fits
        with pytest.raises(ValueError, match="do not grow"):
            fit_segments(n, t, max_segments=1)
        return
    cost = fit_segments(n, t, max_rel_error=10.0, max_segments=1)
    fitted = np.array([cost.latency_s[0], 1 / cost.bandwidth_Bps[0]])
    np.testing.assert_allclose(fitted * scale, oracle * scale, atol=1e-7)


# ---------------------------------------------------------------------------- evaluation
@settings(max_examples=50, deadline=None)
@given(sizes=st.lists(st.one_of(st.integers(0, 2**30), st.floats(0, 2.0**30)), max_size=20))
def test_the_vectorised_path_equals_the_scalar_one(sizes):
    cost = fit_segments(SIZES, tbf_like(SIZES))
    sizes = [*sizes, *cost.min_bytes, *cost.max_bytes]  # the boundaries themselves, too
    for method in (cost.seconds, cost.alpha_s, cost.beta_Bps):
        assert method(np.array(sizes, dtype=float)).tolist() == [method(x) for x in sizes]


def test_a_constant_model_is_the_old_alpha_beta_formula_to_the_bit():
    cost = PiecewiseCost.constant(1.5e-6, 12e9)
    n = [0, 1, 8, 1000, 2**20, 10**12]
    assert [cost.seconds(x) for x in n] == [1.5e-6 + x / 12e9 for x in n]
    assert cost.seconds(np.array(n)).tolist() == [1.5e-6 + x / 12e9 for x in n]
    assert np.isnan(cost.max_rel_error)
    with pytest.raises(ValueError, match="beta_Bps must be"):
        PiecewiseCost.constant(1e-6, 0.0)
    with pytest.raises(ValueError, match="alpha_s must be"):
        PiecewiseCost.constant(-1e-6, 1e9)


# ---------------------------------------------------------------------------- the profile
def toml_text(table):
    """A TOML table of numbers and lists of them, floats written with repr (exact)."""

    def value(x):
        return f"[{', '.join(value(y) for y in x)}]" if isinstance(x, list) else repr(x)

    return "\n".join(f"{key} = {value(x)}" for key, x in table.items())


@pytest.mark.parametrize(
    "cost",
    [
        fit_segments(*SENDRECV),
        fit_segments(SIZES, tbf_like(SIZES)),
        PiecewiseCost.constant(2e-6, 5e9),
    ],
)
def test_a_model_survives_a_trip_through_a_toml_table(cost):
    table = tomllib.loads(toml_text(cost.to_dict()))
    back = PiecewiseCost.from_dict(table)
    for key in ("min_bytes", "max_bytes", "latency_s", "bandwidth_Bps"):
        assert getattr(back, key) == getattr(cost, key)
    np.testing.assert_equal(back.to_dict(), cost.to_dict())  # NaN equals NaN here
    assert back.seconds(12345) == cost.seconds(12345)


def good_table():
    return PiecewiseCost.constant(2e-6, 5e9).to_dict() | {
        "min_bytes": [8.0, 1000.0],
        "max_bytes": [1000.0, 2e6],
        "latency_s": [2e-6, 5e-6],
        "bandwidth_Bps": [5e9, 1e9],
        "latency_ci_s": [[1e-6, 3e-6], [4e-6, 6e-6]],
        "bandwidth_ci_Bps": [[4e9, 6e9], [0.9e9, 1.1e9]],
        "max_rel_residual": [0.01, 0.02],
        "sizes": [8, 64, 4096, 2**20],
        "seconds": [2e-6, 2e-6, 9e-6, 1e-3],
        "rel_residuals": [0.0, 0.01, -0.02, 0.0],
    }


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"latency_s": None}, "'latency_s' is missing"),
        ({"latency": [1e-6]}, "unknown key 'latency'"),
        ({"latency_s": [-2e-6, 1e-6]}, "'latency_s' must be finite and the first >= 0"),
        ({"latency_s": [2e-6, -1e-3]}, "time must be > 0 where it starts"),
        ({"latency_s": "2us"}, "'latency_s' must be a list of numbers"),
        ({"bandwidth_Bps": [5e9, 0.0]}, "'bandwidth_Bps' must be finite and > 0"),
        ({"bandwidth_Bps": [5e9]}, "'bandwidth_Bps' must have 2 entries"),
        ({"min_bytes": [8.0, -1.0]}, "'min_bytes' must be finite"),
        ({"max_bytes": [900.0, 2e6]}, "'max_bytes' must equal the next"),
        ({"max_bytes": [1000.0, 10.0]}, "'max_bytes' must exceed"),
        ({"latency_ci_s": [1e-6, 3e-6]}, "'latency_ci_s' must be a list of \\[lo, hi\\] pairs"),
        ({"max_rel_residual": [0.01]}, "'max_rel_residual' must have 2 entries"),
        ({"sizes": [8, 64, 0, 2**20]}, "'sizes' entry must be finite and > 0"),
        ({"seconds": [2e-6, 2e-6]}, "'seconds' must have 4 entries"),
    ],
)
def test_a_bad_table_is_refused_naming_its_key(change, key):
    table = {k: v for k, v in (good_table() | change).items() if v is not None}
    PiecewiseCost.from_dict(good_table())  # the table itself is fine
    with pytest.raises(ValueError, match=key):
        PiecewiseCost.from_dict(table)


def test_a_table_with_only_the_model_keys_is_enough():
    cost = PiecewiseCost.from_dict(
        {"min_bytes": [0], "max_bytes": [math.inf], "latency_s": [2e-6], "bandwidth_Bps": [5e9]}
    )
    assert cost.seconds(1000) == PiecewiseCost.constant(2e-6, 5e9).seconds(1000)
    assert cost.sizes == () and np.isnan(cost.latency_ci_s).all()


@pytest.mark.parametrize(
    ("nbytes", "seconds", "kwargs", "rule"),
    [
        ([8, 8, 8], [1e-6] * 3, {}, "2 distinct"),
        ([8, 1024], [1e-6], {}, "one length"),
        ([8, 1024], [1e-6, -1.0], {}, "times must be"),
        ([0, 1024], [1e-6, 2e-6], {}, "sizes must be"),
        ([8, 1024], [1e-6, 2e-6], {"max_rel_error": 0}, "max_rel_error must be > 0"),
        ([8, 1024], [1e-6, 2e-6], {"max_segments": 0}, "max_segments must be"),
        ([8, 1024, 2**20], [3e-3, 2e-3, 1e-3], {}, "do not grow"),
    ],
)
def test_fit_refuses_bad_input(nbytes, seconds, kwargs, rule):
    with pytest.raises(ValueError, match=rule):
        fit_segments(nbytes, seconds, **kwargs)


def test_a_negative_intercept_never_makes_a_segment_start_below_zero():
    """A steep second line whose intercept is far below zero: it starts at the first size it was
    fitted to, where its time is positive, a bridge before it, and the model round-trips."""
    n = np.array([8.0, 64, 512, 4096, 2**18, 2**21, 2**23])
    t = np.where(n <= 4096, 10e-6 + n / 1e7, -1e-3 + n / 1e8)  # below the first line, no cross
    cost = fit_segments(n, t)
    assert cost.fitted_segments == 2 and cost.latency_s[-1] < 0
    assert cost.min_bytes[1:] == (4096, 2**18)  # the midpoint, 32 KiB, would be below zero
    assert np.all(np.diff(cost.seconds(np.geomspace(8, 2**23, 200))) > 0)  # and no drop
    for k, (lo, a, b) in enumerate(
        zip(cost.min_bytes, cost.latency_s, cost.bandwidth_Bps, strict=True)
    ):
        assert a + lo / b > 0, k
    assert PiecewiseCost.from_dict(cost.to_dict()).seconds(2**21) == cost.seconds(2**21)
