"""Bad models for the tests of ``tests/search/test_bad_models.py`` and
``tests/trial/test_prepare_nonfinite.py``: bring-your-own factories that misbehave, and a writer of
real ONNX files that do. The ``*_when_small`` factories misbehave only for
``hidden == BAD_HIDDEN`` and build ``digits_mlp`` otherwise: the good values keep a campaign
going."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

if TYPE_CHECKING:
    import torch

# The arch value that triggers the misbehaviour of the ``*_when_small`` factories.
BAD_HIDDEN = 16
# Beyond float16's largest finite value (65504): finite in fp32, Inf once cast to fp16.
FP16_OVERFLOW = 1e5


def raises_when_small(arch: Mapping[str, Any]) -> tuple[torch.nn.Module, torch.Tensor]:
    """Raises the user's bug for ``hidden == BAD_HIDDEN``."""
    if int(arch["hidden"]) == BAD_HIDDEN:
        raise RuntimeError("user factory bug: hidden=16 is not supported")
    from dse.examples.models import digits_mlp

    return digits_mlp(arch)


def hangs_when_small(arch: Mapping[str, Any]) -> tuple[torch.nn.Module, torch.Tensor]:
    """Never returns (in test time) for ``hidden == BAD_HIDDEN``."""
    if int(arch["hidden"]) == BAD_HIDDEN:
        time.sleep(3600)
    from dse.examples.models import digits_mlp

    return digits_mlp(arch)


def fails_in_training(arch: Mapping[str, Any]) -> tuple[torch.nn.Module, tuple[int, ...]]:
    """A perceptron whose forward works in eval mode, as the driver's check runs it, but raises
    in training mode, as a library model whose training forward wants labels: every
    architecture fails alike on the device, for one same reason."""
    import torch

    class NeedsLabels(torch.nn.Module):
        def __init__(self, hidden: int) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, hidden),
                                           torch.nn.ReLU(), torch.nn.Linear(hidden, 10))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.training:
                raise TypeError(TRAINING_FAILURE)
            out: torch.Tensor = self.net(x)
            return out

    return NeedsLabels(int(arch["hidden"])), (1, 8, 8)


#: What :func:`fails_in_training` raises in training mode.
TRAINING_FAILURE = "forward() missing 1 required positional argument: 'labels' in training mode"


def nan_weights(arch: Mapping[str, Any]) -> tuple[torch.nn.Module, tuple[int, ...]]:
    """A perceptron on 1x8x8 inputs whose weights are all NaN: every output is NaN, whatever
    training does."""
    import torch

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, int(arch["hidden"])),
                                torch.nn.ReLU(), torch.nn.Linear(int(arch["hidden"]), 10))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(float("nan"))
    return model, (1, 8, 8)


def nan_when_small(arch: Mapping[str, Any]) -> tuple[torch.nn.Module, tuple[int, ...]]:
    """:func:`nan_weights` for ``hidden == BAD_HIDDEN``, a sound perceptron otherwise."""
    if int(arch["hidden"]) == BAD_HIDDEN:
        return nan_weights(arch)
    from dse.examples.models import digits_mlp

    return digits_mlp(arch)[0], (1, 8, 8)


def overflows_in_fp16(arch: Mapping[str, Any]) -> tuple[torch.nn.Module, tuple[int, ...]]:
    """A linear layer whose outputs are about ``FP16_OVERFLOW``: finite in fp32, Inf in fp16.
    Meant without a dataset (training would shrink the bias)."""
    import torch

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    with torch.no_grad():
        model[1].weight.zero_()
        model[1].bias.fill_(FP16_OVERFLOW)
    return model, (1, 8, 8)


def write_linear_onnx(path: Path, *, weight: float = 0.01, op_domain: str = "",
                      input_dims: Sequence[int | str] = ("n", 1, 8, 8),
                      reshape_batch: int | None = None, classes: int = 10) -> Path:
    """A digits classifier (1x8x8 -> ``classes`` logits) as a real ONNX file: Flatten, Gemm
    (every weight ``weight``), then Identity — or, with ``op_domain``, a node of that operator
    set, which ONNX Runtime has no kernel for. ``input_dims`` declares the input's shape (a string
    is a symbolic axis); ``reshape_batch`` flattens with a Reshape to ``[reshape_batch, 64]``
    instead, so the graph only runs at that batch size whatever the input declares."""
    w = numpy_helper.from_array(np.full((64, classes), weight, dtype=np.float32), "w")
    b = numpy_helper.from_array(np.zeros(classes, dtype=np.float32), "b")
    weights = [w, b]
    if reshape_batch is None:
        nodes = [helper.make_node("Flatten", ["x"], ["flat"])]
    else:
        weights.append(numpy_helper.from_array(np.array([reshape_batch, 64], dtype=np.int64),
                                               "flat_shape"))
        nodes = [helper.make_node("Reshape", ["x", "flat_shape"], ["flat"])]
    nodes.append(helper.make_node("Gemm", ["flat", "w", "b"], ["gemm"]))
    opsets = [helper.make_opsetid("", 17)]
    if op_domain:
        nodes.append(helper.make_node("Mystery", ["gemm"], ["y"], domain=op_domain))
        opsets.append(helper.make_opsetid(op_domain, 1))
    else:
        nodes.append(helper.make_node("Identity", ["gemm"], ["y"]))
    graph = helper.make_graph(
        nodes, "digits", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(input_dims))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [input_dims[0], classes])],
        weights)
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(path))
    return path


def one_objective_only(candidate: Any) -> dict[str, float]:
    """A custom evaluator (the experiment's ``evaluator:``) that leaves the second objective
    out: the result is ok, and the search loop must fail it saying which metric is missing."""
    return {"zdt_f1": float(candidate.params["x1"])}
