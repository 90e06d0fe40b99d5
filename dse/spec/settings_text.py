"""A part's settings model in words, for the one-line errors and the generated tables: each
setting's key, its type in YAML's words (``int or null``, ``linear or geometric``, ``list[str]``)
and its default. Probes (:mod:`dse.spec.telemetry`) and samplers
(:mod:`dse.spec.sampler_settings`) describe their settings with it, so both read the same."""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel


def setting_rows(model: type[BaseModel]) -> list[tuple[str, str, str]]:
    """Each setting of ``model`` in its order, as (key, type, default):
    ``("startup_trials", "int or null", "null")``."""
    return [(key, _type_text(field.annotation), _default_text(field))
            for key, field in model.model_fields.items()]


def describe_settings(model: type[BaseModel]) -> str:
    """``interval_s (float, default 0.5), zones (list[str] or null, default null)``."""
    return ", ".join(f"{key} ({kind}, default {default})"
                     for key, kind, default in setting_rows(model))


def _type_text(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_text(args[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_text(arg) for arg in args)
    if origin is Literal:
        return " or ".join("null" if arg is None else str(arg).lower() if isinstance(arg, bool)
                           else str(arg) for arg in args)
    if origin in (list, tuple, set, frozenset, Sequence):
        return f"list[{_type_text(args[0])}]" if args else "list"
    if origin is dict or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return "mapping"
    if annotation is type(None):
        return "null"
    return str(getattr(annotation, "__name__", annotation))


def _default_text(field: Any) -> str:
    if field.is_required():
        return "none: required"
    default = field.get_default(call_default_factory=True)
    if default is None:
        return "null"
    return str(default).lower() if isinstance(default, bool) else str(default)
