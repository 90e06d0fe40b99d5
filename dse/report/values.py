"""How one table cell reads on the dashboard: its label, and a stable order of mixed values."""

from __future__ import annotations

import numbers

from dse.results.dtypes import is_missing


def label(value: object) -> str:
    """A cell as text: floats to four significant digits, missing as empty."""
    if is_missing(value):
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def sort_key(value: object) -> tuple[int, float, str]:
    """Numbers first, in numeric order, then everything else by its text."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))
