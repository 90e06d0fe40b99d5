"""A trained tiny cnn and one artifact per backend, shared by the backend suites."""

from __future__ import annotations

import pytest

from dse.build import Artifact, ArtifactCache, build_artifact
from dse.candidate import Candidate
from dse.quality import TrainedModel, load_digits_split, train_or_load
from dse.quality.digits import DigitsSplit
from dse.spec import HardwareProfile, TrainingSpec

TINY = {"num_stages": 2, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2}
FAST = TrainingSpec(epochs=2, batch_size=64, learning_rate=0.02, seed=0, threads=1)


@pytest.fixture(scope="session")
def backends_split() -> DigitsSplit:
    return load_digits_split(FAST.seed)


@pytest.fixture(scope="session")
def backends_trained(tmp_path_factory: pytest.TempPathFactory) -> TrainedModel:
    return train_or_load("cnn", TINY, FAST, tmp_path_factory.mktemp("trained"))


@pytest.fixture(scope="session")
def fp32_artifacts(backends_trained: TrainedModel, backends_split: DigitsSplit,
                   tmp_path_factory: pytest.TempPathFactory) -> dict[str, Artifact]:
    """Backend name -> the fp32 artifact it loads, built from the same trained weights."""
    cache = ArtifactCache(tmp_path_factory.mktemp("artifacts"))
    artifacts = {}
    for backend in ("onnxruntime", "torch"):
        candidate = Candidate("cnn", TINY, "fp32", 4, backend)
        artifacts[backend], _ = build_artifact(candidate, backends_trained, cache,
                                               backends_split.x_train[:64])
    return artifacts


@pytest.fixture
def cpu_profile() -> HardwareProfile:
    return HardwareProfile(name="test-cpu", kind="cpu", backends=["onnxruntime", "torch"],
                           precisions=["fp32", "int8"], max_threads=2)
