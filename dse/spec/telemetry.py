"""A device profile's ``telemetry:`` entries, checked against the registered probes' settings.

An entry is a probe name (``nvml``) or a one-key mapping from a probe name to its settings
(``{thermal_zones: {zones: [x86_pkg_temp], interval_s: 1.0}}``); the settings a probe accepts are its
``settings_model`` (see :mod:`dse.plugins.probes`). :func:`checked_entry` is what the profile's
validation calls, so a bad entry fails when the profile is loaded, with one line naming the
settings allowed; ``dse.measure.telemetry.make_probes`` builds the probes on the device.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from dse.plugins import PROBES
from dse.spec.near_names import allowed_hint, close_names, did_you_mean
from dse.spec.settings_text import describe_settings

_SHAPE = "expected a probe name or a one-key mapping {probe: {setting: value, ...}}"


def parse_entry(entry: object) -> tuple[str, BaseModel]:
    """The probe an entry names and its validated settings; ValueError with a one-line reason
    (the entry's position is the caller's to add)."""
    if isinstance(entry, str):
        name, raw = entry, None
    elif isinstance(entry, Mapping):
        if len(entry) != 1:
            raise ValueError(f"{_SHAPE}; found a mapping with {len(entry)} keys {list(entry)}")
        ((name, raw),) = entry.items()
    else:
        raise ValueError(f"{_SHAPE}; found {entry!r}")
    if not isinstance(name, str) or name not in PROBES:
        raise ValueError(f"unknown probe {name!r}; {allowed_hint(name, sorted(PROBES))}")
    model = PROBES[name].settings_model
    if raw is None:  # ``- thermal_zones:`` in YAML: the name with nothing set
        raw = {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{name}: settings must be a mapping {{setting: value}}, found {raw!r}; "
                         f"allowed settings: {describe_settings(model)}")
    try:
        return name, model.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(_describe_error(name, error) for error in exc.errors())
        raise ValueError(f"{problems}; allowed settings: {describe_settings(model)}") from None


def checked_entry(entry: object) -> str | dict[str, dict[str, Any]]:
    """An entry as a profile keeps it, after :func:`parse_entry` accepted it: a name stays a name,
    a mapping keeps the settings as given (converted to their types, plain data for YAML/JSON)."""
    name, settings = parse_entry(entry)
    if isinstance(entry, str):
        return name
    return {name: settings.model_dump(mode="json", exclude_unset=True)}


def entry_name(entry: object) -> str:
    """The probe name of an entry already checked by :func:`checked_entry`."""
    if isinstance(entry, Mapping):
        return str(next(iter(entry)))
    return str(entry)


def entries_json_schema() -> dict[str, Any]:
    """JSON schema of a ``telemetry:`` list, for editor completion: each item a probe name, or a
    one-key mapping from a probe name to that probe's settings."""
    with_settings = []
    for name in sorted(PROBES):
        settings = PROBES[name].settings_model.model_json_schema()
        settings.pop("title", None)
        # ``- thermal_zones:`` (nothing set) reads as null in YAML, and is accepted.
        with_settings.append({"type": "object", "required": [name], "additionalProperties": False,
                              "properties": {name: {"anyOf": [settings, {"type": "null"}]}}})
    return {"type": "array", "items": {"anyOf": [{"enum": sorted(PROBES), "type": "string"},
                                                 *with_settings]}}


def _describe_error(probe: str, error: Any) -> str:
    """``thermal_zones.interval_s: Input should be greater than 0, found -1``."""
    path = probe
    for part in error["loc"]:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    if error["type"] == "extra_forbidden":
        close = close_names(str(error["loc"][-1]), PROBES[probe].settings_model.model_fields)
        return f"{path}: unknown setting" + (f" ({did_you_mean(close)})" if close else "")
    if error["type"] == "value_error":
        return f"{path}: {error['ctx']['error']}"
    return f"{path}: {error['msg']}, found {error['input']!r}"
