"""Factories that break the factory contract, for the error tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def bare_module(arch: Mapping[str, Any]) -> torch.nn.Module:
    import torch

    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))


def not_a_module(arch: Mapping[str, Any]) -> str:
    return "a string"


def bad_evaluator(deployed: object) -> dict[str, object]:
    return {"accuracy": "high"}


def raising(arch: Mapping[str, Any]) -> torch.nn.Module:
    raise ZeroDivisionError("the user's bug")


def wrong_shape(arch: Mapping[str, Any]) -> tuple[torch.nn.Module, tuple[int, ...]]:
    """Claims 1x8x8 inputs but its first layer takes 10 features: fails in training."""
    import torch

    return torch.nn.Linear(10, 10), (1, 8, 8)



# -- outputs dse cannot score, for the driver's check (tests/models/test_output_check.py) -----

DIGITS = (1, 8, 8)


def vit_as_is(arch: Mapping[str, Any]) -> tuple[torch.nn.Module, tuple[int, ...]]:
    """A Hugging Face vision transformer for the 8x8 digits, built from a small config (nothing
    downloaded) and returned as the library gives it: its forward returns an
    ``ImageClassifierOutput``, not the logits tensor."""
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(image_size=8, patch_size=4, num_channels=1,
                       hidden_size=int(arch.get("hidden", 16)), num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=32)
    config.num_labels = 10  # the digits' classes (a PretrainedConfig setting, not ViT's own)
    return ViTForImageClassification(config), DIGITS


def vit_logits(arch: Mapping[str, Any]) -> tuple[torch.nn.Module, tuple[int, ...]]:
    """The fix the check asks for: :func:`vit_as_is` wrapped in a module whose forward returns
    the model's ``.logits``."""
    import torch

    class Logits(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            logits: torch.Tensor = self.model(x).logits
            return logits

    return Logits(vit_as_is(arch)[0]), DIGITS


def _mlp(classes: int = 10) -> torch.nn.Module:
    import torch

    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, classes))


def tuple_output(arch: Mapping[str, Any]) -> tuple[torch.nn.Module, tuple[int, ...]]:
    """A forward that returns ``(features, logits)``, as many research models do."""
    import torch

    class Both(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16))
            self.head = torch.nn.Linear(16, 10)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            features = self.features(x)
            return features, self.head(features)

    return Both(), DIGITS


def five_classes(arch: Mapping[str, Any]) -> tuple[torch.nn.Module, tuple[int, ...]]:
    """Logits for 5 classes where digits has 10."""
    return _mlp(5), DIGITS


def wrong_example(arch: Mapping[str, Any]) -> tuple[torch.nn.Module, torch.Tensor]:
    """An example batch of 16x16 images for a digits space (8x8): fails with no input_shape
    written in the YAML."""
    import torch

    return _mlp(), torch.zeros((2, 1, 16, 16))


def refuses_small(arch: Mapping[str, Any]) -> tuple[torch.nn.Module, tuple[int, ...]]:
    """Refuses ``hidden`` under 32, as a factory may refuse some combinations: the check moves
    on to the next architecture."""
    if int(arch["hidden"]) < 32:
        raise ValueError(f"hidden={arch['hidden']} is too small")
    return _mlp(), DIGITS
