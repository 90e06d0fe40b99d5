"""The transformer family: validation, built encoders, ONNX export, and int8 quantization."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
import pytest

from dse.accuracy.sequences import load_sequence_split
from dse.artifacts.onnx_export import export_onnx
from dse.artifacts.quantize import quantize_int8
from dse.core.exceptions import BuildError
from dse.models import get_family
from dse.models.transformer import DEFAULT_ARCH, FEATURES, TransformerFamily

if TYPE_CHECKING:
    import onnxruntime as ort
    import torch

# Not the default: several heads of width 4 and an odd MLP ratio, to catch reshape mistakes.
EXPORTED = {"num_layers": 2, "num_heads": 4, "hidden": 16, "mlp_ratio": 3, "seq_len": 12}


def _family() -> TransformerFamily:
    family = get_family("transformer")
    assert isinstance(family, TransformerFamily)
    return family


def test_is_registered_with_its_contract() -> None:
    family = _family()
    assert family.arch_params == frozenset(
        {"num_layers", "num_heads", "hidden", "mlp_ratio", "seq_len", "attention"})
    assert family.input_shape == (16, FEATURES) == (16, 8)
    assert family.num_classes == 4
    assert family.dataset == "sequences"


def test_validate_fills_defaults_and_normalises_types() -> None:
    full = _family().validate({"hidden": np.int64(64), "num_heads": 4})
    assert full == {**DEFAULT_ARCH, "hidden": 64, "num_heads": 4}
    assert all(type(value) is int for value in full.values())
    assert _family().validate({}) == DEFAULT_ARCH == {
        "num_layers": 2, "num_heads": 2, "hidden": 32, "mlp_ratio": 2, "seq_len": 16}


def test_input_shape_follows_seq_len() -> None:
    family = _family()
    assert family.input_shape_for({}) == (16, FEATURES)
    assert family.input_shape_for({"seq_len": 100}) == (100, FEATURES)
    with pytest.raises(ValueError, match=r"seq_len must be an integer in 8\.\.128, got 4"):
        family.input_shape_for({"seq_len": 4})


@pytest.mark.parametrize(("arch", "message"), [
    ({"num_layers": 0}, r"num_layers must be an integer in 1\.\.6, got 0"),
    ({"num_layers": 7}, r"num_layers must be an integer in 1\.\.6, got 7"),
    ({"num_layers": True}, r"num_layers must be an integer in 1\.\.6, got True"),
    ({"num_heads": 9, "hidden": 72}, r"num_heads must be an integer in 1\.\.8, got 9"),
    ({"num_heads": 2.0}, r"num_heads must be an integer in 1\.\.8, got 2\.0"),
    ({"hidden": 8}, r"hidden must be an integer in 16\.\.256, got 8"),
    ({"hidden": 512}, r"hidden must be an integer in 16\.\.256, got 512"),
    ({"hidden": "wide"}, r"hidden must be an integer in 16\.\.256, got 'wide'"),
    ({"hidden": 30, "num_heads": 4},
     r"hidden must be a multiple of num_heads .*got hidden=30, num_heads=4"),
    ({"mlp_ratio": 1.5}, r"mlp_ratio must be an integer in 1\.\.8, got 1\.5"),
    ({"mlp_ratio": 0}, r"mlp_ratio must be an integer in 1\.\.8, got 0"),
    ({"seq_len": 7}, r"seq_len must be an integer in 8\.\.128, got 7"),
    ({"seq_len": 129}, r"seq_len must be an integer in 8\.\.128, got 129"),
    ({"layers": 3}, r"unknown arch parameter\(s\) \['layers'\]; allowed: \['attention', 'hidden'"),
])
def test_bad_arch_values_are_named(arch: dict[str, Any], message: str) -> None:
    family = _family()
    with pytest.raises(ValueError, match=message):
        family.validate(arch)
    with pytest.raises(ValueError, match=message):
        family.build(arch)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ValueError, match=r"num_layers.*; num_heads.*; mlp_ratio.*; seq_len"):
        _family().validate({"num_layers": 9, "num_heads": 0, "mlp_ratio": 9, "seq_len": 1})


@pytest.mark.parametrize("arch", [
    {},
    EXPORTED,
    {"num_layers": 1, "num_heads": 1, "hidden": 16, "mlp_ratio": 1, "seq_len": 8},
    {"num_layers": 3, "num_heads": 8, "hidden": 64, "mlp_ratio": 4, "seq_len": 40},
])
def test_built_encoder_maps_sequence_batches_to_logits(arch: dict[str, Any]) -> None:
    import torch

    family = _family()
    module = family.build(arch)
    assert module.training  # fresh from build, ready to train
    module.eval()
    with torch.inference_mode():
        logits = module(torch.randn(3, *family.input_shape_for(arch)))
    assert logits.shape == (3, 4)
    assert logits.dtype == torch.float32
    assert torch.isfinite(logits).all()


def test_attention_is_spelled_out_not_nn_multiheadattention() -> None:
    import torch

    from dse.models._encoder import EncoderBlock, SelfAttention

    module = _family().build({"num_layers": 3})
    kinds = {type(m) for m in module.modules()}
    assert torch.nn.MultiheadAttention not in kinds
    assert {SelfAttention, torch.nn.LayerNorm, torch.nn.GELU} <= kinds
    assert sum(isinstance(m, EncoderBlock) for m in module.modules()) == 3


def test_positions_matter() -> None:
    """The learned positional embedding makes the encoder order-aware (mean pooling alone would
    not be): swapping two positions changes the logits."""
    import torch

    torch.manual_seed(0)
    module = _family().build({}).eval()
    x = torch.randn(1, 16, FEATURES)
    swapped = x[:, [1, 0, *range(2, 16)]]
    with torch.no_grad():
        torch.nn.init.normal_(module.get_parameter("position"), std=1.0)
        assert not torch.allclose(module(x), module(swapped))


@pytest.mark.parametrize(("change", "grows"), [
    ({"num_layers": 4}, True), ({"hidden": 64}, True), ({"mlp_ratio": 4}, True),
    ({"seq_len": 64}, True), ({"num_heads": 4}, False)])
def test_arch_params_size_the_network(change: dict[str, int], grows: bool) -> None:
    def params(arch: dict[str, int]) -> int:
        return sum(p.numel() for p in _family().build(arch).parameters())

    assert (params(change) > params({})) is grows
    if not grows:  # heads split the width; they add no weights
        assert params(change) == params({})


def test_same_seed_same_initial_weights() -> None:
    import torch

    def weights() -> list[torch.Tensor]:
        torch.manual_seed(3)
        return list(_family().build(EXPORTED).state_dict().values())

    assert all(torch.equal(a, b) for a, b in zip(weights(), weights(), strict=True))


def test_importing_the_family_imports_no_torch() -> None:
    code = "import sys, dse.models.transformer; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.fixture(scope="module")
def encoder() -> torch.nn.Module:
    import torch

    torch.manual_seed(0)
    return _family().build(EXPORTED).eval()


@pytest.fixture(scope="module")
def exported(encoder: torch.nn.Module, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("transformer") / "encoder.onnx"
    export_onnx(encoder, _family().input_shape_for(EXPORTED), path)
    return path


def _session(path: Path) -> ort.InferenceSession:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_export_is_plain_matmul_softmax_with_a_dynamic_batch(exported: Path) -> None:
    model = onnx.load(str(exported))
    onnx.checker.check_model(model, full_check=True)
    (inp,), (out,) = model.graph.input, model.graph.output
    assert [d.dim_param or d.dim_value for d in inp.type.tensor_type.shape.dim] == [
        "batch", 12, FEATURES]
    assert [d.dim_param or d.dim_value for d in out.type.tensor_type.shape.dim] == ["batch", 4]
    ops = {node.op_type for node in model.graph.node}
    assert {"MatMul", "Softmax"} <= ops
    assert "Attention" not in ops  # no fused op the int8/fp16 tooling might not know


@pytest.mark.parametrize("batch", [1, 5])
def test_onnxruntime_reproduces_torch(exported: Path, encoder: torch.nn.Module,
                                      batch: int) -> None:
    import torch

    x = load_sequence_split(0, 12, FEATURES, n_train=8, n_test=8).x_test[:batch]
    (got,) = _session(exported).run(["logits"], {"input": x})
    with torch.inference_mode():
        want = encoder(torch.from_numpy(x)).numpy()
    assert got.shape == (batch, 4)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_int8_quantized_encoder_runs(exported: Path, tmp_path: Path) -> None:
    split = load_sequence_split(0, 12, FEATURES, n_train=128, n_test=16)
    out = tmp_path / "encoder.int8.onnx"
    try:
        quantize_int8(exported, out, split.x_train, symmetric=False)
    except BuildError as exc:
        if "(N, C, H, W)" in str(exc):
            pytest.skip("dse.artifacts.quantize.quantize_int8 still accepts only 4-D (image) "
                        f"calibration data: {exc}")
        raise
    ops = {node.op_type for node in onnx.load(str(out)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "MatMul"} <= ops
    (int8,) = _session(out).run(["logits"], {"input": split.x_test})
    (fp32,) = _session(exported).run(["logits"], {"input": split.x_test})
    assert int8.shape == (16, 4)
    assert np.isfinite(int8).all()
    # Close to fp32 but not equal: the graph really computes in int8.
    assert not np.array_equal(int8, fp32)
    assert np.abs(int8 - fp32).max() < 0.25 * np.abs(fp32).max() + 0.1


def test_export_failure_of_a_wrong_shape_is_a_build_error(encoder: torch.nn.Module,
                                                         tmp_path: Path) -> None:
    # The positional embedding fixes the length: an export at another length cannot trace.
    with pytest.raises(BuildError, match="ONNX export failed"):
        export_onnx(encoder, (13, FEATURES), tmp_path / "bad.onnx")


# --- the attention kernel (arch parameter ``attention``) -----------------------------------------

# Kernels torch 2.13 runs on this CPU, forward and backward; "efficient" is CUDA-only.
CPU_KERNELS = ("math", "flash")


def test_the_default_attention_leaves_the_default_arch_and_its_keys_as_they_were() -> None:
    """Trained-model and artifact keys hash validate()'s dict: the explicit default must not
    appear in it, or every cache entry made before the parameter existed would be orphaned."""
    from dse.accuracy.cache import training_key
    from dse.spec import TrainingSpec

    family = _family()
    assert family.validate({"attention": "explicit"}) == family.validate({}) == DEFAULT_ARCH
    assert family.validate({"attention": "flash"}) == {**DEFAULT_ARCH, "attention": "flash"}
    training = TrainingSpec()
    assert (training_key("transformer", family.validate({"attention": "explicit"}), training,
                         "sequences")
            == training_key("transformer", DEFAULT_ARCH, training, "sequences")
            != training_key("transformer", family.validate({"attention": "math"}), training,
                            "sequences"))


@pytest.mark.parametrize("value", ["fast", "", 1, None])
def test_an_unknown_attention_kernel_is_named(value: object) -> None:
    with pytest.raises(ValueError, match=r"attention must be one of \['explicit', 'math', "
                                         r"'flash', 'efficient'\], got "):
        _family().validate({"attention": value})


def test_a_cuda_only_kernel_is_a_device_problem_on_a_cpu_only() -> None:
    family = _family()
    assert family.device_problem({"attention": "efficient"}, "cpu") == (
        "transformer attention 'efficient': torch has no efficient SDPA kernel for a cpu device "
        "(it is CUDA-only); allowed there: explicit, math, flash")
    assert family.device_problem({"attention": "efficient"}, "cuda") is None
    assert all(family.device_problem({"attention": k}, "cpu") is None
               for k in ("explicit", *CPU_KERNELS))


def _encoders(attention: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The explicit encoder and one with ``attention``, holding the same weights."""
    import torch

    torch.manual_seed(0)
    explicit = _family().build(EXPORTED)
    other = _family().build({**EXPORTED, "attention": attention})
    other.load_state_dict(explicit.state_dict())  # same parameter names: interchangeable
    return explicit, other


