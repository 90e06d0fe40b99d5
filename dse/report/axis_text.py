"""How an axis reads: its titles wrapped to the room they have, and its numbers in a d3 format
chosen from the values' magnitude and spread, so a throughput never reads ``0.001k`` and an
accuracy between 0.983 and 0.989 keeps its third digit.

plotly's own choice is SI prefixes with few digits, fine for a wide range of large values and
misleading for small spreads or small magnitudes; these formats are plain decimals with thousands
separators, trailing zeros trimmed (d3's ``~``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

# Beyond these magnitudes plain decimals are too long to read: exponent notation instead.
_TINY = 1e-4
_HUGE = 1e9
_MAX_DECIMALS = 8
# Where a title may break: after a dot or a space (a name's levels), else after _ or -.
_LEVELS = re.compile(r"(?<=[. ])")
_WORDS = re.compile(r"(?<=[_\-])")


def decimals_for(values: Iterable[float]) -> int:
    """Digits after the point that tell apart ticks about a fifth of the values' spread apart,
    plus one (plotly may halve that step): 0 for steps of 1 or more."""
    finite = [float(v) for v in values if math.isfinite(v)]
    if not finite:
        return 0
    low, high = min(finite), max(finite)
    spread = high - low or abs(high) or 1.0
    step = spread / 5
    if step >= 1:
        return 0
    return min(_MAX_DECIMALS, math.ceil(-math.log10(step)) + 1)


def tick_format(values: Iterable[float]) -> str:
    """A d3 format for an axis over ``values``: ``,.2~f`` for latencies of 0.02–0.84 ms,
    ``,.1~f`` for throughputs in the thousands (``57,000``), exponent notation (``.3~e``) for
    magnitudes below 1e-4 or from 1e9 on."""
    finite = [float(v) for v in values if math.isfinite(v)]
    if not finite:
        return ""
    largest = max(abs(v) for v in finite)
    if largest >= _HUGE or 0 < largest < _TINY:
        return ".3~e"
    return f",.{max(decimals_for(finite), 1)}~f"


def format_number(value: float, decimals: int) -> str:
    """``value`` as a tick label written by :func:`tick_format`'s rule: thousands separated,
    ``decimals`` digits at most, trailing zeros trimmed."""
    if not math.isfinite(value):
        return str(value)
    if value != 0 and (abs(value) >= _HUGE or abs(value) < _TINY):
        return f"{value:.3g}"
    text = f"{value:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def wrap_title(parts: Sequence[str], width: int) -> list[str]:
    """Each part of a title on lines of at most ``width`` characters. A line breaks after a
    ``.`` or space first (``knob.num_threads`` -> ``knob.``, ``num_threads``: the name's own
    levels), after a ``_`` or ``-`` inside a piece still too long, and cuts a piece with no
    break at all."""
    lines: list[str] = []
    for part in parts:
        pieces = [small for big in _LEVELS.split(part) if big
                  for small in ([big] if len(big) <= width else _WORDS.split(big)) if small]
        line = ""
        for piece in pieces:
            while len(piece) > width:  # no break inside: cut it
                if line:
                    lines.append(line.rstrip())
                    line = ""
                lines.append(piece[:width])
                piece = piece[width:]
            if len(line) + len(piece) > width and line:
                lines.append(line.rstrip())
                line = ""
            line += piece
        if line:
            lines.append(line.rstrip())
    return lines
