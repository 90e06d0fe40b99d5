"""Pareto masks honour each metric's direction."""

from __future__ import annotations

import numpy as np

from dse.search.pareto import pareto_mask


def test_front_with_mixed_directions() -> None:
    # accuracy is maximised, latency minimised
    values = [
        [0.90, 1.0],   # front: fastest
        [0.95, 2.0],   # front
        [0.94, 3.0],   # dominated by the row above
        [0.99, 5.0],   # front: most accurate
        [0.80, 1.5],   # dominated by row 0
        [0.95, 2.0],   # a duplicate of a front point stays on the front
    ]
    mask = pareto_mask(values, ["accuracy", "latency_p99_ms"])
    assert mask.tolist() == [True, True, False, True, False, True]


def test_nan_rows_never_on_front() -> None:
    mask = pareto_mask(np.array([[0.9, np.nan], [0.5, 3.0]]), ["accuracy", "latency_p99_ms"])
    assert mask.tolist() == [False, True]
