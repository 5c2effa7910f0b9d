"""``--compress`` spec strings: ``none | threshold:T | topk:F | randomk:F | qsgd:LEVELS | sign |
fp16``, parsed and checked one rule per line."""

import math

from twinsgd.programs.compression.dense import FP16, NoCompression, Sign
from twinsgd.programs.compression.qsgd import MAX_LEVELS, QSGD
from twinsgd.programs.compression.sparse import RandomK, Threshold, TopK

CODECS = ("none", "threshold", "topk", "randomk", "qsgd", "sign", "fp16")
"""The codec family names, in the order the CLI lists them."""

_USAGE = "none, threshold:T, topk:F, randomk:F, qsgd:LEVELS, sign, fp16"
_PLAIN = {"none": NoCompression, "sign": Sign, "fp16": FP16}
_PARAMETER = {"threshold": "T", "topk": "F", "randomk": "F", "qsgd": "LEVELS"}


def make_codec(spec):
    """The codec a ``--compress`` spec names.

    Parameters
    ----------
    spec : str
        ``none``, ``threshold:T`` (finite T > 0), ``topk:F`` or ``randomk:F`` (0 < F <= 1),
        ``qsgd:LEVELS`` (integer 1 <= LEVELS <= 65535), ``sign`` or ``fp16``.

    Returns
    -------
    Codec
        With ``name`` (the family) and ``spec`` (canonical: ``make_codec(codec.spec)`` rebuilds it).

    Raises
    ------
    TypeError
        If ``spec`` is not a string.
    ValueError
        One line naming the rule broken: unknown name, missing or extra parameter, not a number,
        out of range.

    Examples
    --------
    >>> codec = make_codec("topk:1e-2")
    >>> codec.name, codec.spec, codec.nbytes(1_000_000)
    ('topk', 'topk:0.01', 80012)
    >>> make_codec("topk:2")
    Traceback (most recent call last):
    ...
    ValueError: --compress topk:F needs 0 < F <= 1, got 2
    """
    if not isinstance(spec, str):
        raise TypeError(f"--compress must be a string, got {type(spec).__name__}")
    name, colon, text = spec.partition(":")
    if name not in CODECS:
        raise ValueError(f"--compress: unknown codec {name!r} in {spec!r} (choose from {_USAGE})")
    if name in _PLAIN:
        if colon:
            raise ValueError(f"--compress {name} takes no parameter, got {spec!r}")
        return _PLAIN[name]()
    usage = f"--compress {name}:{_PARAMETER[name]}"
    if not text:
        raise ValueError(f"{usage} needs a value for {_PARAMETER[name]}, got {spec!r}")
    if ":" in text:
        raise ValueError(f"{usage} takes one parameter, got {spec!r}")
    if name == "qsgd":
        return QSGD(_levels(usage, text))
    value = _number(usage, text)
    if name == "threshold":
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"{usage} needs a finite T > 0, got {text}")
        return Threshold(value)
    if not 0 < value <= 1:
        raise ValueError(f"{usage} needs 0 < F <= 1, got {text}")
    return TopK(value) if name == "topk" else RandomK(value)


def _number(usage, text):
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{usage} needs a number, got {text!r}") from None


def _levels(usage, text):
    try:
        levels = int(text)
    except ValueError:
        levels = None
    if levels is None or not 1 <= levels <= MAX_LEVELS:
        raise ValueError(f"{usage} needs an integer 1 <= LEVELS <= {MAX_LEVELS}, got {text}")
    return levels
