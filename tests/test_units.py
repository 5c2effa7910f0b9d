"""Units are parsed, never guessed."""

import pytest

from twinsgd.run.units import parse_bandwidth_Bps, parse_factor, parse_nbytes, parse_seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5us", 5e-6),
        ("5µs", 5e-6),
        ("1.5ms", 1.5e-3),
        ("2s", 2.0),
        ("10ns", 1e-8),
        ("3min", 180.0),
        ("1e-3s", 1e-3),
        (" 7 us ", 7e-6),
    ],
)
def test_seconds(text, seconds):
    assert parse_seconds(text) == pytest.approx(seconds, rel=1e-15)


@pytest.mark.parametrize(
    ("text", "Bps"),
    [
        ("10Gbps", 1.25e9),
        ("56Gb/s", 7e9),
        ("12.5GB/s", 12.5e9),
        ("100Mbps", 12.5e6),
        ("1GiB/s", 2.0**30),
        ("800kbps", 1e5),
    ],
)
def test_bandwidth(text, Bps):
    assert parse_bandwidth_Bps(text) == pytest.approx(Bps, rel=1e-15)


@pytest.mark.parametrize(("text", "nbytes"), [("1KB", 1000), ("64MiB", 2**26), ("512B", 512)])
def test_sizes(text, nbytes):
    assert parse_nbytes(text) == nbytes


def test_factor():
    assert parse_factor("2x") == 2.0
    assert parse_factor("0.25x") == 0.25


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (parse_seconds, "5"),
        (parse_seconds, "5 parsecs"),
        (parse_seconds, "fast"),
        (parse_bandwidth_Bps, "10G"),
        (parse_bandwidth_Bps, "10Gbit"),
        (parse_nbytes, "12"),
        (parse_factor, "2"),
        (parse_seconds, ""),
    ],
)
def test_a_missing_or_unknown_unit_is_refused_in_one_line(parse, text):
    with pytest.raises(ValueError, match=r"^[^\n]+$"):
        parse(text)
