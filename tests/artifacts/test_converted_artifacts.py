"""A backend's own file format (``.tflite``, ``.pte``, or one dse has never heard of: the list is
open): dse.artifacts calls the backend's declared conversion once per configuration and caches the
file under everything it depends on.

The conversion here is a stand-in written for the test (it saves the module's weights at the asked
precision, as ``torch.save`` writes them), so the keying is tested without any converter installed;
the real conversions are tested with their backends (tests/backends/test_litert.py,
tests/backends/test_executorch.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dse.accuracy import TrainedModel
from dse.accuracy.digits import DigitsSplit
from dse.artifacts import ArtifactCache
from dse.artifacts.artifact import TORCH_DTYPES, _converted, build_artifact
from dse.core.candidate import Candidate
from dse.core.exceptions import BuildError
from dse.plugins.backends import BackendDeclaration, Capability, Conversion, ConversionRequest
from tests.artifacts.conftest import TINY


class Converter:
    """Records each request; writes the module's state_dict at the request's precision."""

    def __init__(self) -> None:
        self.requests: list[ConversionRequest] = []

    def __call__(self, request: ConversionRequest, out: Path) -> None:
        import torch

        self.requests.append(request)
        if request.precision == "bf16":
            raise BuildError("toy converter: no bf16")
        dtype = getattr(torch, TORCH_DTYPES.get(request.precision, "float32"))
        torch.save({name: tensor.to(dtype) for name, tensor in request.module.state_dict().items()},
                   out)


def _declaration(converter: Converter) -> BackendDeclaration:
    return BackendDeclaration(
        name="toyconvert", artifact_format="toyfmt",
        capability=lambda precision, kind: Capability(True, "toy"),
        knobs=frozenset({"threads", "layout"}), thread_knob="threads",
        conversion=Conversion(suffix=".toy", version=1, libraries=("numpy",),
                              build_knobs=frozenset({"layout"}), convert=converter))


def _build(converter: Converter, trained: TrainedModel, cache: ArtifactCache,
           calibration: np.ndarray, precision: str = "fp32", batch: int = 4,
           **knobs: Any) -> tuple[Path, float]:
    candidate = Candidate("cnn", TINY, precision, batch, "toyconvert", knobs=knobs)
    artifact, seconds = _converted(candidate, _declaration(converter), trained, cache, calibration)
    assert artifact.format == "toyfmt" and artifact.path is not None
    assert artifact.size_bytes == artifact.path.stat().st_size > 0
    return artifact.path, seconds


def test_a_conversion_runs_once_per_configuration(build_trained: TrainedModel,
                                                  build_split: DigitsSplit, tmp_path: Path) -> None:
    converter, cache = Converter(), ArtifactCache(tmp_path)
    calibration = build_split.x_train[:16]
    first, seconds = _build(converter, build_trained, cache, calibration, layout="a", threads=1)
    assert seconds > 0 and first.suffix == ".toy"
    request = converter.requests[0]
    assert (request.batch_size, request.precision, request.input_shape) == (
        4, "fp32", build_trained.input_shape)
    # A runtime knob (threads) does not change the file; a build knob, batch size or precision does.
    again, seconds = _build(converter, build_trained, cache, calibration, layout="a", threads=2)
    assert (again, seconds, len(converter.requests)) == (first, 0.0, 1)
    others = {_build(converter, build_trained, cache, calibration, layout="b")[0],
              _build(converter, build_trained, cache, calibration, batch=8, layout="a")[0],
              _build(converter, build_trained, cache, calibration, "fp16", layout="a")[0]}
    assert len(others | {first}) == 4 and len(converter.requests) == 4


def test_int8_files_are_keyed_by_their_calibration_samples(
        build_trained: TrainedModel, build_split: DigitsSplit, tmp_path: Path) -> None:
    converter, cache = Converter(), ArtifactCache(tmp_path)
    one = _build(converter, build_trained, cache, build_split.x_train[:16], "int8")[0]
    two = _build(converter, build_trained, cache, build_split.x_train[16:32], "int8")[0]
    assert one != two
    np.testing.assert_array_equal(converter.requests[1].calibration, build_split.x_train[16:32])
    # fp32 does not depend on the samples: other samples, the same file.
    fp32 = _build(converter, build_trained, cache, build_split.x_train[:16])[0]
    assert _build(converter, build_trained, cache, build_split.x_train[16:32])[0] == fp32


def test_a_failed_conversion_caches_nothing(build_trained: TrainedModel,
                                            build_split: DigitsSplit, tmp_path: Path) -> None:
    converter, cache = Converter(), ArtifactCache(tmp_path)
    for _ in range(2):
        with pytest.raises(BuildError, match="toy converter: no bf16"):
            _build(converter, build_trained, cache, build_split.x_train[:16], "bf16")
    assert len(converter.requests) == 2
    assert not list(tmp_path.rglob("*.toy"))


def test_a_declaration_of_a_converted_format_needs_its_conversion() -> None:
    with pytest.raises(ValueError, match="needs conversion"):
        BackendDeclaration(name="half", artifact_format="pte",
                           capability=lambda precision, kind: Capability(True, "toy"),
                           knobs=frozenset({"threads"}), thread_knob="threads")
    with pytest.raises(ValueError, match="build_knobs"):
        BackendDeclaration(name="half", artifact_format="pte",
                           capability=lambda precision, kind: Capability(True, "toy"),
                           knobs=frozenset({"threads"}), thread_knob="threads",
                           conversion=Conversion(".pte", 1, (), frozenset({"delegate"}),
                                                 Converter()))


def test_an_onnx_backend_with_float_at_runtime_gets_the_fp32_graph(
        build_trained: TrainedModel, build_split: DigitsSplit, tmp_path: Path) -> None:
    pytest.importorskip("openvino", reason="OpenVINO (dse[openvino]) is not installed")
    cache = ArtifactCache(tmp_path)
    calibration = build_split.x_train[:16]
    fp32, _ = build_artifact(Candidate("cnn", TINY, "fp32", 4, "openvino"), build_trained, cache,
                             calibration)
    bf16, _ = build_artifact(Candidate("cnn", TINY, "bf16", 4, "openvino"), build_trained, cache,
                             calibration)
    assert bf16.path == fp32.path and bf16.precision == "bf16"


def test_a_format_is_any_short_name_and_a_converted_one_needs_its_conversion() -> None:
    def declared(artifact_format: str, conversion: Conversion | None) -> BackendDeclaration:
        return BackendDeclaration(
            name="toyformats", artifact_format=artifact_format,
            capability=lambda precision, kind: Capability(True, "toy"),
            knobs=frozenset({"threads"}), thread_knob="threads", conversion=conversion)

    conversion = Conversion(suffix=".toy", version=1, libraries=(), build_knobs=frozenset(),
                            convert=Converter())
    assert declared("toyfmt", conversion).artifact_format == "toyfmt"
    with pytest.raises(ValueError, match="a 'toyfmt' artifact needs conversion"):
        declared("toyfmt", None)
    with pytest.raises(ValueError, match="a 'onnx' artifact takes no conversion"):
        declared("onnx", conversion)
    with pytest.raises(ValueError, match="is not a short name"):
        declared("my format", conversion)
