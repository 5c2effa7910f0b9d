"""Quantities with units, parsed from the command line: times, bandwidths, sizes, factors.

Units are parsed, never guessed: a bare number is refused where a unit is expected, so ``--latency
5`` cannot silently mean 5 s when 5 µs was meant.

Examples
--------
>>> parse_seconds("5us"), parse_seconds("1.5ms"), parse_seconds("2s")
(5e-06, 0.0015, 2.0)
>>> parse_bandwidth_Bps("10Gbps"), parse_bandwidth_Bps("56Gb/s"), parse_bandwidth_Bps("12.5GB/s")
(1250000000.0, 7000000000.0, 12500000000.0)
>>> parse_nbytes("64MiB"), parse_nbytes("1KB")
(67108864, 1000)
>>> parse_factor("2x")
2.0
"""

import argparse
import math
import re

_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-zµ/]*)\s*$")

# Per unit: seconds = value * multiplier / divisor. Sub-second units divide (5 / 1e6 is the double
# nearest 5 us; 5 * 1e-6 is one ulp off, since 1e-6 itself is not exact).
_TIME_S = {
    "s": (1.0, 1.0),
    "ms": (1.0, 1e3),
    "us": (1.0, 1e6),
    "µs": (1.0, 1e6),
    "ns": (1.0, 1e9),
    "min": (60.0, 1.0),
    "h": (3600.0, 1.0),
}
_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_BINARY_PREFIX = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}


def _split(text, what):
    match = _NUMBER.match(str(text))
    if not match:
        raise ValueError(f"{what}: cannot read {text!r} as a number with a unit")
    value = float(match.group(1))
    if not math.isfinite(value):  # 1e400s: no cluster has an infinite latency
        raise ValueError(f"{what}: {text!r} is not a finite number")
    return value, match.group(2)


def parse_seconds(text):
    """Parse a duration such as ``5us``, ``1.5ms``, ``2s``, ``3min`` into seconds (float)."""
    value, unit = _split(text, "time")
    if unit not in _TIME_S:
        raise ValueError(f"time: {text!r} needs a unit of {', '.join(_TIME_S)}")
    multiplier, divisor = _TIME_S[unit]
    return value * multiplier / divisor


def _prefixed(unit, suffixes, text, what):
    """Split ``unit`` into a decimal or binary prefix and one of ``suffixes``; return (scale,
    suffix)."""
    for suffix in suffixes:
        if unit.endswith(suffix):
            prefix = unit[: -len(suffix)]
            if prefix in _PREFIX:
                return _PREFIX[prefix], suffix
            if prefix in _BINARY_PREFIX:
                return _BINARY_PREFIX[prefix], suffix
    raise ValueError(f"{what}: {text!r} needs a unit such as {', '.join(suffixes[:3])} with k/M/G")


def parse_bandwidth_Bps(text):
    """Parse a bandwidth into bytes per second: ``10Gbps`` and ``56Gb/s`` are bits, ``12.5GB/s``
    bytes."""
    value, unit = _split(text, "bandwidth")
    scale, suffix = _prefixed(unit, ("bps", "b/s", "Bps", "B/s"), text, "bandwidth")
    if value <= 0:
        raise ValueError(f"bandwidth: {text!r} must be > 0")
    bits = suffix in ("bps", "b/s")
    return value * scale / (8.0 if bits else 1.0)


def parse_tc_rate_Bps(text):
    """Parse a link rate as ``tc`` writes it (``1Gbit``, ``100Mbit``: bits) or as
    `parse_bandwidth_Bps` reads it, into bytes per second. Only where rates are tc's (the
    emulated cluster): elsewhere ``Gbit`` is refused, so a flag keeps one spelling.

    >>> parse_tc_rate_Bps("100Mbit"), parse_tc_rate_Bps("1Gbps")
    (12500000.0, 125000000.0)
    """
    text = str(text).strip()
    return parse_bandwidth_Bps(text[:-3] + "bps" if text.endswith("bit") else text)


def parse_nbytes(text):
    """Parse a size such as ``1KB`` (1000), ``64MiB`` (2**26) or ``512B`` into whole bytes."""
    value, unit = _split(text, "size")
    scale, _ = _prefixed(unit, ("B",), text, "size")
    return round(value * scale)


def parse_size_range(text):
    """Parse ``MIN:MAX`` sizes (plain bytes or with a unit) into (min, max) bytes, 0 <= min <= max.

    >>> parse_size_range("4:1MiB")
    (4, 1048576)
    """
    low, colon, high = str(text).partition(":")
    low_bytes, high_bytes = (int(x) if x.isdigit() else parse_nbytes(x) for x in (low, high))
    if not colon or not 0 <= low_bytes <= high_bytes:
        raise ValueError(f"expects MIN:MAX with 0 <= MIN <= MAX, got {text!r}")
    return low_bytes, high_bytes


def parse_factor(text):
    """Parse a multiplicative factor such as ``2x`` or ``0.5x`` (the ``x`` is required)."""
    value, unit = _split(text, "factor")
    if unit != "x":
        raise ValueError(f"factor: {text!r} needs the unit x, as in 2x")
    if value <= 0:
        raise ValueError(f"factor: {text!r} must be > 0")
    return value


def flag_type(parse):
    """An argparse ``type`` of a parser of this module, so argparse names the flag at fault in
    its one line (``argument --latency: '5' needs a unit of s, ms, ...``), parsing once.

    >>> flag_type(parse_seconds)("5us")
    5e-06
    """

    def convert(text):
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err).partition(": ")[2] or str(err)) from None

    convert.__name__ = parse.__name__.removeprefix("parse_")  # argparse's name for the type
    return convert
