"""The exporter with torchlib's registry built once gives the graph ``torch.onnx.export`` gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from dse.artifacts import dynamo_export
from dse.artifacts.onnx_export import export_onnx


def _graph(path: Path) -> tuple[object, ...]:
    model = onnx.load(str(path))
    graph = model.graph
    return ([node.op_type for node in graph.node], [str(i.type) for i in graph.input],
            [str(o.type) for o in graph.output], [(o.domain, o.version) for o in model.opset_import],
            sorted((t.name, list(t.dims)) for t in graph.initializer))


def test_the_shared_registry_export_matches_torch_onnx_export(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(8 * 14 * 14, 10)).eval()
    for name in ("first", "second"):
        export_onnx(module, (3, 16, 16), tmp_path / f"{name}.onnx")
    # Two exports, one registry: the second reused the first's.
    assert dynamo_export._torchlib_registry.cache_info().hits >= 1
    # The public exporter, as a torch without the internals would take it.
    monkeypatch.setattr(dynamo_export, "_exporter_entry", lambda: None)
    export_onnx(module, (3, 16, 16), tmp_path / "public.onnx")

    shared, public = _graph(tmp_path / "second.onnx"), _graph(tmp_path / "public.onnx")
    assert shared == public
    assert 'dim_param: "batch"' in str(shared[1])  # the named batch axis, as the public one has
    x = np.random.default_rng(0).random((5, 3, 16, 16), dtype=np.float32)
    outputs = [ort.InferenceSession(str(tmp_path / f"{name}.onnx")).run(None, {"input": x})[0]
               for name in ("second", "public")]
    np.testing.assert_array_equal(*outputs)
