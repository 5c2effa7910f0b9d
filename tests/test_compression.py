"""Gradient codecs: what each keeps, its bytes on the wire against the formula, error feedback."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from twinsgd.programs.compression import (
    CODECS,
    HEADER_NBYTES,
    ErrorFeedback,
    Message,
    base,
    make_codec,
    qsgd,
)
from twinsgd.programs.compression.wire import from_wire, to_wire

EPS32 = float(np.finfo(np.float32).eps)  # 2**-23
SPECS = [
    "none",
    "threshold:0.5",
    "topk:0.1",
    "randomk:0.1",
    "qsgd:1",
    "qsgd:16",
    "qsgd:300",
    "sign",
    "fp16",
]


def gradients(max_n=300, max_abs=1e4):
    """(n,) float32 arrays, 1 <= n <= max_n (ties, zeros and subnormals included)."""
    elements = st.floats(-max_abs, max_abs, width=32)
    return st.integers(1, max_n).flatmap(lambda n: arrays(np.float32, n, elements=elements))


fractions = st.floats(0, 1, exclude_min=True) | st.just(1.0)


def index_width(n):
    """Bytes per index, written out independently of the code under test."""
    return 1 if n <= 256 else 2 if n <= 65536 else 4


def expected_nbytes(codec_spec, g):
    """Bytes on the wire by the formulas in the docstrings."""
    n = len(g)
    name, _, param = codec_spec.partition(":")
    if name == "none":
        return 4 * n
    if name == "fp16":
        return 12 + 2 * n
    if name == "sign":
        return 12 + 4 + math.ceil(n / 8)
    if name == "qsgd":
        bits = 1 + math.ceil(math.log2(int(param) + 1))  # a sign and a level 0..s
        return 12 + 4 + math.ceil(n * bits / 8)
    if name == "threshold":
        k = int(np.sum(np.abs(g.astype(np.float64)) > float(param)))
    else:
        k = max(1, round(float(param) * n))
    return 12 + k * (4 + index_width(n))


def encode(codec, g, seed=0):
    return codec.encode(g, rng=np.random.default_rng(seed))


# --- what each codec keeps ---------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(g=gradients(), threshold=st.floats(1e-3, 1e3))
def test_threshold_keeps_exactly_the_entries_above_t(g, threshold):
    msg = make_codec(f"threshold:{threshold!r}").encode(g)
    kept = np.abs(g.astype(np.float64)) > threshold  # against the real number T
    np.testing.assert_array_equal(msg.indices, np.flatnonzero(kept))
    assert msg.indices.dtype == base.index_dtype(len(g)) and msg.values.dtype == np.float32
    np.testing.assert_array_equal(make_codec("threshold:1").decode(msg), np.where(kept, g, 0))


def test_threshold_compares_with_the_real_number_not_its_float32_rounding():
    g = np.array([0.1, -0.1, 0.09999999], np.float32)  # float32(0.1) = 0.10000000149...
    assert make_codec("threshold:0.1").encode(g).indices.tolist() == [0, 1]
    assert make_codec("threshold:0.10000000149011612").encode(g).indices.tolist() == []
    assert make_codec("threshold:1e300").encode(g).nbytes == HEADER_NBYTES


@settings(max_examples=100, deadline=None)
@given(g=gradients(), fraction=fractions)
def test_topk_keeps_k_entries_of_largest_magnitude(g, fraction):
    n = len(g)
    k = max(1, round(fraction * n))
    msg = make_codec(f"topk:{fraction!r}").encode(g)
    assert len(msg.indices) == k and np.all(np.diff(msg.indices.astype(np.int64)) > 0)
    kept = np.zeros(n, bool)
    kept[msg.indices] = True
    magnitude = np.abs(g)
    if k < n:  # a valid top-k set, whichever ties it took
        assert magnitude[kept].min() >= magnitude[~kept].max()
    np.testing.assert_array_equal(make_codec("topk:1").decode(msg), np.where(kept, g, 0))


def test_topk_with_ties_keeps_k_of_the_tied_entries():
    g = np.array([1, -2, 2, 2, 0, -2, 2], np.float32)
    msg = make_codec("topk:0.43").encode(g)  # k = 3
    assert len(set(msg.indices.tolist()) & {1, 2, 3, 5, 6}) == 3
    np.testing.assert_array_equal(msg.values, g[msg.indices])
    msg = make_codec("topk:0.1").encode(np.ones(20, np.float32))
    assert len(np.unique(msg.indices)) == 2 and msg.values.tolist() == [1, 1]


@settings(max_examples=100, deadline=None)
@given(g=gradients(), fraction=fractions, seed=st.integers(0, 2**32))
def test_randomk_sends_k_distinct_entries_scaled_by_n_over_k(g, fraction, seed):
    n = len(g)
    k = max(1, round(fraction * n))
    msg = encode(make_codec(f"randomk:{fraction!r}"), g, seed)
    idx = msg.indices.astype(np.int64)
    assert len(idx) == k and np.all(np.diff(idx) > 0) and idx[0] >= 0 and idx[-1] < n
    np.testing.assert_array_equal(msg.values, g[idx] * np.float32(n / k))
    expected = np.zeros(n, np.float32)
    expected[idx] = msg.values
    np.testing.assert_array_equal(make_codec("randomk:1").decode(msg), expected)


def test_randomk_draws_every_index_with_probability_k_over_n():
    codec, n, draws = make_codec("randomk:0.3"), 10, 4000
    rng = np.random.default_rng(7)
    counts = np.zeros(n)
    for _ in range(draws):
        counts[codec.encode(np.ones(n, np.float32), rng=rng).indices] += 1
    p = 3 / n  # Binomial(draws, p) per index: 5 sigma = 145
    assert np.all(np.abs(counts - draws * p) <= 5 * math.sqrt(draws * p * (1 - p)))


@settings(max_examples=100, deadline=None)
@given(g=gradients(max_abs=1e5))
def test_fp16_is_round_to_nearest_within_half_an_ulp(g):
    msg = make_codec("fp16").encode(g)
    assert msg.values.dtype == np.float16
    decoded = make_codec("fp16").decode(msg)
    clipped = np.clip(g, -65504, 65504)
    # numpy's float32 -> float16 cast is the oracle (ours is a vectorised reimplementation).
    np.testing.assert_array_equal(
        msg.values.view(np.uint16), clipped.astype(np.float16).view(np.uint16)
    )
    # |error| <= 2**-11 |g| in float16's normal range, <= 2**-25 (half a subnormal step) below.
    assert np.all(np.abs(decoded - clipped) <= 2.0**-11 * np.abs(clipped) + 2.0**-25)


def test_fp16_matches_numpys_cast_bit_for_bit_on_random_bit_patterns():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 2**32, 2_000_000, dtype=np.uint32).view(np.float32)
    x = x[np.abs(x) <= 65504]
    edges = [
        65504,
        65505,
        65519.996,
        65520,
        1e30,
        -np.inf,
        np.inf,
        2.0**-24,
        2.0**-25,
        3 * 2.0**-26,
        2.0**-14,
        2.0**-14 - 2.0**-25,
        1e-45,
        -0.0,
        0.0,
        1 + 2.0**-11,
    ]
    x = np.concatenate([x, np.array(edges, np.float32), -np.array(edges, np.float32)])
    values = make_codec("fp16").encode(x).values
    expected = np.clip(x, -65504, 65504).astype(np.float16)
    np.testing.assert_array_equal(values.view(np.uint16), expected.view(np.uint16))
    nan = make_codec("fp16").encode(np.array([1, np.nan], np.float32)).values
    assert nan[0] == 1 and np.isnan(nan[1])


@settings(max_examples=100, deadline=None)
@given(g=gradients())
def test_sign_decodes_to_mean_magnitude_times_sign(g):
    msg = make_codec("sign").encode(g)
    scale = np.float32(np.abs(g.astype(np.float64)).mean())
    np.testing.assert_allclose(msg.scale, scale, rtol=2 * EPS32, atol=1e-45)
    assert msg.bits.dtype == np.uint8 and len(msg.bits) == math.ceil(len(g) / 8)
    expected = np.where(g < 0, -np.float32(msg.scale), np.float32(msg.scale))  # sign(0) = +1
    np.testing.assert_array_equal(make_codec("sign").decode(msg), expected)


def qsgd_levels(decoded, scale, s):
    """l_i = |d_i| s / scale, and how far it is from the nearest integer."""
    levels = np.abs(decoded.astype(np.float64)) * s / scale
    return np.rint(levels), np.abs(levels - np.rint(levels))


@settings(max_examples=12, deadline=None)
@given(
    g=gradients(max_n=40, max_abs=1e3).filter(lambda g: np.any(g)), s=st.sampled_from([1, 2, 5, 16])
)
def test_qsgd_is_unbiased_and_on_its_grid(g, s):
    codec, draws, rng = make_codec(f"qsgd:{s}"), 2000, np.random.default_rng(0)
    decoded = np.array([codec.decode(codec.encode(g, rng=rng)) for _ in range(draws)])
    norm = np.linalg.norm(g.astype(np.float64))
    assert encode(codec, g).scale == pytest.approx(norm, rel=1e-6)
    levels, off_grid = qsgd_levels(decoded, np.float32(norm), s)
    assert np.all(off_grid <= 1e-4) and levels.max() <= s
    assert np.all((decoded == 0) | (np.sign(decoded) == np.sign(g)))
    # Each decoded entry lies in one step [l, l+1] norm/s: by Hoeffding, the mean of 2000 draws
    # is within 6 (norm/s) / (2 sqrt(2000)) of g_i but with probability <= 2 exp(-18) = 3e-8.
    tolerance = 6 * (norm / s) / (2 * math.sqrt(draws)) + 1e-6 * norm
    assert np.all(np.abs(decoded.mean(axis=0) - g) <= tolerance)
    # QSGD's variance bound (Alistarh et al., Lemma 3.1), with 20% for sampling error.
    variance = np.mean(np.sum((decoded - g) ** 2, axis=1))
    assert variance <= 1.2 * qsgd.variance_bound(len(g), s) * norm**2 + 1e-6 * norm**2


def reference_qsgd_bits(decoded, g, scale, s):
    """The documented wire layout, by loops: bit j of code 2 l_i + [g_i < 0] at bit j n + i."""
    n, b = len(g), 1 + s.bit_length()
    levels, _ = qsgd_levels(decoded, scale, s)
    stream = [0] * (b * n)
    for i in range(n):
        code = 2 * int(levels[i]) + int(g[i] < 0)
        for j in range(b):
            stream[j * n + i] = (code >> j) & 1
    stream += [0] * (-len(stream) % 8)
    return bytes(int("".join(map(str, stream[p : p + 8])), 2) for p in range(0, len(stream), 8))


@pytest.mark.parametrize("s", [1, 3, 16, 127, 255, 300])
@pytest.mark.parametrize("n", [1, 7, 8, 13])
def test_qsgd_bits_follow_the_documented_layout(s, n):
    g = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    codec = make_codec(f"qsgd:{s}")
    msg = encode(codec, g)
    decoded = codec.decode(msg)
    assert msg.levels == s and msg.bits.tobytes() == reference_qsgd_bits(decoded, g, msg.scale, s)


def test_qsgd_extremes():
    codec = make_codec("qsgd:16")
    for g in (np.zeros(9, np.float32), np.full(9, -0.0, np.float32)):
        assert not np.any(codec.decode(encode(codec, g)))
    one_hot = np.zeros(9, np.float32)
    one_hot[4] = -3
    np.testing.assert_array_equal(codec.decode(encode(codec, one_hot)), one_hot)  # level s
    for scale in (1e-30, 1e-36, 1e25):  # float32 squares underflow or overflow: float64 norm
        g = np.array([3, -4, 0], np.float32) * np.float32(scale)
        msg = encode(codec, g)
        assert msg.scale == pytest.approx(5 * float(np.float32(scale)), rel=1e-6)
        levels, off_grid = qsgd_levels(codec.decode(msg), msg.scale, 16)
        assert np.all(off_grid <= 1e-3) and levels.max() <= 16


# --- bytes on the wire -------------------------------------------------------------------------

SIZES = [1, 2, 7, 8, 9, 255, 256, 257, 1000, 65535, 65536, 65537, 100_003]


@pytest.mark.parametrize(
    "codec_spec",
    [
        "none",
        "threshold:1.5",
        "topk:0.01",
        "topk:0.5",
        "randomk:0.01",
        "qsgd:1",
        "qsgd:7",
        "qsgd:8",
        "qsgd:16",
        "qsgd:255",
        "qsgd:256",
        "sign",
        "fp16",
    ],
)
def test_nbytes_is_the_stated_formula(codec_spec):
    codec = make_codec(codec_spec)
    for n in SIZES:
        g = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        msg = encode(codec, g)
        assert msg.nbytes == expected_nbytes(codec_spec, g), n
        assert codec.nbytes(n) == (None if codec.name == "threshold" else msg.nbytes)
        if msg.indices is not None:
            assert msg.indices.itemsize == index_width(n) and msg.values.dtype == np.float32


def test_index_width_switches_at_256_and_65536():
    codec = make_codec("topk:0.5")
    assert [codec.nbytes(n) for n in (256, 257, 65536, 65537)] == [
        12 + 128 * 5,
        12 + 128 * 6,
        12 + 32768 * 6,
        12 + 32768 * 8,
    ]


WIRE_SPECS = [spec for spec in SPECS if spec != "none"]  # none travels as its float32 array


@settings(max_examples=60, deadline=None)
@given(g=gradients(), codec_spec=st.sampled_from(WIRE_SPECS), seed=st.integers(0, 2**32))
def test_the_wire_bytes_are_nbytes_and_decode_to_the_same_bits(g, codec_spec, seed):
    codec = make_codec(codec_spec)
    msg = encode(codec, g, seed)
    wire = to_wire(msg)
    assert wire.dtype == np.uint8 and len(wire) == msg.nbytes == expected_nbytes(codec_spec, g)
    back = from_wire(wire)
    fields = ("codec", "n", "count", "levels", "scale")
    assert [getattr(back, f) for f in fields] == [getattr(msg, f) for f in fields]
    assert codec.decode(back).tobytes() == codec.decode(msg).tobytes()


@pytest.mark.parametrize("codec_spec", WIRE_SPECS)
def test_the_wire_header_is_the_documented_layout(codec_spec):
    """Byte 0 the codec's index in CODECS, bytes 1-3 the parameter (qsgd's levels), then n and
    the count as little-endian uint32; at 2**20 + 3 entries (4-byte indices)."""
    n = 2**20 + 3
    g = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    msg = encode(make_codec(codec_spec), g)
    wire = to_wire(msg).tobytes()
    assert wire[0] == CODECS.index(codec_spec.partition(":")[0])
    assert int.from_bytes(wire[1:4], "little") == msg.levels
    assert int.from_bytes(wire[4:8], "little") == n
    assert int.from_bytes(wire[8:12], "little") == msg.count
    if msg.indices is not None:  # the values, then the indices
        k = msg.count
        assert wire[12 : 12 + 4 * k] == msg.values.astype("<f4").tobytes()
        assert wire[12 + 4 * k :] == msg.indices.astype("<u4").tobytes()


def test_bad_wire_bytes_are_refused_in_one_line():
    msg = encode(make_codec("topk:0.5"), np.arange(1, 9, dtype=np.float32))
    wire = to_wire(msg)
    for bad, why in [
        (wire[:5], "header"),
        (wire[:-1], "is 32 bytes, got 31"),
        (np.concatenate([wire, [0]]).astype(np.uint8), "is 32 bytes, got 33"),
        (np.concatenate([[99], wire[1:]]).astype(np.uint8), "unknown codec id 99"),
        (np.concatenate([[0], wire[1:]]).astype(np.uint8), "unknown codec id 0"),
    ]:
        with pytest.raises(ValueError, match=why):
            from_wire(bad)
    with pytest.raises(ValueError, match="no wire form"):
        to_wire(make_codec("none").encode(np.ones(3, np.float32)))


def test_message_is_frozen_and_owns_its_arrays():
    g = np.arange(1, 10, dtype=np.float32)
    codec = make_codec("none")
    msg = codec.encode(g)
    g[0] = 100
    assert msg.values[0] == 1
    with pytest.raises(AttributeError):
        msg.n = 3
    assert isinstance(msg, Message) and msg.count == 9


# --- decode, add_into ------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(g=gradients(), codec_spec=st.sampled_from(SPECS), seed=st.integers(0, 2**32))
def test_add_into_equals_adding_the_decoded_vector(g, codec_spec, seed):
    codec = make_codec(codec_spec)
    msg = encode(codec, g, seed)
    acc = np.random.default_rng(seed).standard_normal(len(g)).astype(np.float32)
    expected = acc + codec.decode(msg)
    assert codec.add_into(msg, acc) is None
    np.testing.assert_array_equal(acc, expected)
    out = np.full(len(g), np.nan, np.float32)  # decode(out=) overwrites what was there
    assert codec.decode(msg, out=out) is out
    np.testing.assert_array_equal(out, codec.decode(msg))


# --- error feedback ----------------------------------------------------------------------------


@pytest.mark.parametrize("codec_spec", [*SPECS, "topk:0.01", "randomk:0.01", "qsgd:4"])
def test_error_feedback_delays_but_never_loses(codec_spec):
    n, steps = 1003, 150
    rng = np.random.default_rng(1)
    ef, receiver = ErrorFeedback(make_codec(codec_spec), n), make_codec(codec_spec)
    sent, total, bound = np.zeros(n), np.zeros(n), np.full(n, 1e-37)
    norms = []
    for t in range(steps):
        g = (rng.standard_normal(n) * (1 + t % 7)).astype(np.float32)
        compensated = (g + ef.residual).astype(np.float64)
        msg = ef.encode(g, rng=rng)
        sent += receiver.decode(msg)  # decoded by another rank's codec
        total += g
        # Two float32 roundings per step: c = g + e and e = c - d, half an ulp each.
        bound += EPS32 / 2 * (np.abs(compensated) + np.abs(ef.residual))
        norms.append((np.linalg.norm(g), np.linalg.norm(ef.residual)))
    assert np.all(np.abs(sent + ef.residual - total) <= bound)
    # The residual stays bounded, ||e|| <~ 2 G / delta for a delta-contraction (in expectation
    # for randomk and qsgd, whose scaled, unbiased forms would grow it ~sqrt(omega) per step).
    g_max, e_max = np.max(norms, axis=0)
    name, _, param = codec_spec.partition(":")
    if name == "threshold":
        assert np.abs(ef.residual).max() <= float(param)  # what is left is below T
        return
    delta = 1.0  # none, fp16
    if name in ("topk", "randomk"):
        delta = max(1, round(float(param) * n)) / n
    elif name == "sign":
        delta = 1 / n  # ||x||_1^2 / (n ||x||^2) >= 1/n
    elif name == "qsgd":
        delta = 1 / (1 + qsgd.variance_bound(n, int(param)))
    assert e_max <= 2 * g_max / delta


def test_error_feedback_sends_the_contractive_variant_of_unbiased_codecs():
    g = np.random.default_rng(0).standard_normal(100).astype(np.float32)
    ef = ErrorFeedback(make_codec("randomk:0.1"), 100)
    msg = ef.encode(g, rng=np.random.default_rng(0))
    np.testing.assert_array_equal(msg.values, g[msg.indices])  # no n/k scale
    ef = ErrorFeedback(make_codec("qsgd:4"), 100)
    msg = ef.encode(g, rng=np.random.default_rng(0))
    omega = min(100 / 16, 10 / 4)
    assert msg.scale == pytest.approx(np.linalg.norm(g) / (1 + omega), rel=1e-6)
    ef = ErrorFeedback(make_codec("topk:0.1"), 100)
    first = ef.encode(g)
    np.testing.assert_array_equal(first.values, g[first.indices])
    np.testing.assert_array_equal(ef.residual[first.indices], 0)


# --- specs and argument errors -----------------------------------------------------------------


def test_specs_round_trip():
    assert CODECS == ("none", "threshold", "topk", "randomk", "qsgd", "sign", "fp16")
    for text in [*SPECS, "topk:1e-2", "randomk:1", "threshold:2"]:
        codec = make_codec(text)
        assert codec.name in CODECS and make_codec(codec.spec).spec == codec.spec
        assert repr(codec) == f"make_codec({codec.spec!r})"
    assert make_codec("topk:1e-2").spec == "topk:0.01"
    assert [make_codec(name).unbiased for name in SPECS] == [
        True,
        False,
        False,
        True,
        True,
        True,
        True,
        False,
        False,
    ]
    assert repr(make_codec("qsgd:4").contractive()) == "make_codec('qsgd:4').contractive()"
    assert make_codec("sign").contractive().spec == "sign"
    assert make_codec("threshold:2").spec == "threshold:2.0"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("topk:2", "--compress topk:F needs 0 < F <= 1, got 2"),
        ("topk:0", "--compress topk:F needs 0 < F <= 1, got 0"),
        ("randomk:-0.1", "--compress randomk:F needs 0 < F <= 1, got -0.1"),
        ("randomk:nan", "--compress randomk:F needs 0 < F <= 1, got nan"),
        ("threshold:0", "--compress threshold:T needs a finite T > 0, got 0"),
        ("threshold:inf", "--compress threshold:T needs a finite T > 0, got inf"),
        ("qsgd:0", "--compress qsgd:LEVELS needs an integer 1 <= LEVELS <= 65535, got 0"),
        ("qsgd:2.5", "--compress qsgd:LEVELS needs an integer 1 <= LEVELS <= 65535, got 2.5"),
        ("qsgd:65536", "--compress qsgd:LEVELS needs an integer 1 <= LEVELS <= 65535, got 65536"),
        ("topk", "--compress topk:F needs a value for F, got 'topk'"),
        ("qsgd:", "--compress qsgd:LEVELS needs a value for LEVELS, got 'qsgd:'"),
        ("topk:abc", "--compress topk:F needs a number, got 'abc'"),
        ("topk:0.1:2", "--compress topk:F takes one parameter, got 'topk:0.1:2'"),
        ("sign:1", "--compress sign takes no parameter, got 'sign:1'"),
        ("none:", "--compress none takes no parameter, got 'none:'"),
        (
            "",
            "--compress: unknown codec '' in '' (choose from none, threshold:T, topk:F, "
            "randomk:F, qsgd:LEVELS, sign, fp16)",
        ),
        (
            "TopK:0.1",
            "--compress: unknown codec 'TopK' in 'TopK:0.1' (choose from none, "
            "threshold:T, topk:F, randomk:F, qsgd:LEVELS, sign, fp16)",
        ),
    ],
)
def test_bad_specs_fail_with_one_line(text, message):
    with pytest.raises(ValueError) as err:
        make_codec(text)
    assert str(err.value) == message and "\n" not in message


def test_bad_arguments():
    g = np.ones(8, np.float32)
    with pytest.raises(TypeError, match=r"^--compress must be a string, got int$"):
        make_codec(3)
    with pytest.raises(TypeError, match=r"^g must be a float32 ndarray, got float64$"):
        make_codec("sign").encode(g.astype(np.float64))
    with pytest.raises(ValueError, match=r"^g must have shape \(n,\) with 1 <= n < 2\*\*32"):
        make_codec("sign").encode(np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match=r"^g must have shape"):
        make_codec("fp16").encode(np.ones(0, np.float32))
    for name in ("randomk:0.5", "qsgd:4"):
        with pytest.raises(ValueError, match=rf"^{name} needs rng, a numpy\.random\.Generator"):
            make_codec(name).encode(g)
    with pytest.raises(TypeError, match=r"^rng must be a numpy\.random\.Generator, got int$"):
        make_codec("qsgd:4").encode(g, rng=0)
    msg = make_codec("sign").encode(g)
    with pytest.raises(ValueError, match=r"^topk:0\.5 cannot decode a 'sign' message$"):
        make_codec("topk:0.5").decode(msg)
    with pytest.raises(ValueError, match=r"^out must be a \(8,\) float32 array"):
        make_codec("sign").decode(msg, out=np.zeros(9, np.float32))
    with pytest.raises(ValueError, match=r"^acc must be a \(8,\) float32 array"):
        make_codec("sign").add_into(msg, np.zeros(8))
    with pytest.raises(ValueError, match=r"^n must be an integer with 1 <= n < 2\*\*32, got 0$"):
        ErrorFeedback(make_codec("sign"), 0)
    with pytest.raises(ValueError, match=r"^g must have shape \(8,\), got \(9,\)$"):
        ErrorFeedback(make_codec("sign"), 8).encode(np.ones(9, np.float32))
