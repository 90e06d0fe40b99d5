"""A trained tiny cnn and its fp32 ONNX export, shared by the build tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from dse.accuracy import TrainedModel, load_digits_split, train_or_load
from dse.accuracy.digits import DigitsSplit
from dse.artifacts import export_onnx
from dse.spec import TrainingSpec

TINY = {"num_stages": 2, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2}
FAST = TrainingSpec(epochs=2, batch_size=64, learning_rate=0.02, seed=0, threads=1)


@pytest.fixture(scope="session")
def build_trained(tmp_path_factory: pytest.TempPathFactory) -> TrainedModel:
    return train_or_load("cnn", TINY, FAST, tmp_path_factory.mktemp("trained"))


@pytest.fixture(scope="session")
def build_split() -> DigitsSplit:
    return load_digits_split(FAST.seed)


@pytest.fixture(scope="session")
def fp32_onnx(build_trained: TrainedModel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export") / "model.onnx"
    export_onnx(build_trained.module, build_trained.input_shape, path)
    return path
