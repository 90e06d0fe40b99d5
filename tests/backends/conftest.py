"""A trained tiny cnn, its artifacts, and one compiled runner per (backend, precision), shared by
the backend suites.

torch.compile costs seconds per compile on this 2-core machine, so runners are compiled once per
test session (``runner_pool``) and shared; tests that need a runner of their own use eager torch or
onnxruntime, which compile in milliseconds.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

# Before torch's inductor is imported: compile in this process. A pool of compile workers stays
# alive after the compile and takes CPU from the timing tests that run later on 2 cores.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import numpy as np
import pytest

from dse.backends import BACKENDS, Runner, get_backend
from dse.build import Artifact, ArtifactCache, build_artifact
from dse.candidate import Candidate
from dse.quality import TrainedModel, load_digits_split, train_or_load
from dse.quality.digits import DigitsSplit
from dse.spec import HardwareProfile, TrainingSpec

TINY = {"num_stages": 2, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2}
FAST = TrainingSpec(epochs=2, batch_size=64, learning_rate=0.02, seed=0, threads=1)
CPU_PROFILE = HardwareProfile(name="test-cpu", kind="cpu", backends=sorted(BACKENDS),
                              precisions=["fp32", "fp16", "bf16", "int8"], max_threads=2)
# The candidate batch size of pooled runners, and how many test images the suites compare.
POOL_BATCH = 4
COMPARED_IMAGES = 64

ArtifactFor = Callable[[str, str], Artifact]
RunnerFor = Callable[[str, str], Runner]


@pytest.fixture(scope="session")
def backends_split() -> DigitsSplit:
    return load_digits_split(FAST.seed)


@pytest.fixture(scope="session")
def backends_trained(tmp_path_factory: pytest.TempPathFactory) -> TrainedModel:
    return train_or_load("cnn", TINY, FAST, tmp_path_factory.mktemp("trained"))


@pytest.fixture(scope="session")
def artifact_for(backends_trained: TrainedModel, backends_split: DigitsSplit,
                 tmp_path_factory: pytest.TempPathFactory) -> ArtifactFor:
    """(backend, precision) -> the artifact that backend loads, all from the same weights."""
    cache = ArtifactCache(tmp_path_factory.mktemp("artifacts"))
    built: dict[tuple[str, str], Artifact] = {}

    def get(backend: str, precision: str) -> Artifact:
        if (backend, precision) not in built:
            candidate = Candidate("cnn", TINY, precision, POOL_BATCH, backend)
            built[backend, precision], _ = build_artifact(candidate, backends_trained, cache,
                                                          backends_split.x_train[:64])
        return built[backend, precision]

    return get


@pytest.fixture(scope="session")
def fp32_artifacts(artifact_for: ArtifactFor) -> dict[str, Artifact]:
    """Backend name -> the fp32 artifact it loads."""
    return {backend: artifact_for(backend, "fp32") for backend in sorted(BACKENDS)}


# OpenVINO runs fp16 and bf16 only on a CPU with the arithmetic for it (its backend refuses the
# others, rightly); which the CPU has is OpenVINO's OPTIMIZATION_CAPABILITIES.
_OPENVINO_CAPABILITY = {"fp16": "FP16", "bf16": "BF16"}


def cpu_lacks(backend: str, precision: str) -> str:
    """Why this machine's CPU cannot run ``backend`` at ``precision`` (a test then skips), or
    ""; only what the hardware decides, never what dse's capability table says."""
    needed = _OPENVINO_CAPABILITY.get(precision) if backend == "openvino" else None
    if needed is None:
        return ""
    import openvino

    found = [str(item) for item in
             openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")]
    if needed in found:
        return ""
    return (f"this CPU lacks {precision} arithmetic (no {needed} in OpenVINO's "
            f"OPTIMIZATION_CAPABILITIES: {', '.join(found)})")


@pytest.fixture(scope="session")
def runner_pool(artifact_for: ArtifactFor) -> Iterator[RunnerFor]:
    """(backend, precision) -> a runner compiled once per session for ``CPU_PROFILE``.

    fp32 runners use the default knobs (threads: the profile's budget); the others set the thread
    knob to 1, so both paths are covered without a compile of their own.
    """
    import torch

    runners: dict[tuple[str, str], Runner] = {}

    def get(backend: str, precision: str) -> Runner:
        lacking = cpu_lacks(backend, precision)
        if lacking:
            pytest.skip(lacking)
        if (backend, precision) not in runners:
            compiler = get_backend(backend)
            knobs = {} if precision == "fp32" else {compiler.thread_knob: 1}
            threads = torch.get_num_threads()
            try:
                runners[backend, precision] = compiler.compile(
                    artifact_for(backend, precision), knobs, CPU_PROFILE, POOL_BATCH)
            finally:
                # Compiling sets torch's process-wide pool; leave it as found.
                torch.set_num_threads(threads)
        return runners[backend, precision]

    yield get
    for runner in runners.values():
        runner.close()


@pytest.fixture(scope="session")
def reference_logits(backends_trained: TrainedModel, backends_split: DigitsSplit) -> np.ndarray:
    """The fp32 torch logits of the first ``COMPARED_IMAGES`` test images: what runners match."""
    import torch

    images = np.ascontiguousarray(backends_split.x_test[:COMPARED_IMAGES], dtype=np.float32)
    with torch.inference_mode():
        logits: np.ndarray = backends_trained.module(torch.from_numpy(images)).numpy()
    return logits


@pytest.fixture
def cpu_profile() -> HardwareProfile:
    return CPU_PROFILE
