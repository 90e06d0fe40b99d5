"""The litert backend: int8 that stays faithful to fp32, delegation read back from the interpreter
(a fallback op is named, XNNPACK off means builtin kernels only), the converter's and the
interpreter's refusals as one-line build errors, knobs, and concurrent runs. The shared suites
(test_conformance, test_capability_walk) cover the Runner contract at every CPU precision."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("litert_torch", reason="litert-torch (dse[litert]) is not installed")
pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert (dse[litert]) is not installed")

import torch

from dse.accuracy.digits import DigitsSplit
from dse.artifacts import Artifact
from dse.backends import CAPABILITIES, get_backend
from dse.backends.litert.converter import convert_to_tflite
from dse.core.exceptions import BuildError
from dse.plugins.backends import ConversionRequest
from tests.backends.conftest import CPU_PROFILE, POOL_BATCH, ArtifactFor, RunnerFor

LITERT = get_backend("litert")
# The int8 runner must pick fp32's class on at least this share of the compared test images
# (0.988 measured on the first 256; every flip was at a fp32 top-2 margin below 0.7).
INT8_AGREEMENT = 0.9
AGREEMENT_IMAGES = 256


class _CumsumHead(torch.nn.Module):
    """A linear layer behind a cumulative sum: CUMSUM converts to a builtin LiteRT op that
    XNNPACK does not take, while the FULLY_CONNECTED after it is delegated."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.cumsum(x, dim=1))


class _DataDependent(torch.nn.Module):
    """A forward whose branch depends on the input's values: torch.export cannot trace it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return x


class _Sorted(torch.nn.Module):
    """torch.sort converts to STABLEHLO_SORT, which this LiteRT interpreter has no kernel for."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x, dim=1).values


def _converted(module: torch.nn.Module, tmp_path: Path, batch: int = 2) -> Artifact:
    path = tmp_path / "model.tflite"
    request = ConversionRequest(module, (8,), batch, "fp32", None, {})
    convert_to_tflite(request, path)
    return Artifact("tflite", path, "fp32", (8,), path.stat().st_size)


def test_int8_is_full_integer_delegated_and_agrees_with_fp32(runner_pool: RunnerFor,
                                                             backends_split: DigitsSplit) -> None:
    images = backends_split.x_test[:AGREEMENT_IMAGES]
    fp32, int8 = runner_pool("litert", "fp32"), runner_pool("litert", "int8")
    classes = [np.concatenate([runner.run(images[i:i + POOL_BATCH])
                               for i in range(0, len(images), POOL_BATCH)]).argmax(1)
               for runner in (fp32, int8)]
    agreement = float(np.mean(classes[0] == classes[1]))
    assert agreement >= INT8_AGREEMENT, f"int8 picks fp32's class on {agreement:.3f} of the images"
    info = int8.describe()
    assert info["quantization"].startswith("full-integer int8")
    assert (info["input_dtype"], info["output_dtype"]) == ("int8", "int8")
    assert (info["delegate"], info["delegation"], info["ops_outside_delegate"]) == ("XNNPACK", "full",
                                                                                   "0")
    assert info["ops_outside_delegate_names"] == ""
    assert info["delegated_ops"] == info["model_ops"] != "0"
    assert info["ai_edge_litert_version"] and info["litert_torch_version"]


def test_xnnpack_off_runs_builtin_kernels_only(artifact_for: ArtifactFor, runner_pool: RunnerFor,
                                               backends_split: DigitsSplit) -> None:
    images = backends_split.x_test[:POOL_BATCH]
    with LITERT.compile(artifact_for("litert", "fp32"), {"xnnpack": False, "num_threads": 1},
                        CPU_PROFILE, POOL_BATCH) as runner:
        info = runner.describe()
        logits = runner.run(images)
    assert (info["delegate"], info["delegation"], info["delegated_ops"]) == ("none", "none", "0")
    assert info["op_resolver"] == "BUILTIN_WITHOUT_DEFAULT_DELEGATES"
    assert info["delegate_partitions"] == "0" and info["threads"] == "1"
    assert "CONV_2D=" in info["ops_outside_delegate_names"]
    assert info["ops_outside_delegate"] == info["model_ops"]
    np.testing.assert_allclose(logits, runner_pool("litert", "fp32").run(images), atol=1e-4)


