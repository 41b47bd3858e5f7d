"""Every number the package shows, formatted in one place: bytes, seconds, ratios, percentages, intervals,
and the words for a difference the data cannot call.

Terminal text, HTML tables, notebook cells and widgets all call these, so a size, a time or a ratio reads
the same wherever it appears (as ``torch.utils.benchmark`` keeps its unit choice and significant figures in
one helper module, ``utils/common.py``: ``select_unit``, ``trim_sigfig``)::

    >>> from nogradlab.core.format import bytes_, seconds, ratio, percent, percent_ci
    >>> bytes_(1536), seconds(2.3e-6), ratio(2.5), percent(0.123)
    ('1.50 KiB', '2.30 µs', '2.50×', '12.3%')
    >>> percent_ci(0.02, -0.05, 0.08)
    'no clear difference (noisy): 2% [-5%, 8%]'

The forms, one each:

* bytes: binary units, two decimals, exact whole bytes below 1 KiB: ``1536 -> '1.50 KiB'``;
* seconds: three significant figures in s, ms, µs (never "us") or ns: ``0.0123 -> '12.3 ms'``;
* ratio: the sign after the number: ``'1.23×'``;
* percent: Python's ``%`` format, no space: ``'12.3%'``; ``-0%`` reads ``0%``;
* interval: ``[lo, hi]``, both ends in the point's unit: ``'23% [18%, 27%]'``, ``'1.15× [1.05×, 1.22×]'``;
* a missing value (None or NaN) reads ``'n/a'``; an infinite one keeps its sign: ``'inf s'``.

A unit is chosen after rounding, so a value never shows as ``1000 µs`` or ``1024.00 KiB``: it moves up to
``1.00 ms`` or ``1.00 MiB``.
"""
from __future__ import annotations

import math
from typing import Callable

__all__ = ["NA", "NO_CLEAR_DIFFERENCE", "MICRO", "BYTE_UNITS", "TIME_UNITS", "bytes_", "size", "byte_unit",
           "seconds", "duration", "time_unit", "ratio", "times", "percent", "number", "interval",
           "spans", "unclear", "ratio_ci", "percent_ci"]

#: What a missing value (None, NaN) reads.
NA = "n/a"

#: What a ratio or a saving whose confidence interval holds both a slowdown and a speedup reads.
NO_CLEAR_DIFFERENCE = "no clear difference (noisy)"

#: The micro sign of "µs" (U+00B5); the ASCII "us" is never shown.
MICRO = "\u00b5s"

#: (name, bytes) from the largest unit down.
BYTE_UNITS = (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10), ("B", 1))

#: (name, seconds) from the largest unit down.
TIME_UNITS = (("s", 1.0), ("ms", 1e-3), (MICRO, 1e-6), ("ns", 1e-9))

_TIMES = "\u00d7"


def _missing(v) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isnan(v))


# ------------------------------------------------------------------------------------------ bytes

def byte_unit(n: float) -> "tuple[str, int]":
    """The unit a byte count reads in, for an axis or a table column: ``3 << 20 -> ('MiB', 1048576)``."""
    n = abs(float(n))
    for name, scale in BYTE_UNITS:
        if n >= scale:
            return name, scale
    return "B", 1


def bytes_(n: "int | float | None") -> str:
    """``1536 -> '1.50 KiB'``; whole bytes below 1 KiB (``'512 B'``); ``None`` -> ``'n/a'``."""
    if _missing(n):
        return NA
    n = float(n)
    if math.isinf(n):
        return f"{n} B"
    sign = "-" if n < 0 else ""
    n = abs(n)
    units = BYTE_UNITS[::-1]  # B, KiB, ... TiB
    for i, (name, scale) in enumerate(units):
        value = n / scale
        last = i == len(units) - 1
        if name == "B":
            if round(value) < 1024 or last:
                return f"{sign}{round(value)} B"
        elif round(value, 2) < 1024 or last:
            return f"{sign}{value:.2f} {name}"
    raise AssertionError("unreachable")  # pragma: no cover


#: The lessons' name for :func:`bytes_` (``from nogradlab.show import size``).
size = bytes_


# ---------------------------------------------------------------------------------------- seconds

def time_unit(t: float) -> "tuple[str, float]":
    """The unit a time reads in, for a column or an axis that shares one: ``2e-5 -> ('µs', 1e-06)``."""
    t = abs(float(t))
    for name, scale in TIME_UNITS:
        if t >= scale:
            return name, scale
    return TIME_UNITS[-1]


def _sig(value: float, digits: int) -> str:
    """``value`` to ``digits`` significant figures, fixed-point (``0.9997, 3 -> '1.00'``)."""
    rounded = float(f"{value:.{digits - 1}e}")  # the decimals follow the rounded value: 0.9997 -> 1.00
    return f"{rounded:.{max(0, digits - 1 - math.floor(math.log10(abs(rounded))))}f}"


