"""Turn pydantic and YAML failures into one readable line per problem: file, field path, found, allowed."""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

# Tags pydantic puts in an error location for union members; they mean nothing to a user.
_UNION_TAGS = {"choices", "range"}


def field_path(loc: tuple[int | str, ...]) -> str:
    """``('objectives', 1, 'metric')`` -> ``objectives[1].metric``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _UNION_TAGS or part == "[key]":
            continue
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _unwrap(annotation: Any) -> list[Any]:
    """The model classes an annotation may hold (through Optional, list, dict, Annotated, Union)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list, dict, tuple):
        found: list[Any] = []
        for arg in typing.get_args(annotation):
            found.extend(_unwrap(arg))
        return found
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return []


def _allowed_keys(root: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """Field names of the model that sits at ``loc`` (best effort; empty when unknown)."""
    current: list[type[BaseModel]] = [root]
    for part in loc:
        if isinstance(part, int) or part in _UNION_TAGS:
            continue
        following: list[type[BaseModel]] = []
        for model in current:
            field = model.model_fields.get(str(part))
            if field is not None:
                following.extend(_unwrap(field.annotation))
        if not following:  # a dict key (e.g. a backend name): stay on the dict's value models
            continue
        current = following
    return sorted(f.alias or n for n, f in current[0].model_fields.items()) if current else []


def describe_validation_error(file: Path, root: type[BaseModel], error: ValidationError) -> list[str]:
    """One line per pydantic error, deduplicated."""
    lines: list[str] = []
    for item in error.errors():
        loc = tuple(item["loc"])
        path = field_path(loc)
        kind = item["type"]
        found = item.get("input")
        ctx = item.get("ctx") or {}
        if kind == "extra_forbidden":
            allowed = _allowed_keys(root, loc[:-1])
            hint = f"; allowed: {', '.join(allowed)}" if allowed else ""
            text = f"unknown key {str(loc[-1])!r}{hint}"
        elif kind == "missing":
            text = "required field is missing"
        elif kind == "literal_error":
            expected = str(ctx.get("expected", "")).replace("'", "").replace(" or ", ", ")
            text = f"found {_short(found)}; allowed: {expected}"
        elif kind in ("value_error", "assertion_error"):
            text = str(ctx.get("error", item["msg"]))
        else:
            text = f"{item['msg']}; found {_short(found)}"
        line = f"{file}: {path}: {text}"
        if line not in lines:
            lines.append(line)
    return lines


def describe_yaml_error(file: Path, error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "(file)"
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return f"{file}: {where}: invalid YAML: {problem}"
