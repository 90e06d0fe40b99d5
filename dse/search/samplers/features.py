"""Candidates as rows of numbers a regression model can learn from, using only what is known
before measuring: their parameters.

Numbers stay numbers (a batch size of 8 is between 4 and 16; a range or a list of numbers whose
values span a factor of 4 or more is taken on a log scale, as latencies scale with them);
categories become one column per choice. A conditional parameter the candidate does not have (a
knob of another backend) reads -1 (numbers, scaled to [0, 1]) or 0 in every column (categories),
so a tree model can tell "absent" from every value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import optuna.distributions as od

from dse.util import FloatArray

ABSENT = -1.0


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class _Numeric:
    """One column: the value, optionally logged, scaled to [0, 1] over its range."""

    def __init__(self, low: float, high: float, log: bool) -> None:
        self.log = log and low > 0
        self.low, self.high = (math.log(low), math.log(high)) if self.log else (low, high)

    def encode(self, value: Any) -> list[float]:
        if value is None:
            return [ABSENT]
        number = math.log(float(value)) if self.log else float(value)
        return [0.0 if self.high == self.low else (number - self.low) / (self.high - self.low)]


class _OneHot:
    """One column per choice."""

    def __init__(self, choices: Sequence[Any]) -> None:
        self.index = {repr(c): i for i, c in enumerate(choices)}

    def encode(self, value: Any) -> list[float]:
        row = [0.0] * len(self.index)
        if value is not None and repr(value) in self.index:
            row[self.index[repr(value)]] = 1.0
        return row


def _column(distribution: od.BaseDistribution) -> _Numeric | _OneHot:
    if isinstance(distribution, od.CategoricalDistribution):
        choices = list(distribution.choices)
        if choices and all(_is_number(c) for c in choices):
            numbers = [float(c) for c in choices if isinstance(c, int | float)]
            low, high = min(numbers), max(numbers)
            return _Numeric(low, high, log=low > 0 and high >= 4 * low)
        return _OneHot(choices)
    assert isinstance(distribution, od.IntDistribution | od.FloatDistribution)
    low, high = float(distribution.low), float(distribution.high)
    return _Numeric(low, high, log=distribution.log or (low > 0 and high >= 4 * low))


class FeatureEncoder:
    """Encodes parameter dicts over ``distributions`` (name -> Optuna distribution, conditional
    parameters included), columns in name order."""

    def __init__(self, distributions: Mapping[str, od.BaseDistribution]) -> None:
        self.columns = {name: _column(distributions[name]) for name in sorted(distributions)}

    def encode(self, rows: Sequence[Mapping[str, Any]]) -> FloatArray:
        """One row of features per parameter dict."""
        return np.array([[x for name, column in self.columns.items()
                          for x in column.encode(row.get(name))] for row in rows],
                        dtype=np.float64).reshape(len(rows), -1)
