"""An ONNX model with an operator the runtime cannot handle is infeasible, with the runtime's words."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from dse.artifacts import Artifact
from dse.backends import get_backend
from dse.core.exceptions import BuildError
from dse.spec import HardwareProfile

PROFILE = HardwareProfile(name="test-cpu", kind="cpu", backends=["onnxruntime"],
                          precisions=["fp32"], max_threads=1)


def _model_with(op_type: str, domain: str, path: Path) -> Path:
    node = helper.make_node(op_type, ["input"], ["logits"], domain=domain)
    graph = helper.make_graph(
        [node], "unsupported",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])])
    opsets = [helper.make_opsetid("", 20)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)
    return path


@pytest.mark.parametrize(("op_type", "domain"), [("NoSuchOperator", "com.example"),
                                                 ("NoSuchOperator", "")])
def test_unknown_operator_is_a_build_error_with_the_runtime_message(
        tmp_path: Path, op_type: str, domain: str) -> None:
    path = _model_with(op_type, domain, tmp_path / "model.onnx")
    artifact = Artifact("onnx", path, "fp32", (1, 8, 8), path.stat().st_size)
    with pytest.raises(BuildError) as caught:
        get_backend("onnxruntime").compile(artifact, {"intra_op_threads": 1}, PROFILE, 1)
    message = str(caught.value)
    assert message.startswith("onnxruntime could not load model.onnx: ")
    assert "NoSuchOperator" in message  # the runtime's own words name the operator
