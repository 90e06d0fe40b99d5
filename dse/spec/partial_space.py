"""The parts of an invalid search space that are valid on their own, so that the checks reading only
them (the model source, backend knobs) still run in the same pass as the space's own errors: a
misspelt knob is reported beside a misspelt key, not after it is fixed."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from dse.spec.models import DeploymentSpec, ModelSpec, SearchSpace

# The sections later checks read, each with its model. Objectives, constraints and metrics are
# left out: they depend on each other (declared metrics), and what reads them needs them all.
_SECTIONS: dict[str, type[BaseModel]] = {"model": ModelSpec, "deployment": DeploymentSpec}


def valid_parts(data: dict[str, Any]) -> SearchSpace | None:
    """A :class:`SearchSpace` holding only the sections of ``data`` (an invalid space's YAML)
    that validate alone, the others at their defaults (no objectives); None when none does.
    Not a valid space: only for the checks of the sections it holds."""
    parts: dict[str, Any] = {}
    for section, model in _SECTIONS.items():
        value = data.get(section)
        if value is None:
            continue
        try:
            parts[section] = model.model_validate(value)
        except ValidationError:  # the space's own lines already name each of its errors
            continue
    if not parts:
        return None
    name = data.get("name")
    return SearchSpace.model_construct(name=name if isinstance(name, str) else "", objectives=[],
                                       **parts)
