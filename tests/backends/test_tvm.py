"""The tvm backend: the ONNX artifact imported into Relax and compiled for this CPU agrees with ONNX
Runtime, records its target, and refuses what it cannot run with the reason. The shared suites
(test_conformance, test_capability_walk) cover the Runner contract; MetaSchedule tuning and the reuse
of its cached database are tested through a real campaign (tests/search/test_compilers_campaign.py:
each process that tunes first imports TVM's tensor intrinsics, ~26 s, so one test tunes)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from dse.artifacts import Artifact
from dse.backends import CAPABILITIES, get_backend
from dse.core.exceptions import BuildError
from tests.backends.conftest import CPU_PROFILE, ArtifactFor

TVM = get_backend("tvm")


def _ort_logits(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    result: np.ndarray = session.run(None, {session.get_inputs()[0].name: x})[0]
    return result


def _batch(artifact: Artifact, count: int) -> np.ndarray:
    return np.random.default_rng(0).random((count, *artifact.input_shape), dtype=np.float32)


def test_untuned_build_agrees_with_onnxruntime_and_records_its_target(
        artifact_for: ArtifactFor) -> None:
    artifact = artifact_for("tvm", "fp32")
    x = _batch(artifact, 4)
    assert artifact.path is not None
    with TVM.compile(artifact, {"num_threads": 1}, CPU_PROFILE, 4) as runner:
        np.testing.assert_allclose(runner.run(x), _ort_logits(artifact.path, x), atol=1e-5)
        # Compiled for batches of 4: a partial batch is padded and cut back.
        np.testing.assert_allclose(runner.run(x[:3]), _ort_logits(artifact.path, x[:3]), atol=1e-5)
        info = runner.describe()
        assert runner.compile_seconds is not None and runner.compile_seconds > 0
        assert runner.tuning_seconds is None
    assert info["threads"] == "1" and info["tuning_trials"] == "0"
    assert '"kind":"llvm"' in info["target"] and '"mcpu":' in info["target"]
    assert (info["importer"], info["executor"]) == ("relax.frontend.onnx", "relax VM")


@pytest.mark.parametrize("value", [-1, 1.5, True, "8", 20_001])
def test_a_bad_tuning_budget_is_refused_before_anything_is_built(value: object) -> None:
    with pytest.raises(BuildError, match=r"knob 'tuning_trials' must be an integer from 0 "
                                         r"\(TVM's default schedules\) to 20000"):
        TVM.check_knob_values({"tuning_trials": value})


def test_what_tvm_does_not_run_is_refused_with_the_reason() -> None:
    assert CAPABILITIES["tvm", "fp32", "cpu"].supported
    assert CAPABILITIES["tvm", "fp16", "cuda"].supported
    int8 = CAPABILITIES["tvm", "int8", "cpu"]
    assert not int8.supported and "float arithmetic" in int8.reason
    fp16 = CAPABILITIES["tvm", "fp16", "cpu"]
    assert not fp16.supported and "emulates fp16" in fp16.reason
    assert "from source against JetPack" in CAPABILITIES["tvm", "fp32", "jetson"].reason


def test_an_operator_the_importer_lacks_is_a_one_line_build_error(tmp_path: Path) -> None:
    node = helper.make_node("Det", ["input"], ["output"])
    graph = helper.make_graph([node], "det",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, 3, 3])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    path = tmp_path / "det.onnx"
    onnx.save(model, path)
    artifact = Artifact("onnx", path, "fp32", (3, 3), path.stat().st_size)
    with pytest.raises(BuildError) as raised:
        TVM.compile(artifact, {}, CPU_PROFILE, 2)
    message = str(raised.value)
    assert message.startswith("tvm: the Relax ONNX importer could not import det.onnx")
    assert "\n" not in message and "Det" in message


def test_a_missing_runtime_names_the_extra_to_install(artifact_for: ArtifactFor,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tvm", None)  # `import tvm` now raises ImportError
    with pytest.raises(BuildError, match=r"tvm: apache-tvm cannot be imported .*install dse\[tvm\]"):
        TVM.compile(artifact_for("tvm", "fp32"), {}, CPU_PROFILE, 2)


def test_frozen_import_frames_are_found_without_scanning_every_module() -> None:
    # TVM's tensor intrinsics call inspect.stack() hundreds of times on import; each frame of
    # the frozen import machinery made inspect scan sys.modules (113 s in a device worker).
    import importlib
    import inspect

    from dse.backends.tvm.tuning import register_frozen_import_frames

    register_frozen_import_frames()
    for name in ("importlib._bootstrap", "importlib._bootstrap_external"):
        # Answered from inspect's file cache: without it, getmodule scans and finds nothing.
        assert inspect.getmodule(None, f"<frozen {name}>") is importlib.import_module(name)