def test_an_op_xnnpack_does_not_take_is_named_as_partial_delegation(tmp_path: Path) -> None:
    module = _CumsumHead().train()  # in training mode, to see the conversion leave it so
    weights = {name: tensor.clone() for name, tensor in module.state_dict().items()}
    artifact = _converted(module, tmp_path)
    assert module.training
    assert all(torch.equal(weights[name], tensor) for name, tensor in module.state_dict().items())
    x = np.random.default_rng(0).random((2, 8), dtype=np.float32)
    with LITERT.compile(artifact, {"num_threads": 2}, CPU_PROFILE, 2) as runner:
        info = runner.describe()
        logits = runner.run(x)
    assert (info["delegation"], info["ops_outside_delegate"]) == ("partial", "1")
    assert info["ops_outside_delegate_names"] == "CUMSUM=1"
    assert (info["model_ops"], info["delegated_ops"], info["threads"]) == ("2", "1", "2")
    with torch.inference_mode():
        np.testing.assert_allclose(logits, module.eval()(torch.from_numpy(x)).numpy(), atol=1e-5)


def test_a_module_the_converter_refuses_is_a_one_line_build_error(tmp_path: Path) -> None:
    with pytest.raises(BuildError) as raised:
        _converted(_DataDependent(), tmp_path)
    message = str(raised.value)
    assert message.startswith("litert: litert_torch could not convert the model: ")
    assert "data-dependent" in message and "\n" not in message
    assert not (tmp_path / "model.tflite").exists()


def test_a_file_the_interpreter_refuses_is_a_one_line_build_error(tmp_path: Path) -> None:
    artifact = _converted(_Sorted(), tmp_path)
    with pytest.raises(BuildError) as raised:
        LITERT.compile(artifact, {"num_threads": 1}, CPU_PROFILE, 2)
    message = str(raised.value)
    assert message.startswith("litert: the LiteRT interpreter could not load model.tflite: ValueError: ")
    assert "STABLEHLO_SORT" in message and "\n" not in message


def test_precisions_without_a_conversion_are_refused_before_converting(tmp_path: Path) -> None:
    request = ConversionRequest(_CumsumHead(), (8,), 2, "bf16", None, {})
    with pytest.raises(BuildError, match=r"litert converts \['fp16', 'fp32', 'int8'\], not 'bf16'"):
        convert_to_tflite(request, tmp_path / "model.tflite")


@pytest.mark.parametrize(("knobs", "message"), [
    ({"xnnpack": "yes"}, "knob 'xnnpack' must be true or false, got 'yes'"),
    ({"xnnpack": 1}, "knob 'xnnpack' must be true or false, got 1"),
    ({"num_threads": 0}, "knob 'num_threads' must be an integer >= 1, got 0"),
    ({"delegate": "gpu"}, r"backend 'litert' has no knob\(s\) \['delegate'\]"),
])
def test_bad_knob_values_are_refused_without_a_runtime(knobs: dict[str, object], message: str) -> None:
    with pytest.raises(BuildError, match=message):
        LITERT.check_knob_values(knobs)


def test_capabilities_say_where_litert_runs() -> None:
    for kind in ("cpu", "jetson"):
        for precision in ("fp32", "fp16", "int8"):
            assert CAPABILITIES["litert", precision, kind].supported
    assert "Arm CPU cores" in CAPABILITIES["litert", "fp32", "jetson"].reason
    assert "computed in fp32" in CAPABILITIES["litert", "fp16", "cpu"].reason
    cuda = CAPABILITIES["litert", "fp32", "cuda"]
    assert not cuda.supported and "mobile GPUs (OpenCL/OpenGL)" in cuda.reason
    for precision in ("bf16", "fp8"):
        assert not CAPABILITIES["litert", precision, "cpu"].supported