def seconds(t: "float | None", unit: "tuple[str, float] | None" = None, digits: int = 3) -> str:
    """``0.0123 -> '12.3 ms'``, ``2.3e-6 -> '2.30 µs'``: ``digits`` significant figures in the value's own
    unit, or in ``unit`` (a ``(name, scale)`` pair from :func:`time_unit`, to share one unit down a
    column). Zero reads ``'0 ns'`` (or ``'0 <unit>'``); None and NaN ``'n/a'``."""
    if _missing(t):
        return NA
    t = float(t)
    if unit is not None:
        name, scale = unit
        name = MICRO if name == "us" else name
    else:
        name, scale = time_unit(t)
    value = t / scale
    if math.isinf(value):
        return f"{value} {name}"
    if value == 0:
        return f"0 {name}"
    text = _sig(value, digits)
    if unit is None and abs(float(text)) >= 1000 and name != "s":  # 999.7 µs rounds to 1000: 1.00 ms
        names = [n for n, _ in TIME_UNITS]
        return seconds(float(text) * scale, TIME_UNITS[names.index(name) - 1], digits)
    return f"{text} {name}"


#: The lessons' name for :func:`seconds` (``from nogradlab.show import duration``).
duration = seconds


# ------------------------------------------------------------------------------------ ratio, percent

def ratio(x: "float | None", digits: int = 2) -> str:
    """A factor with the multiplication sign after it: ``2.5 -> '2.50×'``; None/NaN -> ``'n/a'``."""
    if _missing(x):
        return NA
    return f"{float(x):.{digits}f}{_TIMES}"


#: The lessons' name for :func:`ratio` (``from nogradlab.show import times``).
times = ratio


def percent(f: "float | None", digits: int = 1, signed: bool = False) -> str:
    """A fraction as a percentage: ``0.123 -> '12.3%'`` (``digits`` decimals), ``signed``: ``'+12.3%'``.
    A value that rounds to zero reads without a minus sign (``-0.001 -> '0%'`` at 0 decimals)."""
    if _missing(f):
        return NA
    f = float(f)
    if math.isinf(f):
        return f"{'+' if signed and f > 0 else ''}{f}%"
    if round(f * 100, digits) == 0:
        f = 0.0
    return f"{f:{'+' if signed else ''}.{digits}%}"


def number(v, digits: int = 3) -> str:
    """A plain number, ``digits`` significant figures (``1234.5 -> '1.23e+03'``, ``0.5 -> '0.5'``); an int,
    a bool or a string as it is; None -> ``''``; NaN and infinities -> ``'n/a'``."""
    if v is None:
        return ""
    if isinstance(v, float):
        return NA if not math.isfinite(v) else f"{v:.{digits}g}"
    return str(v)


# -------------------------------------------------------------------------------------- intervals

def interval(lo, hi, fmt: "Callable[[float], str]" = number) -> str:
    """``[lo, hi]``, each end through ``fmt``: ``interval(0.18, 0.27, percent) -> '[18.0%, 27.0%]'``."""
    return f"[{fmt(lo)}, {fmt(hi)}]"


def spans(lo: float, hi: float, at: float) -> bool:
    """True when the interval ``(lo, hi)`` holds values on both sides of ``at`` (1 for a ratio, 0 for a
    saving): the data do not say which way the difference goes."""
    return lo < at < hi


def unclear(text: str) -> str:
    """``'no clear difference (noisy): <text>'``: a figure shown with its interval, not headlined."""
    return f"{NO_CLEAR_DIFFERENCE}: {text}"


def ratio_ci(point: float, lo: "float | None" = None, hi: "float | None" = None, digits: int = 2,
             *, noisy: bool = True) -> str:
    """A ratio with its interval: ``'1.15× [1.05×, 1.22×]'``; with ``noisy`` (the default) an interval
    spanning 1 reads ``'no clear difference (noisy): 1.02× [0.95×, 1.08×]'``; no interval: ``'1.15×'``."""
    if lo is None or hi is None:
        return ratio(point, digits)
    text = f"{ratio(point, digits)} {interval(lo, hi, lambda v: ratio(v, digits))}"
    return unclear(text) if noisy and spans(lo, hi, 1.0) else text


def percent_ci(point: float, lo: "float | None" = None, hi: "float | None" = None, digits: int = 0,
               *, signed: bool = False, noisy: bool = True) -> str:
    """A fraction with its interval: ``'23% [18%, 27%]'`` (``signed``: ``'+23% [+18%, +27%]'``); with
    ``noisy`` (the default) an interval spanning 0 reads ``'no clear difference (noisy): 2% [-5%, 8%]'``;
    no interval: ``'23%'``."""
    def fmt(v):
        return percent(v, digits, signed)

    if lo is None or hi is None:
        return fmt(point)
    text = f"{fmt(point)} {interval(lo, hi, fmt)}"
    return unclear(text) if noisy and spans(lo, hi, 0.0) else text
