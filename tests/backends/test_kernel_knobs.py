"""Kernel-level knobs: the torch backends' ``attention_kernel`` and the CUDA-graph knobs of eager
torch (``cuda_graph``), ONNX Runtime's CUDA provider (``enable_cuda_graph``) and TensorRT
(``cuda_graph``).

Here (no GPU): their values are checked without a runtime, a cpu device refuses the CUDA-only
ones in one line, and ``attention_kernel`` runs (and is refused where it would change nothing) on
the CPU. The GPU tests capture and replay a graph on a CUDA device and skip, naming what is
missing, where there is none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from dse.artifacts import Artifact
from dse.backends import get_backend
from dse.core.exceptions import BuildError
from dse.spec import HardwareProfile
from tests.backends._devices import NO_CUDA, has_cuda, missing_runtime
from tests.backends.conftest import POOL_BATCH, ArtifactFor

if TYPE_CHECKING:
    import torch

CPU = HardwareProfile(name="test-cpu", kind="cpu", backends=["torch", "torch_compile"],
                      precisions=["fp32"], max_threads=1)
GPU = HardwareProfile(name="test-gpu", kind="cuda",
                      backends=["torch", "onnxruntime_cuda", "tensorrt"],
                      precisions=["fp32", "fp16"], max_threads=2)
TORCH_BACKENDS = ("torch", "torch_compile")
# (backend, knob) of each CUDA-graph knob.
GRAPH_KNOBS = (("torch", "cuda_graph"), ("onnxruntime_cuda", "enable_cuda_graph"),
               ("tensorrt", "cuda_graph"))
SEQUENCE = (6, 8)


def _torch_artifact(module: torch.nn.Module) -> Artifact:
    return Artifact("torch", None, "fp32", SEQUENCE, 0, module.eval())


def _attention_model() -> torch.nn.Module:
    """A factory-style model: one projection, scaled_dot_product_attention, a classifier."""
    import torch

    class Attend(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = torch.nn.Linear(8, 24)
            self.head = torch.nn.Linear(8, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(x).unsqueeze(1).chunk(3, dim=-1)
            mixed = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            out: torch.Tensor = self.head(mixed.squeeze(1).mean(dim=1))
            return out

    torch.manual_seed(0)
    return Attend()


# --- knob values, without a runtime or a device ------------------------------------------------

def test_the_knobs_are_declared() -> None:
    assert {"attention_kernel", "cuda_graph"} <= get_backend("torch").knobs
    assert "attention_kernel" in get_backend("torch_compile").knobs
    assert "cuda_graph" not in get_backend("torch_compile").knobs  # mode reduce-overhead is it
    assert "enable_cuda_graph" in get_backend("onnxruntime_cuda").knobs
    assert "cuda_graph" in get_backend("tensorrt").knobs


@pytest.mark.parametrize("backend", TORCH_BACKENDS)
@pytest.mark.parametrize("value", ["cudnn", "FLASH", 1, None])
def test_a_bad_attention_kernel_is_named(backend: str, value: object) -> None:
    with pytest.raises(BuildError, match=r"^knob 'attention_kernel' must be one of \['default', "
                                         r"'math', 'flash', 'efficient'\], got "):
        get_backend(backend).check_knob_values({"attention_kernel": value})


@pytest.mark.parametrize(("backend", "knob"), GRAPH_KNOBS)
@pytest.mark.parametrize("value", ["true", 1, 0.0])
def test_a_graph_knob_is_true_or_false(backend: str, knob: str, value: object) -> None:
    get_backend(backend).check_knob_values({knob: True})
    with pytest.raises(BuildError, match=rf"^knob '{knob}' must be true or false, got "):
        get_backend(backend).check_knob_values({knob: value})


@pytest.mark.parametrize(("backend", "knob"), GRAPH_KNOBS)
def test_a_cpu_device_refuses_a_graph_in_one_line(backend: str, knob: str) -> None:
    instance = get_backend(backend)
    with pytest.raises(BuildError, match=rf"^knob '{knob}' true needs a CUDA device \(.*\); a cpu "
                                         r"device has none$"):
        instance.check_knob_device({knob: True}, "cpu")
    instance.check_knob_device({knob: False}, "cpu")
    for kind in ("cuda", "jetson"):
        instance.check_knob_device({knob: True}, kind)


@pytest.mark.parametrize("backend", TORCH_BACKENDS)
def test_a_cpu_device_refuses_the_cuda_only_attention_kernel(backend: str) -> None:
    instance = get_backend(backend)
    with pytest.raises(BuildError, match=r"^knob 'attention_kernel' 'efficient': torch has no "
                                         r"efficient SDPA kernel for a cpu device \(it is "
                                         r"CUDA-only\); allowed there: default, math, flash$"):
        instance.check_knob_device({"attention_kernel": "efficient"}, "cpu")
    for kernel in ("default", "math", "flash"):
        instance.check_knob_device({"attention_kernel": kernel}, "cpu")
    instance.check_knob_device({"attention_kernel": "efficient"}, "cuda")


def test_the_graph_knob_leaves_the_tensorrt_engine_key_alone() -> None:
    """cuda_graph is how the engine is launched: the cached engine serves both values."""
    from dse.backends.tensorrt.settings import resolve_settings

    assert resolve_settings({"cuda_graph": True}, 1) == resolve_settings({}, 1)


# --- compile on this CPU -------------------------------------------------------------------------

def test_compile_refuses_a_graph_on_a_cpu_device(artifact_for: ArtifactFor) -> None:
    with pytest.raises(BuildError, match="knob 'cuda_graph' true needs a CUDA device"):
        get_backend("torch").compile(artifact_for("torch", "fp32"), {"cuda_graph": True}, CPU,
                                     POOL_BATCH)


@pytest.mark.parametrize("backend", TORCH_BACKENDS)
@pytest.mark.parametrize("kernel", ["math", "flash"])
def test_attention_kernel_runs_a_model_that_calls_sdpa(backend: str, kernel: str) -> None:
    import torch

    module = _attention_model()
    x = np.random.default_rng(0).standard_normal((4, *SEQUENCE)).astype(np.float32)
    with torch.inference_mode():
        want = module.eval()(torch.from_numpy(x)).numpy()
    knobs: dict[str, Any] = {"attention_kernel": kernel}
    with get_backend(backend).compile(_torch_artifact(module), knobs, CPU, 4) as runner:
        assert runner.describe()["attention_kernel"] == kernel
        np.testing.assert_allclose(runner.run(x), want, atol=1e-5, rtol=1e-4)


def test_attention_kernel_is_refused_where_it_would_change_nothing() -> None:
    from dse.models import get_family

    no_sdpa = get_family("transformer").build({"seq_len": 8})  # explicit attention: no SDPA
    artifact = Artifact("torch", None, "fp32", (8, 8), 0, no_sdpa.eval())
    with pytest.raises(BuildError, match=r"^knob 'attention_kernel' 'flash' would change nothing: "
                                         r"the model calls no torch\.nn\.functional\."
                                         r"scaled_dot_product_attention$"):
        get_backend("torch").compile(artifact, {"attention_kernel": "flash"}, CPU, 2)
    own = get_family("transformer").build({"seq_len": 8, "attention": "math"})
    artifact = Artifact("torch", None, "fp32", (8, 8), 0, own.eval())
    with pytest.raises(BuildError, match="the model chooses its own SDPA kernel"):
        get_backend("torch").compile(artifact, {"attention_kernel": "flash"}, CPU, 2)
    # The same kernel as the model's own is no contradiction.
    get_backend("torch").compile(artifact, {"attention_kernel": "math"}, CPU, 2).close()


# --- on a CUDA device ----------------------------------------------------------------------------

def _require(backend: str) -> None:
    if not has_cuda():
        pytest.skip(NO_CUDA)
    missing = missing_runtime(backend)
    if missing is not None:
        pytest.skip(missing)


def _compare_with_and_without(backend: str, knob: str, artifact: Artifact, x: np.ndarray,
                              atol: float) -> None:
    """The graph runner gives the plain runner's logits, on a full and on a partial batch."""
    instance = get_backend(backend)
    with instance.compile(artifact, {}, GPU, POOL_BATCH) as plain:
        want = plain.run(x)
    with instance.compile(artifact, {knob: True}, GPU, POOL_BATCH) as graphed:
        assert len(x) == POOL_BATCH
        np.testing.assert_allclose(graphed.run(x), want, atol=atol)
        np.testing.assert_allclose(graphed.run(x[:1]), want[:1], atol=atol)  # padded
        np.testing.assert_allclose(graphed.run(x), want, atol=atol)  # replayed again
        described = graphed.describe()
    assert any(value in ("true", "1") for key, value in described.items()
               if key in ("cuda_graph", "enable_cuda_graph"))


