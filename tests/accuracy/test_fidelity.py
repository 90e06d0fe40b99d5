"""Fidelity of deployed outputs against the fp32 reference: hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from dse.accuracy import fidelity_metrics, predict_batches


def test_identical_outputs_are_perfectly_faithful() -> None:
    logits = np.array([[1.0, 2.0], [3.0, -1.0]])
    assert fidelity_metrics(logits, logits.copy()) == {
        "max_abs_error": 0.0, "rel_l2_error": 0.0, "top1_agreement": 1.0}


def test_errors_and_agreement_by_hand() -> None:
    reference = np.array([[3.0, 0.0], [0.0, 4.0]])       # norm 5, classes 0 and 1
    deployed = np.array([[3.0, 0.5], [0.0, -1.0]])       # differences 0.5 and -5; class 0 and 0
    result = fidelity_metrics(reference, deployed)
    assert result["max_abs_error"] == pytest.approx(5.0)
    assert result["rel_l2_error"] == pytest.approx(np.sqrt(0.25 + 25.0) / 5.0)
    assert result["top1_agreement"] == pytest.approx(0.5)


def test_shape_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="differ in shape"):
        fidelity_metrics(np.zeros((2, 3)), np.zeros((3, 3)))


def test_batches_cover_every_row_once() -> None:
    x = np.arange(10, dtype=np.float64).reshape(10, 1)
    seen: list[int] = []

    def predict(batch: np.ndarray) -> np.ndarray:
        seen.append(len(batch))
        return batch * 2

    np.testing.assert_array_equal(predict_batches(predict, x, 4), x * 2)
    assert seen == [4, 4, 2]
