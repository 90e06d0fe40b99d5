"""The executorch backend: int8 through PT2E keeps the fp32 model's decisions, what XNNPACK does not
take is counted and named (never passed off as delegated), conversion failures carry the
converter's words, and the process-wide thread pool is shared safely. The shared suites
(test_conformance, test_capability_walk) cover the Runner contract; conversions here are of tiny
modules (about a second each), and the cnn's runners come from the session's pool."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("executorch.runtime", reason="executorch is not installed (dse[executorch])")

import torch  # after the skip: executorch brings torch

from dse.accuracy import TrainedModel
from dse.accuracy.digits import DigitsSplit
from dse.artifacts import Artifact
from dse.backends import CAPABILITIES, get_backend
from dse.core.exceptions import BuildError
from dse.plugins.backends import ConversionRequest, declaration
from tests.backends.conftest import CPU_PROFILE, POOL_BATCH, RunnerFor

EXECUTORCH = get_backend("executorch")
FEATURES = 8


class _Cumsum(torch.nn.Module):
    """Two linear layers around a cumulative sum, which XNNPACK has no kernel for."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(FEATURES, FEATURES)
        self.second = torch.nn.Linear(FEATURES, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.cumsum(self.first(x), dim=1))


class _DataDependent(torch.nn.Module):
    """A branch on the input's values: torch.export cannot trace it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x if x.sum() > 0 else -x


def _converted(module: torch.nn.Module, tmp_path: Path, precision: str = "fp32",
               **knobs: object) -> Artifact:
    conversion = declaration("executorch").conversion
    assert conversion is not None
    path = tmp_path / f"model-{precision}{conversion.suffix}"
    request = ConversionRequest(module.eval(), (FEATURES,), 2, precision,
                                np.zeros((4, FEATURES), np.float32), knobs)
    conversion.convert(request, path)
    return Artifact("pte", path, precision, (FEATURES,), path.stat().st_size)


def _rows(count: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((count, FEATURES)).astype(np.float32)


def test_int8_keeps_the_fp32_decisions_and_is_fully_delegated(
        runner_pool: RunnerFor, backends_trained: TrainedModel,
        backends_split: DigitsSplit) -> None:
    images = np.ascontiguousarray(backends_split.x_test[:256], dtype=np.float32)
    with torch.inference_mode():
        reference = backends_trained.module(torch.from_numpy(images)).numpy()
    runner = runner_pool("executorch", "int8")
    logits = np.concatenate([runner.run(images[i:i + POOL_BATCH])
                             for i in range(0, len(images), POOL_BATCH)])
    agreement = float((logits.argmax(1) == reference.argmax(1)).mean())
    assert agreement >= 0.9, f"int8 top-1 agrees with fp32 on {agreement:.3f} of 256 images"
    info = runner.describe()
    assert (info["delegation"], info["ops_outside_delegate"]) == ("full", "0")
    assert info["delegate_backends"] == "XnnpackBackend"
    assert "XNNPACKQuantizer" in info["quantization"] and "per-channel" in info["quantization"]


def test_an_operator_xnnpack_lacks_is_counted_and_named(tmp_path: Path) -> None:
    module = _Cumsum()
    with EXECUTORCH.compile(_converted(module, tmp_path), {"num_threads": 1}, CPU_PROFILE,
                            2) as runner:
        x = _rows(2)
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(runner.run(x), want, atol=1e-5)
        info = runner.describe()
    assert info["delegation"] == "partial"
    assert info["delegated_subgraphs"] == "2"  # the linear layers on either side of the cumsum
    assert info["ops_outside_delegate"] == "1"
    assert info["ops_outside_delegate_names"] == "aten::cumsum=1"
    assert info["calls_by_backend"] == "XnnpackBackend=2,kernels=1"


def test_without_the_delegate_nothing_is_delegated(tmp_path: Path) -> None:
    module = _Cumsum()
    artifact = _converted(module, tmp_path, delegate=False)
    with EXECUTORCH.compile(artifact, {"num_threads": 1, "delegate": False}, CPU_PROFILE,
                            2) as runner:
        x = _rows(1)  # a partial batch: padded to 2 and cut back
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(runner.run(x), want, atol=1e-5)
        info = runner.describe()
    assert (info["delegation"], info["delegated_subgraphs"]) == ("none", "0")
    assert info["delegate_backends"] == "none" and info["delegate_knob"] == "false"
    assert int(info["ops_outside_delegate"]) >= 3 and "aten::cumsum=1" in info["ops_outside_delegate_names"]


def test_fp16_conversion_leaves_the_module_as_it_was(tmp_path: Path) -> None:
    module = _Cumsum()
    before = {name: tensor.clone() for name, tensor in module.state_dict().items()}
    artifact = _converted(module, tmp_path, "fp16")
    assert all(torch.equal(before[name], tensor) for name, tensor in module.state_dict().items())
    assert all(p.dtype == torch.float32 for p in module.parameters())
    with EXECUTORCH.compile(artifact, {"num_threads": 1}, CPU_PROFILE, 2) as runner:
        x = _rows(2)
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        got = runner.run(x)
        info = runner.describe()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=2e-2)
    assert (info["input_dtype"], info["precision"]) == ("float16", "fp16")


def test_a_model_torch_export_cannot_trace_is_a_one_line_build_error(tmp_path: Path) -> None:
    with pytest.raises(BuildError) as raised:
        _converted(_DataDependent(), tmp_path)
    message = str(raised.value)
    assert message.startswith("executorch: torch.export could not export the model: "
                              "GuardOnDataDependentSymNode: Could not guard on data-dependent")
    assert "\n" not in message
    assert not list(tmp_path.iterdir())


def test_int8_without_the_delegate_is_refused_before_converting(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=r"int8 runs only inside the XNNPACK delegate"):
        _converted(_Cumsum(), tmp_path, "int8", delegate=False)


@pytest.mark.parametrize(("knobs", "message"), [
    ({"delegate": "yes"}, r"knob 'delegate' must be true or false, got 'yes'"),
    ({"delegate": 1}, r"knob 'delegate' must be true or false, got 1"),
    ({"num_threads": 0}, r"knob 'num_threads' must be an integer >= 1, got 0"),
    ({"threads": 2}, r"no knob\(s\) \['threads'\]"),
])
def test_bad_knob_values_are_refused_without_the_runtime(knobs: dict[str, object],
                                                         message: str) -> None:
    with pytest.raises(BuildError, match=message):
        EXECUTORCH.check_knob_values(knobs)


def test_runners_of_different_thread_counts_share_the_process_pool(
        runner_pool: RunnerFor, backends_split: DigitsSplit) -> None:
    from executorch.extension.pybindings import portable_lib

    images = backends_split.x_test[:POOL_BATCH]
    wide, narrow = runner_pool("executorch", "fp32"), runner_pool("executorch", "int8")
    assert (wide.describe()["threads"], narrow.describe()["threads"]) == ("2", "1")
    first = wide.run(images)
    # Each run resizes the one pool to its runner's count and reloads a method made on the old one.
    for runner, threads in ((narrow, 1), (wide, 2), (narrow, 1), (wide, 2)):
        runner.run(images)
        assert portable_lib._threadpool_get_thread_count() == threads
    np.testing.assert_array_equal(wide.run(images), first)


def test_capabilities_name_where_it_runs_and_why_not() -> None:
    for precision in ("fp32", "fp16", "int8"):
        assert CAPABILITIES["executorch", precision, "cpu"].supported
        jetson = CAPABILITIES["executorch", precision, "jetson"]
        assert jetson.supported and "Arm CPU cores" in jetson.reason
        assert "CUDA backend is not used" in jetson.reason
    for precision in ("bf16", "fp8"):
        assert not CAPABILITIES["executorch", precision, "cpu"].supported
    cuda = CAPABILITIES["executorch", "fp32", "cuda"]
    assert not cuda.supported and "measured with a cpu profile" in cuda.reason
