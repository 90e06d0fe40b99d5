"""scikit-learn's digits (1,797 8x8 images, shipped with the library: no download), split."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DigitsSplit:
    """A stratified train/test split: float32 NCHW images (N, 1, 8, 8) in [0, 1], int64 labels."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load_digits_split(seed: int, test_fraction: float = 0.2) -> DigitsSplit:
    """The same split for the same ``seed``: stratified, so every class keeps its share in both."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    # Pixel values are counts 0..16 of the original 32x32 bitmap's 4x4 cells.
    images = (digits.images.astype(np.float32) / 16.0)[:, np.newaxis, :, :]
    labels = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=test_fraction, random_state=seed, stratify=labels)
    return DigitsSplit(
        x_train=np.ascontiguousarray(x_train), y_train=np.ascontiguousarray(y_train),
        x_test=np.ascontiguousarray(x_test), y_test=np.ascontiguousarray(y_test))
