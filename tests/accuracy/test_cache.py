"""Real, seeded training and its on-disk cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from dse.accuracy import TrainedModel, accuracy, load_digits_split, train, train_or_load
from dse.spec import TrainingSpec

if TYPE_CHECKING:
    import torch

TINY = {"num_stages": 1, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2}
FAST = TrainingSpec(epochs=2, batch_size=64, learning_rate=0.02, seed=0, threads=1)


def _equal_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    import torch

    return all(torch.equal(x, y) for x, y in
               zip(a.state_dict().values(), b.state_dict().values(), strict=True))


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> tuple[TrainedModel, Path]:
    cache_dir = tmp_path_factory.mktemp("trained")
    return train_or_load("cnn", TINY, FAST, cache_dir), cache_dir


def test_training_learns_and_is_cached(first: tuple[TrainedModel, Path]) -> None:
    trained, cache_dir = first
    assert not trained.cached
    assert trained.train_seconds > 0
    assert not trained.module.training
    assert trained.input_shape == (1, 8, 8)
    # Ten classes: chance is 0.1. Two short epochs of a tiny net already do far better.
    assert 0.5 < trained.fp32_accuracy <= 1.0
    assert sorted(p.name for p in cache_dir.iterdir()) == [f"{trained.key}.json",
                                                           f"{trained.key}.pt"]


def test_second_call_loads_the_same_model(first: tuple[TrainedModel, Path]) -> None:
    trained, cache_dir = first
    again = train_or_load("cnn", TINY, FAST, cache_dir)
    assert again.cached
    assert again.train_seconds == 0.0
    assert again.key == trained.key
    assert again.fp32_accuracy == trained.fp32_accuracy
    assert not again.module.training
    assert _equal_weights(again.module, trained.module)


def test_fp32_accuracy_is_the_modules_test_accuracy(first: tuple[TrainedModel, Path]) -> None:
    import torch

    trained, _ = first
    split = load_digits_split(FAST.seed)
    with torch.inference_mode():
        measured = accuracy(lambda x: trained.module(torch.from_numpy(x)).numpy(),
                            split.x_test, split.y_test, batch_size=50)
    assert measured == trained.fp32_accuracy


def test_defaults_and_explicit_values_share_an_entry(first: tuple[TrainedModel, Path]) -> None:
    trained, cache_dir = first
    spelled = {**TINY, "width_mult": 0.5, "kernel_size": 3}
    partial = {k: v for k, v in TINY.items() if k != "kernel_size"}  # 3 is the default
    assert train_or_load("cnn", spelled, FAST, cache_dir).key == trained.key
    assert train_or_load("cnn", partial, FAST, cache_dir).key == trained.key


def test_threads_do_not_change_the_key(first: tuple[TrainedModel, Path]) -> None:
    _, cache_dir = first
    two = FAST.model_copy(update={"threads": 2})
    assert train_or_load("cnn", TINY, two, cache_dir).cached


def test_same_seed_same_weights_other_seed_other_weights(tmp_path: Path) -> None:
    a = train_or_load("cnn", TINY, FAST, tmp_path / "a")
    b = train_or_load("cnn", TINY, FAST, tmp_path / "b")
    c = train_or_load("cnn", TINY, FAST.model_copy(update={"seed": 1}), tmp_path / "c")
    assert not (a.cached or b.cached or c.cached)
    assert _equal_weights(a.module, b.module)
    assert a.fp32_accuracy == b.fp32_accuracy
    assert c.key != a.key
    assert not _equal_weights(a.module, c.module)


@pytest.mark.parametrize("damage", ["truncate_weights", "garbage_json", "bad_accuracy",
                                    "missing_weights", "wrong_shapes", "flipped_weight"])
def test_a_damaged_entry_is_retrained(first: tuple[TrainedModel, Path], tmp_path: Path,
                                      damage: str) -> None:
    import torch

    trained, source = first
    for path in source.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    weights, meta = tmp_path / f"{trained.key}.pt", tmp_path / f"{trained.key}.json"
    if damage == "truncate_weights":
        weights.write_bytes(weights.read_bytes()[:100])
    elif damage == "garbage_json":
        meta.write_text("{not json")
    elif damage == "bad_accuracy":
        meta.write_text(json.dumps({"fp32_accuracy": 7.5}))
    elif damage == "missing_weights":
        weights.unlink()
    elif damage == "flipped_weight":  # still loads, with the right shapes: only the digest tells
        state = torch.load(weights, weights_only=True)
        name = next(k for k, v in state.items() if v.is_floating_point())
        state[name] = state[name] + 1.0
        torch.save(state, weights)
    else:
        torch.save({"classifier.weight": torch.zeros(2, 2)}, weights)
    again = train_or_load("cnn", TINY, FAST, tmp_path)
    assert not again.cached
    assert again.fp32_accuracy == trained.fp32_accuracy
    assert _equal_weights(again.module, trained.module)
    assert train_or_load("cnn", TINY, FAST, tmp_path).cached  # the repaired entry is used


def test_no_temporary_files_are_left(first: tuple[TrainedModel, Path]) -> None:
    _, cache_dir = first
    assert not [p for p in cache_dir.iterdir() if p.name.startswith(".")]


def test_train_restores_the_thread_count_and_times_itself() -> None:
    import torch

    torch.manual_seed(0)
    from dse.models import get_family

    module = get_family("cnn").build(TINY)
    before = torch.get_num_threads()
    spec = FAST.model_copy(update={"epochs": 1, "threads": 1 if before != 1 else 2})
    seconds = train(module, load_digits_split(0), spec)
    assert seconds > 0
    assert torch.get_num_threads() == before
    assert not module.training


def test_bad_arch_and_family_raise(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="depth must be"):
        train_or_load("cnn", {**TINY, "depth": 0}, FAST, tmp_path)
    with pytest.raises(KeyError, match="unknown model family"):
        train_or_load("mlp", TINY, FAST, tmp_path)
    assert not tmp_path.joinpath("x").exists()
    assert list(tmp_path.iterdir()) == []


def test_trained_weights_are_float32(first: tuple[TrainedModel, Path]) -> None:
    import torch

    trained, _ = first
    assert {p.dtype for p in trained.module.parameters()} == {torch.float32}
    assert np.isfinite(trained.fp32_accuracy)
