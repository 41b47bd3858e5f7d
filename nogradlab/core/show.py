"""Small display helpers for the lessons' "See it" cells: sizes with units, times in µs/ms, ratios.

    from nogradlab.show import size, duration, times
    print(size(66560), duration(2.3e-6), times(2.5))   # 65.00 KiB 2.30 µs 2.50×

Sizes use the package's own format (``memory.format_bytes``), so a size printed by hand in a lesson
reads the same as the one in a verdict.
"""
from __future__ import annotations

import math

from nogradlab.core.memory import format_bytes

__all__ = ["size", "duration", "times", "percent"]


def size(n_bytes) -> str:
    """Bytes with a binary unit: ``1536 -> '1.50 KiB'``."""
    return format_bytes(n_bytes)


def duration(seconds: float) -> str:
    """Seconds in the unit that suits them, 3 significant figures: ``2.3e-6 -> '2.30 µs'``,
    ``0.0123 -> '12.3 ms'``."""
    seconds = float(seconds)
    if not math.isfinite(seconds):
        return f"{seconds} s"
    for unit, scale in (("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3), ("s", 1.0)):
        if abs(seconds) < scale * 1000 or unit == "s":
            value = seconds / scale
            decimals = 0 if value == 0 else max(0, 2 - math.floor(math.log10(abs(value))))
            return f"{value:.{decimals}f} {unit}"


def times(ratio: float) -> str:
    """A ratio as a factor: ``2.5 -> '2.50×'``."""
    return f"{ratio:.2f}×"


def percent(fraction: float) -> str:
    """A fraction as a percentage: ``0.123 -> '12.3 %'``."""
    return f"{fraction * 100:.1f} %"
