"""A trained tiny cnn, its artifacts, and one compiled runner per (backend, precision), shared by
the backend tests: the bench of dse.testing's backend suite (``BackendBench``), one per session.

torch.compile costs seconds per compile, so runners are compiled once per test session
(``runner_pool``) and shared; tests that need a runner of their own use eager torch or
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

from dse.accuracy import TrainedModel
from dse.accuracy.digits import DigitsSplit
from dse.artifacts import Artifact
from dse.backends import BACKENDS, Runner
from dse.spec import HardwareProfile
from dse.testing.backends import ARCH, TRAINING, BackendBench

# The model of dse.testing's backend suite, which these tests share with it.
TINY = ARCH
FAST = TRAINING
CPU_PROFILE = HardwareProfile(name="test-cpu", kind="cpu", backends=sorted(BACKENDS),
                              precisions=["fp32", "fp16", "bf16", "int8"], max_threads=2)
# The candidate batch size of pooled runners, and how many test images the suites compare.
POOL_BATCH = BackendBench.batch_size
COMPARED_IMAGES = BackendBench.compared_images

ArtifactFor = Callable[[str, str], Artifact]
RunnerFor = Callable[[str, str], Runner]


@pytest.fixture(scope="session")
def backends_bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackendBench]:
    """The backend suite's bench, one per session: the trained model, its artifacts and the
    pooled runners of every test here."""
    bench = BackendBench(tmp_path_factory.mktemp("backends"))
    yield bench
    bench.close()


@pytest.fixture(scope="session")
def backends_split(backends_bench: BackendBench) -> DigitsSplit:
    return backends_bench.split


@pytest.fixture(scope="session")
def backends_trained(backends_bench: BackendBench) -> TrainedModel:
    return backends_bench.trained


@pytest.fixture(scope="session")
def artifact_for(backends_bench: BackendBench) -> ArtifactFor:
    """(backend, precision) -> the artifact that backend loads, all from the same weights."""
    return backends_bench.artifact


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
def runner_pool(backends_bench: BackendBench) -> RunnerFor:
    """(backend, precision) -> a runner compiled once per session for ``CPU_PROFILE``.

    fp32 runners use the default knobs (threads: the profile's budget); the others set the thread
    knob to 1, so both paths are covered without a compile of their own.
    """

    def get(backend: str, precision: str) -> Runner:
        lacking = cpu_lacks(backend, precision)
        if lacking:
            pytest.skip(lacking)
        knobs = {} if precision == "fp32" else {BACKENDS[backend].thread_knob: 1}
        return backends_bench.runner(backend, precision, CPU_PROFILE, knobs)

    return get


@pytest.fixture(scope="session")
def reference_logits(backends_bench: BackendBench) -> np.ndarray:
    """The fp32 torch logits of the first ``COMPARED_IMAGES`` test images: what runners match."""
    return backends_bench.reference


@pytest.fixture
def cpu_profile() -> HardwareProfile:
    return CPU_PROFILE
