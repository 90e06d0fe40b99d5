"""A sampler's own settings: the keys of an experiment's ``sampler:`` block beside ``name`` and
``seed``, checked against the chosen sampler's ``settings_model`` (:mod:`dse.plugins.samplers`), as
:mod:`dse.spec.telemetry` checks a probe's. :class:`dse.spec.models.SamplerSpec` keeps the keys as
written and asks here: the validated settings and one line per problem (:func:`checked_settings`),
the settings in words (:func:`sampler_setting_rows`, for ``dse list samplers``), and every registered
sampler's settings for the JSON schema's completion (:func:`settings_schema`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from dse.spec.errors import cut_text, join_path, short_repr
from dse.spec.near_names import close_names, did_you_mean
from dse.spec.settings_text import describe_settings, setting_rows


def checked_settings(sampler: str, settings: Mapping[str, Any]
                     ) -> tuple[BaseModel | None, list[str]]:
    """``sampler``'s validated settings from ``settings`` (None when it takes none, or when a
    value is refused), and one line per problem (``sampler.KEY: ...``, the file is the caller's to
    add): a key the sampler does not take, a value its settings model refuses."""
    from dse.plugins import SAMPLERS

    declared = SAMPLERS[sampler]
    takes = declared.setting_names()
    problems = [_not_taken(sampler, key, takes) for key in settings if key not in takes]
    model = declared.settings_model
    if model is None:
        return None, problems
    given = {key: value for key, value in settings.items() if key in takes}
    try:
        options: BaseModel = model.model_validate(given)
    except ValidationError as exc:
        problems.extend(_refused(sampler, model, error)
                        for error in exc.errors(include_url=False))
        return None, problems
    return options, problems


def sampler_setting_rows(sampler: str) -> list[tuple[str, str, str]]:
    """The settings ``sampler`` takes, in its model's order: each as its key, its type and its
    default in YAML's words (``("startup_trials", "int or null", "null")``)."""
    from dse.plugins import SAMPLERS

    model = SAMPLERS[sampler].settings_model
    return [] if model is None else setting_rows(model)


def _not_taken(sampler: str, key: str, takes: tuple[str, ...]) -> str:
    allowed = ["name", "seed", *takes]
    elsewhere = _samplers_taking(key)
    if elsewhere:  # another sampler's setting: say what it is for and whose it is
        meaning = setting_meaning(elsewhere[0], key)
        about = f" ({meaning + ': ' if meaning else ''}a setting of {', '.join(elsewhere)})"
    else:
        close = close_names(key, allowed)
        about = f" ({did_you_mean(close)})" if close else ""
    return (f"{join_path(('sampler', key))}: the {sampler} sampler has no "
            f"{cut_text(key, _KEY_CHARS)}{about}; allowed: {', '.join(allowed)}")


def _refused(sampler: str, model: type[BaseModel], error: Any) -> str:
    if error["type"] == "value_error":  # the model's own check: its message says it all
        text = cut_text(str(error["ctx"]["error"]), _MESSAGE_CHARS)
    elif error["type"] == "missing":
        text = "required setting is missing"
    else:
        text = f"{cut_text(error['msg'], _MESSAGE_CHARS)}; found {short_repr(error.get('input'))}"
    return (f"{join_path(('sampler', *error['loc']))}: {text}; the {sampler} sampler's "
            f"settings: {describe_settings(model)}")


# A sampler setting's name is shown cut to this length (a YAML key may be any length), and a
# settings model's own message to this.
_KEY_CHARS = 40
_MESSAGE_CHARS = 500


def _samplers_taking(key: str) -> list[str]:
    """The registered samplers that take the setting ``key``, by name."""
    from dse.plugins import SAMPLERS

    return [name for name in SAMPLERS.names() if key in SAMPLERS[name].setting_names()]


def setting_meaning(sampler: str, key: str) -> str:
    """What the setting ``key`` of ``sampler`` counts, in a few words (its field's ``title``, e.g.
    "trials per generation"), for the lines about it; empty when its model gives none."""
    from dse.plugins import SAMPLERS

    model = SAMPLERS[sampler].settings_model
    field = None if model is None else model.model_fields.get(key)
    return str(field.title) if field is not None and field.title else ""


def settings_schema() -> dict[str, Any]:
    """JSON-schema properties of every registered sampler's settings, one per key: its schema (an
    ``anyOf`` where samplers type it differently) and its description, saying which samplers take
    it."""
    from dse.plugins import SAMPLERS

    offered: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for name in SAMPLERS.names():
        model = SAMPLERS[name].settings_model
        if model is None:
            continue
        schema = model.model_json_schema()
        for key, prop in schema.get("properties", {}).items():
            offered.setdefault(key, []).append((name, _inlined(prop, schema.get("$defs", {}))))
    properties: dict[str, Any] = {}
    for key, offers in offered.items():
        shapes: list[dict[str, Any]] = []
        described: dict[str, list[str]] = {}  # description -> the samplers it describes
        for name, prop in offers:
            described.setdefault(str(prop.pop("description", "")), []).append(name)
            prop.pop("title", None)
            if prop not in shapes:
                shapes.append(prop)
        merged = shapes[0] if len(shapes) == 1 else {"anyOf": shapes}
        if len(described) == 1:
            ((description, names),) = described.items()
            text = f"{description} Taken by: {', '.join(names)}.".strip()
        else:  # each sampler's own words, after its name
            text = " ".join(f"{', '.join(names)}: {description}" for description, names
                            in described.items())
        properties[key] = {**merged, "description": text}
    return properties


def _inlined(schema: Any, defs: dict[str, Any], seen: tuple[str, ...] = ()) -> Any:
    """``schema`` with every ``$ref`` into ``defs`` replaced by what it names (a settings model's
    nested models), so it reads the same inside the experiment's schema; a reference to a model
    already being inlined (a recursive one) becomes ``{}``, anything."""
    if isinstance(schema, list):
        return [_inlined(item, defs, seen) for item in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        if name in seen or name not in defs:
            return {}
        rest = {key: value for key, value in schema.items() if key != "$ref"}
        return {**_inlined(defs[name], defs, (*seen, name)), **_inlined(rest, defs, seen)}
    return {key: _inlined(value, defs, seen) for key, value in schema.items()}
