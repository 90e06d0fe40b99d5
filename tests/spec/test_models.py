"""The spec models: every field documented, unknown keys refused, ranges checked."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from dse.core.metrics import Direction, MetricSpec, declare
from dse.spec import KINDS, ConstraintSpec, RangeParam, SearchSpace
from dse.spec.errors import _unwrap
from dse.spec.models import MetricDeclaration
from tests.conftest import TINY_SPACE


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
    upper = ConstraintSpec.model_validate("process_rss_peak_mb <= 512")
    lower = ConstraintSpec.model_validate("accuracy >= 0.9")
    assert (upper.metric, upper.op, upper.value) == ("process_rss_peak_mb", "<=", 512.0)
    assert upper.violation(500) < 0 < upper.violation(600)
    assert lower.violation(0.95) < 0 < lower.violation(0.8)
    assert str(lower) == "accuracy >= 0.9"


def test_a_former_metric_name_validates_as_the_current_one() -> None:
    """memory_peak_mb was renamed process_rss_peak_mb: spaces written before still validate, and
    mean the new metric (objective, constraint text and constraint mapping alike)."""
    data = yaml.safe_load(TINY_SPACE)
    data["objectives"].append({"metric": "memory_peak_mb"})
    data["constraints"] = ["memory_peak_mb <= 4096",
                           {"metric": "memory_peak_mb", "op": ">=", "value": 1}]
    space = SearchSpace.model_validate(data)
    assert [o.metric for o in space.objectives] == ["accuracy", "latency_p99_ms",
                                                    "process_rss_peak_mb"]
    assert [str(c) for c in space.constraints] == ["process_rss_peak_mb <= 4096",
                                                   "process_rss_peak_mb >= 1"]
    # Both names of one metric are one objective.
    data["objectives"].append({"metric": "process_rss_peak_mb"})
    with pytest.raises(ValidationError, match="objectives repeat a metric"):
        SearchSpace.model_validate(data)
    # The former name is no name a space may declare for a metric of its own.
    with pytest.raises(ValidationError, match="'memory_peak_mb' is the former name of the built-in "
                                              "'process_rss_peak_mb'"):
        MetricDeclaration(name="memory_peak_mb", unit="MB", direction="minimize")
    with pytest.raises(ValueError, match="former name"):
        declare([MetricSpec("memory_peak_mb", "MB", Direction.MINIMIZE, "")])


def test_range_must_be_ordered() -> None:
    with pytest.raises(ValidationError, match="low <= high"):
        RangeParam(low=3, high=1)
    assert RangeParam(low=1, high=3).is_int
    assert not RangeParam(low=0.5, high=3).is_int


def test_cache_dir_defaults_to_the_run_folder_and_can_be_shared(tiny_campaign: Path) -> None:
    from dse.app.api import load_experiment
    from tests.conftest import tiny_experiment_text

    experiment = load_experiment(tiny_campaign)
    assert experiment.cache_dir == experiment.run_dir / "cache"
    tiny_campaign.write_text(tiny_experiment_text(2) + "cache_dir: ../shared-cache\n")
    shared = load_experiment(tiny_campaign)
    assert shared.cache_dir == (tiny_campaign.parent.parent / "shared-cache").resolve()
