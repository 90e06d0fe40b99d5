"""Turn pydantic and YAML failures into one readable line per problem: file, field path, found, allowed.

Every value a line shows is cut *before* it is formatted (``short_repr``): a spec value may be huge
or, through YAML aliases, share one object many times over, and ``repr()`` of it would build the
whole expansion first.
"""

from __future__ import annotations

import math
import re
import reprlib
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from dse.spec.near_names import allowed_hint

# Tags pydantic puts in an error location for union members; they mean nothing to a user.
_UNION_TAGS = {"choices", "range"}
# A key longer than this is shown cut in a field path: the path must stay readable on one line.
_KEY_CHARS = 40
# The most lines one file gets: a list of 10,000 wrong values would otherwise print 10,000 lines,
# and the first few say what to fix.
MAX_PROBLEMS = 20
# The longest message of a model's own check that is shown whole; the longest written today
# (a list of allowed names, cut at near_names.SHORT_LIST) has under 1,000 characters.
_MESSAGE_CHARS = 2_000
# What to write where a model's mapping was expected, for the models a YAML value may also take
# another form of; any other model: a mapping of its keys. Messages never name a model class.
_FORMS = {
    "RangeParam": "a list of choices, e.g. [1, 4], or a range {low: 1, high: 4} (optional step, "
                  "log)",
    "ConstraintSpec": "a constraint '<metric> <= <number>' (or >=), e.g. "
                      "'process_rss_peak_mb <= 512', or {metric, op, value}",
    "WarmStartSpec": "auto, off or {from: <profile>, max_trials: N}",
}


def cut_text(text: str, limit: int) -> str:
    """``text``, or its first ``limit - 3`` characters and ``...`` when it is longer."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def join_path(parts: typing.Iterable[int | str]) -> str:
    """``('objectives', 1, 'metric')`` -> ``objectives[1].metric``, every key cut to a readable
    length."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            key = cut_text(str(part), _KEY_CHARS) or '""'  # YAML allows an empty key
            out += f".{key}" if out else key
    return out or "(top level)"


def field_path(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a field path, without pydantic's union tags."""
    return join_path(part for part in loc if part not in _UNION_TAGS and part != "[key]")


class _BoundedRepr(reprlib.Repr):
    """``reprlib.Repr`` that never builds the full text of a big value: containers show their
    first few items and levels, and an integer too long for ``repr()`` (Python refuses to print
    one of more than 4,300 digits) is described by its size."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxlist, self.maxdict = 3, 6, 4
        self.maxtuple = self.maxset = self.maxfrozenset = 6
        self.maxstring = self.maxlong = self.maxother = 60

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() <= 4 * self.maxlong:  # at most ~48 digits: print it, then cut
            return super().repr_int(x, level)
        digits = math.floor(x.bit_length() * math.log10(2)) + 1
        return f"<an integer of about {digits:,} digits>"


_REPR = _BoundedRepr()


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, in time and memory bounded by the limit, not by
    the value."""
    return cut_text(_REPR.repr(value), limit)


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


def _expected_mapping(root: type[BaseModel], loc: tuple[int | str, ...], class_name: str) -> str:
    """What a field holding a model takes, in YAML words: its other forms, or its keys."""
    if class_name in _FORMS:
        return _FORMS[class_name]
    keys = _allowed_keys(root, loc)
    return f"a mapping of keys ({', '.join(keys)})" if keys else "a mapping of keys"


def _literal_options(expected: str) -> list[str]:
    """``"'fp32', 'fp16' or 'bf16'"`` (pydantic's ``expected``) -> ``['fp32', 'fp16', 'bf16']``."""
    return [option.strip().strip("'") for option in expected.replace(" or ", ", ").split(", ")
            if option.strip()]


def _describe_item(root: type[BaseModel], item: Any) -> str:
    """``FIELD: what was found; what is allowed`` for one pydantic error."""
    loc = tuple(item["loc"])
    kind = item["type"]
    found = item.get("input")
    ctx = item.get("ctx") or {}
    if kind == "extra_forbidden":
        allowed = _allowed_keys(root, loc[:-1])
        hint = f"; {allowed_hint(str(loc[-1]), allowed)}" if allowed else ""
        text = f"unknown key {short_repr(str(loc[-1]))}{hint}"
    elif kind == "missing":
        text = "required field is missing"
    elif kind == "literal_error":
        options = _literal_options(str(ctx.get("expected", "")))
        text = f"found {short_repr(found)}; {allowed_hint(found, options)}"
    elif kind in ("value_error", "assertion_error"):
        text = cut_text(str(ctx.get("error", item["msg"])), _MESSAGE_CHARS)
    elif kind in ("model_type", "model_attributes_type", "dataclass_type", "is_instance_of"):
        # pydantic's own words name the model class ("... instance of RangeParam"): say the forms.
        expected = _expected_mapping(root, loc, str(ctx.get("class_name", "")))
        text = f"expected {expected}; found {short_repr(found)}"
    elif kind == "list_type":
        text = f"expected a list, e.g. [a, b]; found {short_repr(found)}"
    elif kind == "path_type":  # pydantic's words name the Python class
        text = f"expected a file path (a string); found {short_repr(found)}"
    elif kind == "dict_type":
        text = f"expected a mapping {{key: value, ...}}; found {short_repr(found)}"
    else:
        # Some of pydantic's messages quote the input (a union tag): cut them as well.
        text = f"{cut_text(item['msg'], _MESSAGE_CHARS)}; found {short_repr(found)}"
    return f"{field_path(loc)}: {text}"


def describe_validation_error(file: Path, root: type[BaseModel], error: ValidationError) -> list[str]:
    """One line per pydantic error, deduplicated; at most ``MAX_PROBLEMS`` of them and a line
    counting the rest."""
    # A dict keeps the order and finds a repeated line without a scan.
    lines = list(dict.fromkeys(f"{file}: {_describe_item(root, item)}"
                               for item in error.errors(include_url=False)))
    if len(lines) <= MAX_PROBLEMS:
        return lines
    return [*lines[:MAX_PROBLEMS], _more_line(str(file), len(lines) - MAX_PROBLEMS)]


def _more_line(file: str, more: int) -> str:
    return f"{file}: (file): {more:,} more problems not shown; fix the ones above first"


_MORE_LINE = re.compile(r"^(?P<file>.*): \(file\): (?P<more>[\d,]+) more problems not shown; ")


def cap_per_file(lines: list[str]) -> list[str]:
    """``lines`` deduplicated, with at most ``MAX_PROBLEMS`` for each file (the text before a
    line's first ``": "``) and, after them, one line per file counting those not shown: the cap
    of :func:`describe_validation_error`, kept when later checks add lines of the same file."""
    shown: list[str] = []
    kept: dict[str, int] = {}
    hidden: dict[str, int] = {}
    for line in dict.fromkeys(lines):
        more = _MORE_LINE.match(line)
        if more is not None:  # a count from an earlier cap: carried into this one
            file = more["file"]
            hidden[file] = hidden.get(file, 0) + int(more["more"].replace(",", ""))
            continue
        file = line.split(": ", 1)[0]
        if kept.get(file, 0) < MAX_PROBLEMS:
            kept[file] = kept.get(file, 0) + 1
            shown.append(line)
        else:
            hidden[file] = hidden.get(file, 0) + 1
    return shown + [_more_line(file, more) for file, more in hidden.items()]


def describe_yaml_error(file: Path, error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "(file)"
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    # PyYAML quotes what it choked on (an alias name, a tag) whole: it may be megabytes long.
    return f"{file}: {where}: invalid YAML: {cut_text(problem, 200)}"
