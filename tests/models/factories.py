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