@pytest.mark.parametrize("attention", [*CPU_KERNELS, "efficient"])
def test_each_kernel_computes_the_explicit_encoder(attention: str) -> None:
    """Forward and backward. On CPU tensors "efficient" computes with the math kernel: that is
    the host-side training of a GPU candidate (a cpu device refuses it, tested above)."""
    import torch

    explicit, other = _encoders(attention)
    x = torch.randn(5, *_family().input_shape_for(EXPORTED))
    for module in (explicit, other):
        module.train()
        module(x).square().mean().backward()
    for (name, a), b in zip(explicit.named_parameters(), other.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=name)
    with torch.inference_mode():
        torch.testing.assert_close(other.eval()(x), explicit.eval()(x), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(("attention", "enabled"), [
    ("math", (True, False, False)), ("flash", (False, True, False)),
    ("efficient", (True, False, False))])  # on CPU tensors: see the test above
def test_each_kernel_runs_with_its_backend_alone(attention: str,
                                                 enabled: tuple[bool, bool, bool]) -> None:
    """Every SDPA call runs under sdpa_kernel with that one backend enabled (math, flash,
    efficient flags), so a kernel that cannot run raises instead of torch picking another."""
    import torch
    from torch.overrides import TorchFunctionMode

    flags: list[tuple[bool, bool, bool]] = []
    cuda = torch.backends.cuda

    class Watch(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            if func is torch.nn.functional.scaled_dot_product_attention:
                flags.append((cuda.math_sdp_enabled(), cuda.flash_sdp_enabled(),  # type: ignore[no-untyped-call]
                              cuda.mem_efficient_sdp_enabled()))  # type: ignore[no-untyped-call]
            return func(*args, **(kwargs or {}))

    _, module = _encoders(attention)
    with torch.inference_mode(), Watch():
        module.eval()(torch.randn(2, *_family().input_shape_for(EXPORTED)))
    assert flags == [enabled] * EXPORTED["num_layers"]


@pytest.mark.parametrize("attention", [*CPU_KERNELS, "efficient"])
def test_every_kernel_exports_to_plain_matmul_softmax_that_onnxruntime_reproduces(
        attention: str, tmp_path: Path) -> None:
    import torch

    _, module = _encoders(attention)
    module.eval()
    path = tmp_path / f"{attention}.onnx"
    export_onnx(module, _family().input_shape_for(EXPORTED), path)
    ops = {node.op_type for node in onnx.load(str(path)).graph.node}
    # The exporter lowers aten::scaled_dot_product_attention to MatMul/Softmax (opset 20), not
    # to ONNX's Attention op (opset 23): int8 and fp16 passes treat it like the explicit graph.
    assert {"MatMul", "Softmax"} <= ops and "Attention" not in ops
    x = np.random.default_rng(1).standard_normal(
        (5, *_family().input_shape_for(EXPORTED))).astype(np.float32)
    got = _session(path).run(None, {"input": x})[0]
    with torch.inference_mode():
        want = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)
