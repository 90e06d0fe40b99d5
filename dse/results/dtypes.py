"""One dtype per column, whatever mix of values the trials hold.

Parquet needs a single type per column, and a table read back must equal the one written. Search
space values can mix types (a knob with choices ``[1, "auto"]``) and an attribute written by a newer
dse can hold anything, so each column's dtype is decided here from all of its values at once.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import pandas as pd


def is_missing(value: object) -> bool:
    """None, NaN, or pandas' NA/NaT: every way an attribute or a table cell says "no value"."""
    return (value is None or value is pd.NA or value is pd.NaT
            or (isinstance(value, float) and math.isnan(value)))


def text_column(values: Sequence[object]) -> pd.Series:
    """A text column (identity fields): missing values stay missing."""
    return pd.Series([None if is_missing(v) else str(v) for v in values], dtype="str")


def typed_column(values: Sequence[object]) -> pd.Series:
    """The narrowest dtype that holds every value; text where the values mix types.

    bool -> nullable boolean, int -> nullable Int64, int and float -> float64, str -> str; a column
    with no value at all is float64 (an unmeasured metric reads as NaN). Anything else (mixed kinds,
    lists, mappings) becomes text, lists and mappings as canonical JSON.
    """
    present = [v for v in values if not is_missing(v)]
    # bool is a subclass of int, so test it first and keep True apart from 1.
    if all(isinstance(v, bool) for v in present) and present:
        return pd.Series([None if is_missing(v) else v for v in values], dtype="boolean")
    if any(isinstance(v, bool) for v in present):
        return _as_text(values)
    if all(isinstance(v, int) for v in present) and present:
        return pd.Series([None if is_missing(v) else v for v in values], dtype="Int64")
    if all(isinstance(v, int | float) for v in present):
        return pd.Series([math.nan if v is None else v for v in values], dtype="float64")
    if all(isinstance(v, str) for v in present):
        return pd.Series(list(values), dtype="str")
    return _as_text(values)


def _as_text(values: Sequence[object]) -> pd.Series:
    return text_column([
        json.dumps(v, sort_keys=True) if isinstance(v, list | dict) else v for v in values
    ])