@pytest.mark.gpu
@pytest.mark.parametrize(("backend", "knob"), [("torch", "cuda_graph"),
                                               ("onnxruntime_cuda", "enable_cuda_graph"),
                                               ("tensorrt", "cuda_graph")])
def test_a_cuda_graph_replays_what_the_plain_runner_computes(artifact_for: ArtifactFor,
                                                             backend: str, knob: str) -> None:
    _require(backend)
    artifact = artifact_for(backend, "fp32")
    x = np.random.default_rng(0).standard_normal(
        (POOL_BATCH, *artifact.input_shape)).astype(np.float32)
    _compare_with_and_without(backend, knob, artifact, x, 1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["math", "efficient"])
def test_attention_kernels_on_the_gpu(kernel: str) -> None:
    """fp32 on a GPU: math and efficient run; flash needs fp16/bf16 (not checked here)."""
    _require("torch")
    import torch

    module = _attention_model()
    x = np.random.default_rng(0).standard_normal((4, *SEQUENCE)).astype(np.float32)
    with torch.inference_mode():
        want = module.eval()(torch.from_numpy(x)).numpy()
    with get_backend("torch").compile(_torch_artifact(module), {"attention_kernel": kernel},
                                      GPU, 4) as runner:
        np.testing.assert_allclose(runner.run(x), want, atol=1e-4)
