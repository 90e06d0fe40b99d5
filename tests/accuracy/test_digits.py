"""The digits split and the batched accuracy evaluator."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import numpy as np
import pytest

from dse.accuracy import DigitsSplit, accuracy, load_digits_split


def test_split_shapes_types_and_range() -> None:
    split = load_digits_split(seed=0)
    assert isinstance(split, DigitsSplit)
    assert split.x_train.shape == (1437, 1, 8, 8)
    assert split.x_test.shape == (360, 1, 8, 8)
    assert split.x_train.dtype == split.x_test.dtype == np.float32
    assert split.y_train.dtype == split.y_test.dtype == np.int64
    assert split.y_train.shape == (1437,)
    for x in (split.x_train, split.x_test):
        assert x.min() == 0.0
        assert x.max() == 1.0
        assert x.flags.c_contiguous


def test_split_is_stratified() -> None:
    split = load_digits_split(seed=0)
    train_share = np.bincount(split.y_train, minlength=10) / len(split.y_train)
    test_share = np.bincount(split.y_test, minlength=10) / len(split.y_test)
    assert np.abs(train_share - test_share).max() < 0.01


def test_split_is_deterministic_per_seed() -> None:
    a, b, c = load_digits_split(7), load_digits_split(7), load_digits_split(8)
    assert np.array_equal(a.x_train, b.x_train)
    assert np.array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.y_test, c.y_test)


def test_test_fraction() -> None:
    assert len(load_digits_split(0, test_fraction=0.5).x_test) == 899
    with pytest.raises(ValueError, match=r"test_fraction must be in \(0, 1\), got 1\.0"):
        load_digits_split(0, test_fraction=1.0)


def _one_hot_predict(batches: list[int]) -> Callable[[np.ndarray], np.ndarray]:
    """A predict function that 'knows' the label stored in the first pixel, and logs batch sizes."""

    def predict(x: np.ndarray) -> np.ndarray:
        batches.append(len(x))
        logits = np.zeros((len(x), 10), dtype=np.float32)
        logits[np.arange(len(x)), x[:, 0, 0, 0].astype(np.int64)] = 1.0
        return logits

    return predict


def test_accuracy_feeds_batches_with_a_smaller_last_one() -> None:
    y = np.arange(10, dtype=np.int64).repeat(2)  # 20 labels
    x = np.zeros((20, 1, 8, 8), dtype=np.float32)
    x[:, 0, 0, 0] = y
    x[:5, 0, 0, 0] = (y[:5] + 1) % 10  # five wrong answers
    batches: list[int] = []
    assert accuracy(_one_hot_predict(batches), x, y, batch_size=8) == pytest.approx(0.75)
    assert batches == [8, 8, 4]


def test_accuracy_with_batch_larger_than_the_data() -> None:
    y = np.array([3, 4], dtype=np.int64)
    x = np.zeros((2, 1, 8, 8), dtype=np.float32)
    x[:, 0, 0, 0] = y
    batches: list[int] = []
    assert accuracy(_one_hot_predict(batches), x, y, batch_size=64) == 1.0
    assert batches == [2]


def test_accuracy_rejects_bad_input() -> None:
    x = np.zeros((4, 1, 8, 8), dtype=np.float32)
    y = np.zeros(4, dtype=np.int64)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        accuracy(lambda b: np.zeros((len(b), 10)), x, y, batch_size=0)
    with pytest.raises(ValueError, match="as many labels"):
        accuracy(lambda b: np.zeros((len(b), 10)), x, y[:3], batch_size=2)
    with pytest.raises(ValueError, match="returned 1 rows for a batch of 2"):
        accuracy(lambda b: np.zeros((1, 10)), x, y, batch_size=2)


def test_importing_quality_imports_no_torch_or_sklearn() -> None:
    code = ("import sys, dse.accuracy; "
            "print([m for m in ('torch', 'sklearn', 'onnxruntime') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
