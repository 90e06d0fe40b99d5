"""ONNX export: one self-contained file, named tensors, a dynamic batch axis, same numbers."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
import pytest

from dse.accuracy import TrainedModel
from dse.accuracy.digits import DigitsSplit
from dse.artifacts import export_onnx
from dse.core.exceptions import BuildError

if TYPE_CHECKING:
    import torch


def test_the_file_is_valid_and_self_contained(fp32_onnx: Path) -> None:
    assert list(fp32_onnx.parent.iterdir()) == [fp32_onnx]  # no external-data side files
    model = onnx.load(str(fp32_onnx), load_external_data=False)
    onnx.checker.check_model(model, full_check=True)
    assert all(t.data_location != onnx.TensorProto.EXTERNAL for t in model.graph.initializer)


def test_input_output_names_and_dynamic_batch(fp32_onnx: Path) -> None:
    graph = onnx.load(str(fp32_onnx)).graph
    (inp,), (out,) = graph.input, graph.output
    assert inp.name == "input"
    assert out.name == "logits"
    in_dims = [d.dim_param or d.dim_value for d in inp.type.tensor_type.shape.dim]
    out_dims = [d.dim_param or d.dim_value for d in out.type.tensor_type.shape.dim]
    assert in_dims == ["batch", 1, 8, 8]
    assert out_dims == ["batch", 10]


def test_batch_norms_are_folded_into_the_convs(fp32_onnx: Path,
                                                build_trained: TrainedModel) -> None:
    import torch

    ops = {node.op_type for node in onnx.load(str(fp32_onnx)).graph.node}
    assert "Conv" in ops
    assert "BatchNormalization" not in ops
    # ... on a copy: the trained module keeps its own.
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in build_trained.module.modules())


@pytest.mark.parametrize("batch", [1, 2, 7])
def test_onnxruntime_reproduces_torch(fp32_onnx: Path, build_trained: TrainedModel,
                                      build_split: DigitsSplit, batch: int) -> None:
    import onnxruntime as ort
    import torch

    x = build_split.x_test[:batch]
    session = ort.InferenceSession(str(fp32_onnx), providers=["CPUExecutionProvider"])
    (got,) = session.run(["logits"], {"input": x})
    with torch.inference_mode():
        want = build_trained.module(torch.from_numpy(x)).numpy()
    assert got.shape == (batch, 10)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@functools.cache
def _unexportable_class() -> type[torch.nn.Module]:
    """Registers the test operator ``dse_test::opaque`` (once per process) and returns a module
    class that calls it."""
    import torch

    @torch.library.custom_op("dse_test::opaque", mutates_args=(), schema="(Tensor x) -> Tensor")
    def _opaque(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @_opaque.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    class _Unexportable(torch.nn.Module):
        """Calls an operator ONNX has no translation for."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = _opaque(x)
            return out

    return _Unexportable


def test_export_failure_is_a_build_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.onnx"
    with pytest.raises(BuildError, match=r"ONNX export failed: \w+: .*dse_test.opaque"):
        export_onnx(_unexportable_class()(), (1, 8, 8), path)
    assert not path.exists()
