"""Operators of known FLOP counts, profiled by ONNX Runtime on this CPU and judged against the
ceilings measured on it now: a large matrix product is compute-bound, an elementwise chain is
memory-bound."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")

ROWS, COLS, OUT = 2048, 2048, 256


def _model(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((COLS, OUT)).astype(np.float32), "w")
    scalars = [numpy_helper.from_array(np.array([v], np.float32), f"c{k}")
               for k, v in enumerate((0.5, 1.5, -0.25))]
    nodes = [helper.make_node("Add", ["x", "c0"], ["a"], name="add_1"),
             helper.make_node("Mul", ["a", "c1"], ["b"], name="mul_2"),
             helper.make_node("Add", ["b", "c2"], ["c"], name="add_3"),
             helper.make_node("MatMul", ["c", "w"], ["y"], name="matmul_4")]
    graph = helper.make_graph(
        nodes, "roofline", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, COLS])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [ROWS, OUT])],
        [weight, *scalars])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 10)
    onnx.save(model, path)


def test_matmul_compute_bound_elementwise_memory_bound(tmp_path: Path) -> None:
    from dse.artifacts import Artifact
    from dse.backends import get_backend
    from dse.backends.op_profile import ProfileRequest
    from dse.profiling.ceilings import measure_ceilings
    from dse.profiling.op_table import op_table
    from dse.spec import HardwareProfile

    path = tmp_path / "roofline.onnx"
    _model(path)
    artifact = Artifact("onnx", path, "fp32", (COLS,), path.stat().st_size)
    profile = HardwareProfile(name="test-cpu", kind="cpu", backends=["onnxruntime"],
                              precisions=["fp32"])
    backend = get_backend("onnxruntime")
    knobs = {"intra_op_threads": 1}
    batch = np.ones((ROWS, COLS), np.float32)
    out = tmp_path / "profile"
    out.mkdir()
    with backend.compile(artifact, knobs, profile, ROWS) as runner:
        found = backend.profile_ops(ProfileRequest(runner, artifact, knobs, profile, batch, 3, out))
    assert found.runs == 3 and len(found.run_us) == 3
    assert found.trace is not None and found.trace.exists()
    ceilings = measure_ceilings("cpu", "fp32", 1)
    table = op_table(found.ops, found.runs, ceilings).set_index("name")
    matmul = table.loc["matmul_4"]
    assert matmul["flops"] == 2 * ROWS * COLS * OUT
    assert matmul["bytes"] == 4 * (ROWS * COLS + COLS * OUT + ROWS * OUT)
    assert matmul["calls"] == 3
    assert matmul["verdict"] == "compute-bound", matmul["verdict_reason"]
    for name in ("add_1", "mul_2", "add_3"):
        row = table.loc[name]
        assert row["flops"] == ROWS * COLS
        assert row["verdict"] == "memory-bound", (name, row["verdict_reason"], ceilings)
