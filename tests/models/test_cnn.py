"""The cnn family: registry, validation, and real forward passes of built networks."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from dse.models import FAMILIES, ModelFamily, get_family, register_family
from dse.models.cnn import DEFAULT_ARCH, CnnFamily

if TYPE_CHECKING:
    import torch

TINY = {"num_stages": 1, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2}


def _depthwise_strides(module: torch.nn.Module) -> list[int]:
    import torch

    return [m.stride[0] for m in module.modules()
            if isinstance(m, torch.nn.Conv2d) and m.groups > 1]


def test_cnn_is_registered_with_its_contract() -> None:
    family = get_family("cnn")
    assert isinstance(family, CnnFamily)
    assert FAMILIES["cnn"] is family
    assert family.arch_params == frozenset(
        {"num_stages", "depth", "width_mult", "kernel_size", "expand_ratio"})
    assert family.input_shape == (1, 8, 8)
    assert family.num_classes == 10


def test_unknown_family_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"unknown model family 'resnet'; known: .*cnn"):
        get_family("resnet")


def test_a_family_name_registers_once() -> None:
    class Again(CnnFamily):
        name = "cnn"

    with pytest.raises(ValueError, match="already registered"):
        register_family(Again)
    assert type(FAMILIES["cnn"]) is CnnFamily


@pytest.mark.parametrize("arch", [
    TINY,
    DEFAULT_ARCH,
    {"num_stages": 4, "depth": 1, "width_mult": 0.75, "kernel_size": 5, "expand_ratio": 1},
    {},
])
def test_built_network_maps_digit_batches_to_logits(arch: dict[str, Any]) -> None:
    import torch

    family = get_family("cnn")
    module = family.build(arch)
    assert isinstance(module, torch.nn.Module)
    module.eval()
    with torch.inference_mode():
        logits = module(torch.rand(3, *family.input_shape))
    assert logits.shape == (3, 10)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize(("num_stages", "strides"), [
    (1, [1]),
    (2, [1, 2]),
    (3, [1, 2, 2]),
    # 8x8 -> 4x4 -> 2x2: the fourth stage stays at 2x2.
    (4, [1, 2, 2, 1]),
])
def test_later_stages_downsample_while_above_2x2(num_stages: int, strides: list[int]) -> None:
    module = get_family("cnn").build({**TINY, "num_stages": num_stages})
    assert _depthwise_strides(module) == strides


def test_depth_adds_stride_1_residual_blocks() -> None:
    from dse.models._inverted_residual import InvertedResidual

    module = get_family("cnn").build({**TINY, "num_stages": 2, "depth": 3})
    blocks = [m for m in module.modules() if isinstance(m, InvertedResidual)]
    assert len(blocks) == 6
    assert _depthwise_strides(module) == [1, 1, 1, 2, 1, 1]
    # Stage 1 keeps the stem's width, so all its blocks add; stage 2's first block widens and
    # downsamples, its followers add again.
    assert [b.residual for b in blocks] == [True, True, True, False, True, True]


def test_kernel_size_and_expand_ratio_shape_the_depthwise_convs() -> None:
    import torch

    module = get_family("cnn").build({**TINY, "kernel_size": 5, "expand_ratio": 6})
    depthwise = [m for m in module.modules()
                 if isinstance(m, torch.nn.Conv2d) and m.groups > 1]
    assert [m.kernel_size for m in depthwise] == [(5, 5)]
    assert depthwise[0].in_channels == 8 * 6


def test_width_mult_scales_the_parameter_count() -> None:
    def params(width: float) -> int:
        model = get_family("cnn").build({**DEFAULT_ARCH, "width_mult": width})
        return sum(p.numel() for p in model.parameters())

    assert params(0.5) < params(1.0) < params(2.0)


def test_uses_batchnorm_and_relu6() -> None:
    import torch

    module = get_family("cnn").build(TINY)
    kinds = {type(m) for m in module.modules()}
    assert {torch.nn.BatchNorm2d, torch.nn.ReLU6} <= kinds


def test_validate_fills_defaults_and_normalises_types() -> None:
    full = get_family("cnn").validate({"width_mult": 1, "depth": 3})
    assert full == {**DEFAULT_ARCH, "width_mult": 1.0, "depth": 3}
    assert isinstance(full["width_mult"], float)


@pytest.mark.parametrize(("arch", "message"), [
    ({"num_stages": 5}, r"num_stages must be an integer in 1\.\.4, got 5"),
    ({"num_stages": 0}, r"num_stages must be an integer in 1\.\.4, got 0"),
    ({"depth": 0}, r"depth must be an integer >= 1, got 0"),
    ({"depth": 1.5}, r"depth must be an integer >= 1, got 1\.5"),
    ({"depth": True}, r"depth must be an integer >= 1, got True"),
    ({"width_mult": 0}, r"width_mult must be a number in \(0, 8\], got 0"),
    ({"width_mult": "wide"}, r"width_mult must be a number in \(0, 8\], got 'wide'"),
    ({"kernel_size": 4}, r"kernel_size must be 3 or 5, got 4"),
    ({"expand_ratio": 2.5}, r"expand_ratio must be an integer in 1\.\.16, got 2\.5"),
    ({"layers": 3}, r"unknown arch parameter\(s\) \['layers'\]; allowed: \['depth'"),
])
def test_bad_arch_values_are_named(arch: dict[str, Any], message: str) -> None:
    family = get_family("cnn")
    with pytest.raises(ValueError, match=message):
        family.validate(arch)
    with pytest.raises(ValueError, match=message):
        family.build(arch)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ValueError, match=r"num_stages.*; depth.*; kernel_size"):
        get_family("cnn").validate({"num_stages": 9, "depth": -1, "kernel_size": 7})


def test_same_seed_same_initial_weights() -> None:
    import torch

    def weights() -> list[torch.Tensor]:
        torch.manual_seed(3)
        return list(get_family("cnn").build(TINY).state_dict().values())

    assert all(torch.equal(a, b) for a, b in zip(weights(), weights(), strict=True))


def test_family_base_is_abstract() -> None:
    with pytest.raises(TypeError):
        ModelFamily()  # type: ignore[abstract]


def test_importing_models_imports_no_torch() -> None:
    code = "import sys, dse.models; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
