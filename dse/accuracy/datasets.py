"""The datasets accuracy is trained and evaluated on, by name, and the stand-in inputs of a model
that has none.

``digits`` holds 1x8x8 images; ``sequences`` is generated at any length, with a fixed number of
features per step. A model's sample shape must be one its dataset can provide.
"""

from __future__ import annotations

import numpy as np

from dse.accuracy.digits import DigitsSplit, load_digits_split
from dse.models import NUM_CLASSES as SEQUENCE_CLASSES
from dse.plugins import DATASETS, DatasetDeclaration, register_dataset
from dse.plugins import dataset_problem as dataset_problem

DIGITS_SHAPE = (1, 8, 8)
# Enough rows for fidelity and int8 calibration, few enough to run in a moment on any backend.
SYNTHETIC_ROWS = 256


def load_split(name: str, seed: int, sample_shape: tuple[int, ...]) -> DigitsSplit:
    """The train/test split of dataset ``name`` for samples of ``sample_shape``; the same seed
    gives the same split. Raises ValueError when the dataset cannot feed that shape."""
    problem = dataset_problem(name, sample_shape)
    if problem is not None:
        raise ValueError(problem)
    split: DigitsSplit = DATASETS[name].load(seed, tuple(sample_shape))
    return split


def _digits_problem(sample_shape: tuple[int, ...]) -> str | None:
    if sample_shape != DIGITS_SHAPE:
        return f"dataset digits holds 1x8x8 images; the model takes {list(sample_shape)}"
    return None


def _sequences_problem(sample_shape: tuple[int, ...]) -> str | None:
    from dse.accuracy.sequences import FEATURES

    if len(sample_shape) != 2 or sample_shape[1] != FEATURES:
        return (f"dataset sequences holds (length, {FEATURES}) sequences; the model takes "
                f"{list(sample_shape)}")
    return None


def _load_sequences(seed: int, sample_shape: tuple[int, ...]) -> DigitsSplit:
    from dse.accuracy.sequences import load_sequence_split

    return load_sequence_split(seed, sample_shape[0], sample_shape[1])


def synthetic_inputs(sample_shape: tuple[int, ...], seed: int,
                     rows: int = SYNTHETIC_ROWS) -> np.ndarray:
    """Standard-normal float32 inputs for a model without a dataset: they calibrate int8 and
    measure fidelity against fp32 (no accuracy can come from them)."""
    generator = np.random.default_rng(seed)
    return generator.standard_normal((rows, *sample_shape), dtype=np.float32)


register_dataset(DatasetDeclaration(
    "digits", _digits_problem, lambda seed, shape: load_digits_split(seed),
    "scikit-learn's 8x8 handwritten digits, 10 classes", classes=10,
    sample_shape=DIGITS_SHAPE))
register_dataset(DatasetDeclaration(
    "sequences", _sequences_problem, _load_sequences,
    "generated sequences of any length, fixed features per step", classes=SEQUENCE_CLASSES))
