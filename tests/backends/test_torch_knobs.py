"""The torch backends' own knobs and precisions: precision_mode, the compile mode, compile time,
device placement, and the torch artifact at each precision.

Every compile here is eager (milliseconds) or fails before inductor runs; the torch.compile runners
checked here are the session's pooled ones.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pytest

from dse.accuracy import TrainedModel
from dse.accuracy.digits import DigitsSplit
from dse.artifacts import Artifact, ArtifactCache, build_artifact
from dse.backends import get_backend
from dse.backends.torch.compiled import TorchCompileRunner
from dse.core.candidate import Candidate
from dse.core.exceptions import BuildError
from dse.spec import HardwareProfile
from dse.testing.backends import TOLERANCES, check_runner
from tests.backends._devices import NO_CUDA, has_cuda
from tests.backends.conftest import COMPARED_IMAGES, POOL_BATCH, TINY, ArtifactFor, RunnerFor

if TYPE_CHECKING:
    import torch

TORCH_BACKENDS = ["torch", "torch_compile"]
CUDA_PROFILE = HardwareProfile(name="test-gpu", kind="cuda", backends=["torch", "torch_compile"],
                               precisions=["fp32", "fp16", "bf16"], max_threads=2)


@pytest.fixture(autouse=True)
def _keep_torch_threads() -> Iterator[None]:
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("precision_mode", ["dtype", "autocast"])
def test_eager_precision_modes_both_run(precision: str, precision_mode: str,
                                        artifact_for: ArtifactFor, cpu_profile: HardwareProfile,
                                        backends_split: DigitsSplit,
                                        reference_logits: np.ndarray) -> None:
    import torch

    artifact = artifact_for("torch", precision)
    with get_backend("torch").compile(artifact, {"precision_mode": precision_mode}, cpu_profile,
                                      POOL_BATCH) as runner:
        info = runner.describe()
        assert info["precision_mode"] == precision_mode
        assert info["dtype"] == {"fp16": "float16", "bf16": "bfloat16"}[precision]
        check_runner(runner, precision, backends_split.x_test[:COMPARED_IMAGES], reference_logits)
    # The artifact's module is shared by every candidate of the arch: it stays fp32.
    assert artifact.module is not None
    assert {p.dtype for p in artifact.module.parameters()} == {torch.float32}


def test_autocast_at_fp32_is_plain_fp32(artifact_for: ArtifactFor, cpu_profile: HardwareProfile,
                                        backends_split: DigitsSplit) -> None:
    x = backends_split.x_test[:POOL_BATCH]
    logits = {}
    for mode in ("dtype", "autocast"):
        with get_backend("torch").compile(artifact_for("torch", "fp32"), {"precision_mode": mode},
                                          cpu_profile, POOL_BATCH) as runner:
            logits[mode] = runner.run(x)
    np.testing.assert_array_equal(logits["autocast"], logits["dtype"])


@pytest.mark.parametrize("backend", TORCH_BACKENDS)
def test_unknown_precision_mode_is_a_build_error(backend: str, artifact_for: ArtifactFor,
                                                 cpu_profile: HardwareProfile) -> None:
    with pytest.raises(BuildError, match=r"'precision_mode' must be one of \['dtype', 'autocast'\], "
                                         r"got 'fp8'"):
        get_backend(backend).compile(artifact_for(backend, "bf16"), {"precision_mode": "fp8"},
                                     cpu_profile, POOL_BATCH)


def test_unknown_compile_mode_is_a_build_error(artifact_for: ArtifactFor,
                                               cpu_profile: HardwareProfile) -> None:
    with pytest.raises(BuildError, match=r"'mode' must be one of \['default', 'reduce-overhead', "
                                         r"'max-autotune'\], got 'fastest'"):
        get_backend("torch_compile").compile(artifact_for("torch_compile", "fp32"),
                                             {"mode": "fastest"}, cpu_profile, POOL_BATCH)


def test_reduce_overhead_on_a_cpu_is_a_build_error(artifact_for: ArtifactFor,
                                                   cpu_profile: HardwareProfile) -> None:
    with pytest.raises(BuildError, match="mode 'reduce-overhead' cannot run on cpu device "
                                         "'test-cpu': it records CUDA graphs, which need a CUDA "
                                         "device"):
        get_backend("torch_compile").compile(artifact_for("torch_compile", "fp32"),
                                             {"mode": "reduce-overhead"}, cpu_profile, POOL_BATCH)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_compile_time_is_on_the_runner_and_in_describe(precision: str,
                                                       runner_pool: RunnerFor) -> None:
    runner = runner_pool("torch_compile", precision)
    assert isinstance(runner, TorchCompileRunner)
    assert runner.compile_seconds > 0
    info = runner.describe()
    assert info["compile_seconds"] == f"{runner.compile_seconds:.3f}"
    assert info["mode"] == "default"
    assert info["precision_mode"] == "dtype"


def _unlowerable() -> torch.nn.Module:
    import torch

    class _Unlowerable(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("no kernel for this operator\n  (a page of inductor detail follows)")

    return _Unlowerable()


def test_compile_failure_is_a_build_error_with_its_first_line(
        cpu_profile: HardwareProfile) -> None:
    artifact = Artifact("torch", None, "fp32", (1, 8, 8), 0, _unlowerable())
    with pytest.raises(BuildError, match=r"^torch.compile \(mode 'default', fp32\) failed: "
                                         r"RuntimeError: no kernel for this operator$"):
        get_backend("torch_compile").compile(artifact, {}, cpu_profile, 2)


# A string condition: evaluated at setup (before the fixtures), not at collection, which then needs
# no torch.
@pytest.mark.skipif("has_cuda()", reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("backend", TORCH_BACKENDS)
def test_a_cuda_profile_without_cuda_is_a_build_error(backend: str,
                                                      artifact_for: ArtifactFor) -> None:
    with pytest.raises(BuildError, match=r"'test-gpu' is a cuda device, but torch .* reports no "
                                         r"CUDA device"):
        get_backend(backend).compile(artifact_for(backend, "fp32"), {}, CUDA_PROFILE, POOL_BATCH)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("precision_mode", ["dtype", "autocast"])
def test_eager_on_the_gpu(precision: str, precision_mode: str, artifact_for: ArtifactFor,
                          backends_split: DigitsSplit, reference_logits: np.ndarray) -> None:
    if not has_cuda():
        pytest.skip(NO_CUDA)
    import torch

    artifact = artifact_for("torch", precision)
    if precision == "bf16" and torch.cuda.get_device_capability() < (8, 0):
        with pytest.raises(BuildError, match=r"needs CUDA compute capability >= 8\.0"):
            get_backend("torch").compile(artifact, {}, CUDA_PROFILE, POOL_BATCH)
        return
    with get_backend("torch").compile(artifact, {"precision_mode": precision_mode}, CUDA_PROFILE,
                                      POOL_BATCH) as runner:
        assert runner.describe()["device"] == "cuda"
        check_runner(runner, precision, backends_split.x_test[:COMPARED_IMAGES], reference_logits)
    assert artifact.module is not None
    assert {p.device.type for p in artifact.module.parameters()} == {"cpu"}


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_torch_artifact_is_the_fp32_module_sized_at_its_precision(
        precision: str, backends_trained: TrainedModel, backends_split: DigitsSplit,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    import torch

    cache = ArtifactCache(tmp_path_factory.mktemp("sizes"))
    sizes = {}
    for p in ("fp32", precision):
        artifact, seconds = build_artifact(Candidate("cnn", TINY, p, 4, "torch_compile"),
                                           backends_trained, cache, backends_split.x_train[:8])
        assert (artifact.format, artifact.precision, seconds) == ("torch", p, 0.0)
        assert artifact.module is backends_trained.module
        sizes[p] = artifact.size_bytes
    floats = [t for t in backends_trained.module.state_dict().values() if t.is_floating_point()]
    # Two bytes fewer per floating-point weight, give or take torch.save's 64-byte alignment of
    # each tensor's record in the zip.
    saved = sizes["fp32"] - sizes[precision]
    assert abs(saved - 2 * sum(t.numel() for t in floats)) <= 64 * len(floats)
    buffer = io.BytesIO()
    torch.save(backends_trained.module.state_dict(), buffer)
    assert sizes["fp32"] == buffer.getbuffer().nbytes


@pytest.mark.parametrize("backend", TORCH_BACKENDS)
def test_torch_int8_artifact_is_refused(backend: str, backends_trained: TrainedModel,
                                        backends_split: DigitsSplit,
                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    with pytest.raises(BuildError, match="would need a quantized torch module"):
        build_artifact(Candidate("cnn", TINY, "int8", 4, backend), backends_trained,
                       ArtifactCache(tmp_path_factory.mktemp("int8")), backends_split.x_train[:8])


def test_tolerances_cover_every_precision() -> None:
    from dse.backends.capabilities import PRECISIONS

    assert set(TOLERANCES) == set(PRECISIONS)


def test_odd_inputs_reuse_the_compiled_graph(runner_pool: RunnerFor,
                                             backends_split: DigitsSplit) -> None:
    from torch._dynamo.utils import counters

    runner = runner_pool("torch_compile", "fp32")
    images = np.ascontiguousarray(backends_split.x_test[:POOL_BATCH], dtype=np.float32)
    full = runner.run(images)
    graphs = counters["stats"]["unique_graphs"]
    # Same memory, but the length-1 channel axis has a stride no earlier input had: numpy calls it
    # contiguous, a compiled graph's guards would not.
    odd = np.lib.stride_tricks.as_strided(images, strides=(images.strides[0], 4 * 999,
                                                           *images.strides[2:]))
    np.testing.assert_array_equal(runner.run(odd), full)
    # The tail of an accuracy pass is padded to the compiled batch, not recompiled for.
    for rows in (1, POOL_BATCH - 1):
        np.testing.assert_allclose(runner.run(images[:rows]), full[:rows],
                                   atol=TOLERANCES["fp32"].atol)
    assert counters["stats"]["unique_graphs"] == graphs


def test_a_runner_that_shares_the_module_counts_its_weights_as_borrowed(
        artifact_for: ArtifactFor, cpu_profile: HardwareProfile) -> None:
    # fp32 on the CPU runs the artifact's own module (resident before the runner existed: its
    # weights are part of the model's footprint all the same); fp16 runs a copy the runner made.
    fp32 = artifact_for("torch", "fp32")
    assert fp32.module is not None
    weights = sum(t.numel() * t.element_size()
                  for t in [*fp32.module.parameters(), *fp32.module.buffers()])
    with get_backend("torch").compile(fp32, {}, cpu_profile, POOL_BATCH) as runner:
        assert runner.borrowed_bytes == weights > 0
    with get_backend("torch").compile(artifact_for("torch", "fp16"), {}, cpu_profile,
                                      POOL_BATCH) as runner:
        assert runner.borrowed_bytes == 0
    with get_backend("onnxruntime").compile(artifact_for("onnxruntime", "fp32"), {}, cpu_profile,
                                            POOL_BATCH) as runner:
        assert runner.borrowed_bytes == 0  # the session loaded its own copy from the file
