"""The spec models: every field documented, unknown keys refused, ranges checked."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from dse.spec import KINDS, ConstraintSpec, RangeParam
from dse.spec.errors import _unwrap


def _all_models() -> set[type[BaseModel]]:
    seen: set[type[BaseModel]] = set()
    todo = list(KINDS.values())
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for field in model.model_fields.values():
            todo.extend(_unwrap(field.annotation))
    return seen


def test_every_field_has_a_description() -> None:
    undocumented = [f"{model.__name__}.{name}" for model in _all_models()
                    for name, field in model.model_fields.items() if not field.description]
    assert undocumented == []


def test_models_forbid_unknown_keys() -> None:
    for model in _all_models():
        assert model.model_config.get("extra") == "forbid", model.__name__


def test_constraint_text_and_violation() -> None:
    upper = ConstraintSpec.model_validate("memory_peak_mb <= 512")
    lower = ConstraintSpec.model_validate("accuracy >= 0.9")
    assert (upper.metric, upper.op, upper.value) == ("memory_peak_mb", "<=", 512.0)
    assert upper.violation(500) < 0 < upper.violation(600)
    assert lower.violation(0.95) < 0 < lower.violation(0.8)
    assert str(lower) == "accuracy >= 0.9"


def test_range_must_be_ordered() -> None:
    with pytest.raises(ValidationError, match="low <= high"):
        RangeParam(low=3, high=1)
    assert RangeParam(low=1, high=3).is_int
    assert not RangeParam(low=0.5, high=3).is_int


def test_cache_dir_defaults_to_the_run_folder_and_can_be_shared(tiny_campaign: Path) -> None:
    from dse.api import load_experiment
    from tests.conftest import tiny_experiment_text

    experiment = load_experiment(tiny_campaign)
    assert experiment.cache_dir == experiment.run_dir / "cache"
    tiny_campaign.write_text(tiny_experiment_text(2) + "cache_dir: ../shared-cache\n")
    shared = load_experiment(tiny_campaign)
    assert shared.cache_dir == (tiny_campaign.parent.parent / "shared-cache").resolve()
