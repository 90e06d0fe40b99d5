"""graph_stats: exact counts on hand-built graphs, and on real torch exports (fp32 and int8 QDQ)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dse.artifacts.onnx_export import export_onnx
from dse.artifacts.quantize import quantize_int8
from dse.models import get_family, op_costs
from dse.models.graph_statistics import graph_stats

if TYPE_CHECKING:
    import torch

F32 = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def _init(name: str, *shape: int, dtype: Any = np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(dtype), name)


def _value(name: str, *shape: int | str, elem: int = F32) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, list(shape))


def _model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
           outputs: Sequence[onnx.ValueInfoProto],
           initializers: Sequence[onnx.TensorProto] = (), *, opset: int = 20,
           value_info: Sequence[onnx.ValueInfoProto] = (),
           domains: Sequence[str] = ()) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(initializers),
                              value_info=list(value_info))
    imports = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, 1) for d in domains)]
    return helper.make_model(graph, opset_imports=imports)


def _conv_relu() -> onnx.ModelProto:
    """1x3x8x8 -> Conv 3x3, stride 1, pad 1, 4 channels, bias -> Relu."""
    conv = helper.make_node("Conv", ["input", "w", "b"], ["conv"], kernel_shape=[3, 3],
                            pads=[1, 1, 1, 1])
    relu = helper.make_node("Relu", ["conv"], ["out"])
    return _model([conv, relu], [_value("input", "batch", 3, 8, 8)],
                  [_value("out", "batch", 4, 8, 8)], [_init("w", 4, 3, 3, 3), _init("b", 4)])


# ---- hand-built graphs, hand-counted ----

def test_conv_with_bias_exact_counts() -> None:
    stats = graph_stats(_conv_relu())
    # MACs = 4 out channels * 8*8 pixels * (3 in channels * 3*3 kernel) = 6912
    assert stats.macs == 6912
    # params = 4*3*3*3 weights + 4 biases = 112, fp32: 448 bytes
    assert (stats.params, stats.weight_bytes) == (112, 448)
    # FLOPs = 2*6912 (Conv) + 4*8*8 = 256 (Relu, one per output element) = 14080
    assert stats.by_op_type == {"Conv": 13824, "Relu": 256}
    assert stats.flops == 14080
    # Intermediate: the conv output, 4*8*8 fp32 = 1024 B. Input 3*8*8*4 = 768 B, output 1024 B.
    assert (stats.activation_bytes, stats.input_bytes, stats.output_bytes) == (1024, 768, 1024)
    # AI = 14080 / (448 + 1024 + 768 + 1024) = 14080 / 3264 FLOP/B
    assert stats.arithmetic_intensity == pytest.approx(14080 / 3264)
    assert stats.unknown_ops == ()
    assert stats.batch_size == 1


def test_batch_size_scales_work_and_activations_not_weights() -> None:
    model = _conv_relu()
    stats = graph_stats(model, batch_size=4)
    assert stats.macs == 4 * 6912
    assert stats.flops == 4 * 14080
    assert (stats.activation_bytes, stats.input_bytes, stats.output_bytes) == (4096, 3072, 4096)
    assert (stats.params, stats.weight_bytes) == (112, 448)
    assert stats.arithmetic_intensity == pytest.approx(4 * 14080 / (448 + 4096 + 3072 + 4096))
    # The caller's model keeps its dynamic batch axis.
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"


def test_depthwise_dilated_conv() -> None:
    # 8 channels, group 8, 3x3 dilated by 2 (5x5 reach), pad 2: output stays 8x8.
    conv = helper.make_node("Conv", ["input", "w"], ["out"], kernel_shape=[3, 3], group=8,
                            dilations=[2, 2], pads=[2, 2, 2, 2])
    stats = graph_stats(_model([conv], [_value("input", "batch", 8, 8, 8)],
                               [_value("out", "batch", 8, 8, 8)], [_init("w", 8, 1, 3, 3)]))
    # MACs = 8 channels * 8*8 pixels * (1 in channel per group * 3*3) = 4608; params 8*1*3*3 = 72
    assert (stats.macs, stats.params, stats.flops) == (4608, 72, 9216)


def test_strided_conv_with_asymmetric_pads() -> None:
    # 9x9, 3x3, stride 2, pads top/left 1, bottom/right 0: (9 + 1 - 3) // 2 + 1 = 4 -> 4x4.
    conv = helper.make_node("Conv", ["input", "w"], ["out"], kernel_shape=[3, 3], strides=[2, 2],
                            pads=[1, 1, 0, 0])
    stats = graph_stats(_model([conv], [_value("input", "batch", 3, 9, 9)],
                               [_value("out", "batch", 6, 4, 4)], [_init("w", 6, 3, 3, 3)]))
    # MACs = 6 out channels * 4*4 pixels * 3*3*3 = 2592
    assert stats.macs == 2592
    assert stats.output_bytes == 6 * 4 * 4 * 4


def test_conv_transpose() -> None:
    # 4x4x4 -> ConvTranspose to 2 channels, 3x3, stride 2: (4 - 1) * 2 + 3 = 9 -> 2x9x9.
    deconv = helper.make_node("ConvTranspose", ["input", "w"], ["out"], kernel_shape=[3, 3],
                              strides=[2, 2])
    stats = graph_stats(_model([deconv], [_value("input", "batch", 4, 4, 4)],
                               [_value("out", "batch", 2, 9, 9)], [_init("w", 4, 2, 3, 3)]))
    # Each of the 4*4*4 = 64 input elements meets 2 out channels * 3*3 kernel: 64 * 18 = 1152
    assert stats.macs == 1152
    assert stats.output_bytes == 2 * 9 * 9 * 4


def test_gemm_with_trans_b_and_trans_a() -> None:
    # 64 -> 10: A (batch, 64), B stored (10, 64) with transB, bias C (10,).
    gemm = helper.make_node("Gemm", ["input", "w", "b"], ["out"], transB=1)
    model = _model([gemm], [_value("input", "batch", 64)], [_value("out", "batch", 10)],
                   [_init("w", 10, 64), _init("b", 10)])
    stats = graph_stats(model)
    # MACs = 1 * 10 * 64 = 640 (bias adds not counted); params = 640 + 10 = 650
    assert (stats.macs, stats.flops, stats.params) == (640, 1280, 650)
    assert stats.by_op_type == {"Gemm": 1280}
    # Same product with A given transposed, (64, batch), and B stored (64, 10): K is A's axis 0.
    transpose = helper.make_node("Transpose", ["input"], ["a_t"], perm=[1, 0])
    gemm_t = helper.make_node("Gemm", ["a_t", "w"], ["out"], transA=1)
    model_t = _model([transpose, gemm_t], [_value("input", "batch", 64)],
                     [_value("out", "batch", 10)], [_init("w", 64, 10)])
    stats_t = graph_stats(model_t, batch_size=3)
    # MACs = 3 * 10 * 64 = 1920; Transpose moves data only
    assert stats_t.macs == 1920
    assert stats_t.by_op_type == {"Transpose": 0, "Gemm": 3840}


def test_batched_matmul_attention() -> None:
    # scores = Q K^T: (2,4,16,8) x (2,4,8,16) -> (2,4,16,16); softmax; out = scores V:
    # (2,4,16,16) x (2,4,16,8) -> (2,4,16,8).
    qk = helper.make_node("MatMul", ["q", "k_t"], ["scores"])
    softmax = helper.make_node("Softmax", ["scores"], ["probs"], axis=-1)
    av = helper.make_node("MatMul", ["probs", "v"], ["out"])
    model = _model([qk, softmax, av],
                   [_value("q", "batch", 4, 16, 8), _value("k_t", "batch", 4, 8, 16),
                    _value("v", "batch", 4, 16, 8)], [_value("out", "batch", 4, 16, 8)])
    stats = graph_stats(model, batch_size=2)
    # QK^T: 2*4*16*16 outputs * K=8 = 16384; AV: 2*4*16*8 outputs * K=16 = 16384
    assert stats.macs == 32768
    # FLOPs = 2 * 32768 + softmax 2*4*16*16 = 2048 -> 67584
    assert stats.by_op_type == {"MatMul": 65536, "Softmax": 2048}
    assert stats.params == 0
    # Intermediates: scores and probs, 2048 fp32 each = 16384 B
    assert stats.activation_bytes == 16384


def test_matmul_broadcasts_a_weight_over_the_batch() -> None:
    # (2,4,16,8) x (8,16) weight -> (2,4,16,16): 2*4*16*16 * 8 = 16384 MACs; params 128
    matmul = helper.make_node("MatMul", ["input", "w"], ["out"])
    stats = graph_stats(_model([matmul], [_value("input", "batch", 4, 16, 8)],
                               [_value("out", "batch", 4, 16, 16)], [_init("w", 8, 16)]),
                        batch_size=2)
    assert (stats.macs, stats.params) == (16384, 128)


def test_elementwise_ops() -> None:
    relu = helper.make_node("Relu", ["input"], ["r"])
    add = helper.make_node("Add", ["r", "input"], ["out"])
    stats = graph_stats(_model([relu, add], [_value("input", "batch", 4, 5)],
                               [_value("out", "batch", 4, 5)]))
    # 4*5 = 20 elements: Relu 20 + Add 20 = 40 FLOPs, no MACs; intermediate r: 20 * 4 B = 80 B
    assert (stats.macs, stats.flops, stats.activation_bytes) == (0, 40, 80)
    assert stats.by_op_type == {"Relu": 20, "Add": 20}


def test_shape_arguments_and_literals_are_not_weights() -> None:
    # (batch,3,4) -Reshape(int64 [0,-1])-> (batch,12) -Clip(rank-0 bounds)-> -MatMul(12x5)->
    # -Add(bias 5)-> -ReduceMean(int64 axes [1], keepdims 0)-> (batch,)
    nodes = [
        helper.make_node("Reshape", ["input", "shape"], ["flat"]),
        helper.make_node("Clip", ["flat", "lo", "hi"], ["clipped"]),
        helper.make_node("MatMul", ["clipped", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["biased"]),
        helper.make_node("ReduceMean", ["biased", "axes"], ["out"], keepdims=0),
    ]
    initializers = [
        numpy_helper.from_array(np.array([0, -1], np.int64), "shape"),
        numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
        numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
        _init("w", 12, 5), _init("b", 5),
        numpy_helper.from_array(np.array([1], np.int64), "axes"),
    ]
    stats = graph_stats(_model(nodes, [_value("input", "batch", 3, 4)],
                               [_value("out", "batch")], initializers))
    # params = 12*5 + 5 = 65 (shape, axes and the clip bounds excluded); 260 B
    assert (stats.params, stats.weight_bytes) == (65, 260)
    # FLOPs: Reshape 0 + Clip 12 + MatMul 2*60 + Add 5 + ReduceMean 5 (per input element) = 142
    assert stats.by_op_type == {"Reshape": 0, "Clip": 12, "MatMul": 120, "Add": 5,
                                "ReduceMean": 5}


def test_fp16_weights_take_two_bytes_also_from_constant_nodes() -> None:
    bias = helper.make_node("Constant", [], ["b"],
                            value=numpy_helper.from_array(np.ones(4, np.float16)))
    conv = helper.make_node("Conv", ["input", "w", "b"], ["out"], kernel_shape=[3, 3],
                            pads=[1, 1, 1, 1])
    stats = graph_stats(_model(
        [bias, conv], [_value("input", "batch", 3, 8, 8, elem=TensorProto.FLOAT16)],
        [_value("out", "batch", 4, 8, 8, elem=TensorProto.FLOAT16)],
        [_init("w", 4, 3, 3, 3, dtype=np.float16)]))
    # params 112 (the Constant's 4 biases included) at 2 B = 224 B; input 3*8*8*2 = 384 B
    assert (stats.params, stats.weight_bytes, stats.input_bytes) == (112, 224, 384)
    assert stats.activation_bytes == 0  # a Constant's value is not written at run time
    assert stats.macs == 6912


def test_qlinear_matmul_counts_its_weight_not_its_scales() -> None:
    # uint8 a (batch,4,8) x int8 b (8,3) -> uint8 (batch,4,3); per-column b scale/zero point (3,)
    node = helper.make_node("QLinearMatMul", ["input", "a_s", "a_zp", "w", "w_s", "w_zp",
                                              "y_s", "y_zp"], ["out"])
    initializers = [
        numpy_helper.from_array(np.array(0.1, np.float32), "a_s"),
        numpy_helper.from_array(np.array(128, np.uint8), "a_zp"),
        numpy_helper.from_array(RNG.integers(-8, 8, (8, 3)).astype(np.int8), "w"),
        numpy_helper.from_array(np.full(3, 0.2, np.float32), "w_s"),
        numpy_helper.from_array(np.zeros(3, np.int8), "w_zp"),
        numpy_helper.from_array(np.array(0.3, np.float32), "y_s"),
        numpy_helper.from_array(np.array(128, np.uint8), "y_zp"),
    ]
    stats = graph_stats(_model([node], [_value("input", "batch", 4, 8, elem=TensorProto.UINT8)],
                               [_value("out", "batch", 4, 3, elem=TensorProto.UINT8)],
                               initializers))
    # MACs = 4*3 outputs * K=8 = 96; params = 8*3 int8 = 24 B; input 32 B, output 12 B
    assert (stats.macs, stats.params, stats.weight_bytes) == (96, 24, 24)
    assert (stats.input_bytes, stats.output_bytes) == (32, 12)


def test_int4_weights_pack_two_to_a_byte() -> None:
    weight = helper.make_tensor("w_q", TensorProto.INT4, [3, 5], list(range(-7, 8)))
    scale = numpy_helper.from_array(np.array(0.5, np.float32), "w_s")
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["w"]),
             helper.make_node("MatMul", ["input", "w"], ["out"])]
    stats = graph_stats(_model(nodes, [_value("input", "batch", 3)], [_value("out", "batch", 5)],
                               [weight, scale], opset=21))
    # 15 int4 elements -> ceil(15 * 4 / 8) = 8 B; the dequantized (3,5) fp32 copy, 60 B, is an
    # activation; FLOPs = DQ 15 + MatMul 2 * (5 outputs * K=3) = 45
    assert (stats.params, stats.weight_bytes, stats.activation_bytes) == (15, 8, 60)
    assert stats.by_op_type == {"DequantizeLinear": 15, "MatMul": 30}


def test_unknown_ops_are_named_and_not_counted() -> None:
    nodes = [helper.make_node("Relu", ["input"], ["r"]),
             helper.make_node("Mystery", ["r"], ["m"], domain="acme"),
             helper.make_node("Einsum", ["m"], ["out"], equation="bi->bi")]
    model = _model(nodes, [_value("input", "batch", 4)], [_value("out", "batch", 4)],
                   value_info=[_value("m", "batch", 4)], domains=["acme"])
    stats = graph_stats(model)
    assert stats.unknown_ops == ("Einsum", "acme:Mystery")
    assert stats.by_op_type == {"Relu": 4}
    assert stats.flops == 4
    # Their outputs are still written: r and m, 16 B each
    assert stats.activation_bytes == 32


def test_a_tensor_of_unknown_shape_is_named() -> None:
    nodes = [helper.make_node("Mystery", ["input"], ["m"], domain="acme"),
             helper.make_node("Relu", ["m"], ["out"])]
    model = _model(nodes, [_value("input", "batch", 4)], [_value("out", "batch", 4)],
                   domains=["acme"])
    with pytest.raises(ValueError, match=r"static shape and type for tensor\(s\) 'm'"):
        graph_stats(model)


@pytest.mark.parametrize(("shape", "batch_size", "message"), [
    (["batch", 3], 0, r"batch_size must be an integer >= 1, got 0"),
    ([1, 3], 2, r"input 'input' has a fixed batch of 1; .* batch_size=2"),
    (["batch", "seq"], 1, r"input 'input' has symbolic axis 1 \('seq'\)"),
])
def test_bad_batch_is_a_clear_error(shape: list[int | str], batch_size: int,
                                    message: str) -> None:
    relu = helper.make_node("Relu", ["input"], ["out"])
    model = _model([relu], [_value("input", *shape)], [_value("out", *shape)])
    with pytest.raises(ValueError, match=message):
        graph_stats(model, batch_size=batch_size)


def test_a_fixed_batch_model_counts_at_its_own_batch() -> None:
    relu = helper.make_node("Relu", ["input"], ["out"])
    stats = graph_stats(_model([relu], [_value("input", 2, 3)], [_value("out", 2, 3)]),
                        batch_size=2)
    assert stats.flops == 6


def test_inconsistent_shapes_fail_shape_inference() -> None:
    add = helper.make_node("Add", ["input", "b"], ["out"])
    model = _model([add], [_value("input", "batch", 3)], [_value("out", "batch", 3)],
                   [_init("b", 4)])
    with pytest.raises(ValueError, match="ONNX shape inference failed"):
        graph_stats(model)


def test_docstring_names_every_op_with_a_rule() -> None:
    doc = op_costs.__doc__ or ""
    ops = (op_costs._ELEMENTWISE | op_costs._WINDOWED_POOLS | op_costs.REDUCTIONS
           | op_costs._DATA_MOVEMENT | set(op_costs._MAC_RULES))
    assert [op for op in sorted(ops) if f"{op}," not in doc and f"{op}." not in doc
            and f"``{op}``" not in doc] == []


def test_importing_the_module_does_not_import_onnx() -> None:
    code = "import sys, dse.models.graph_statistics; assert 'onnx' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- real torch exports ----

def _seq_module() -> torch.nn.Module:
    import torch

    return torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 10))


def test_exported_sequential_matches_torch(tmp_path: Path) -> None:
    module = _seq_module()
    path = tmp_path / "seq.onnx"
    export_onnx(module, (1, 8, 8), path)
    stats = graph_stats(path)
    # params = conv 8*1*3*3 + 8 = 80, linear 512*10 + 10 = 5130 -> 5210
    assert stats.params == sum(p.numel() for p in module.parameters()) == 5210
    # MACs = conv 8*8*8 outputs * 1*3*3 = 4608 + linear 10 * 512 = 5120 -> 9728
    assert stats.macs == 9728
    # FLOPs = 2 * 9728 + ReLU 8*8*8 = 512 -> 19968
    assert stats.flops == 19968
    assert graph_stats(str(path), batch_size=4).macs == 4 * 9728


TINY_CNN = {"num_stages": 2, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2}


@pytest.fixture(scope="module")
def cnn_module() -> torch.nn.Module:
    """The project's cnn with batch-norm statistics as training would leave them (not the fresh
    0/1, whose folded conv biases are all zero and dropped by the exporter)."""
    import torch

    torch.manual_seed(0)
    module = get_family("cnn").build(TINY_CNN)
    with torch.no_grad():
        for norm in module.modules():
            if isinstance(norm, torch.nn.BatchNorm2d):
                assert norm.running_mean is not None and norm.running_var is not None
                norm.running_mean.uniform_(-1, 1)
                norm.running_var.uniform_(0.5, 2)
                norm.weight.uniform_(0.5, 2)
                norm.bias.uniform_(-1, 1)
    return module.eval()


@pytest.fixture(scope="module")
def cnn_onnx(cnn_module: torch.nn.Module, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cnn") / "cnn.onnx"
    export_onnx(cnn_module, get_family("cnn").input_shape, path)
    return path


def _torch_macs(module: torch.nn.Module, x: torch.Tensor) -> int:
    """MACs of every Conv2d and Linear, counted by forward hooks on the torch module."""
    import torch

    total = 0

    def count(layer: torch.nn.Module, _: Any, out: torch.Tensor) -> None:
        nonlocal total
        if isinstance(layer, torch.nn.Conv2d):
            kernel = layer.kernel_size[0] * layer.kernel_size[1]
            total += out.numel() * (layer.in_channels // layer.groups) * kernel
        else:
            assert isinstance(layer, torch.nn.Linear)
            total += out.numel() * layer.in_features

    handles = [m.register_forward_hook(count) for m in module.modules()
               if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    with torch.inference_mode():
        module(x)
    for handle in handles:
        handle.remove()
    return total


def test_exported_cnn_params_and_macs_match_torch(cnn_module: torch.nn.Module,
                                                   cnn_onnx: Path) -> None:
    import torch

    stats = graph_stats(cnn_onnx, batch_size=2)
    torch_params = sum(p.numel() for p in cnn_module.parameters())
    norm_channels = sum(m.num_features for m in cnn_module.modules()
                        if isinstance(m, torch.nn.BatchNorm2d))
    # Each Conv2d -> BatchNorm2d(C) pair is folded: the norm's 2C scale and shift become the
    # conv's C biases, so ONNX holds C fewer parameters per pair.
    assert stats.params == torch_params - norm_channels
    assert stats.macs == _torch_macs(cnn_module, torch.zeros(2, 1, 8, 8))
    assert stats.unknown_ops == ()
    assert stats.weight_bytes == 4 * stats.params


def test_int8_qdq_counts_the_convs_once_with_int8_weights(cnn_onnx: Path,
                                                           tmp_path: Path) -> None:
    int8_path = tmp_path / "cnn.int8.onnx"
    calibration = np.random.default_rng(0).random((64, 1, 8, 8), dtype=np.float32)
    quantize_int8(cnn_onnx, int8_path, calibration, symmetric=False)
    fp32, int8 = graph_stats(cnn_onnx), graph_stats(int8_path)
    assert int8.macs == fp32.macs
    assert int8.params == fp32.params
    # ORT stores weight matrices int8 (1 B) and biases int32 (4 B): the fp32 model's rank-1
    # initializers are exactly its biases.
    fp32_graph = onnx.load(str(cnn_onnx)).graph
    biases = sum(int(np.prod(t.dims)) for t in fp32_graph.initializer
                 if len(t.dims) == 1 and t.data_type == F32)
    assert int8.weight_bytes == (fp32.params - biases) + 4 * biases
    assert 0.25 <= int8.weight_bytes / fp32.weight_bytes < 0.35
    # Q/DQ are counted as elementwise work on top of the same convs and Gemm.
    assert int8.by_op_type["Conv"] == fp32.by_op_type["Conv"]
    assert int8.by_op_type["QuantizeLinear"] > 0
    assert int8.by_op_type["DequantizeLinear"] > 0
    assert int8.unknown_ops == ()
