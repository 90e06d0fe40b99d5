"""dse's pluggable parts and metrics as rows and Markdown tables, read from the registries.

The tables in ``docs/`` are generated from here (``dse list KIND``), so a table can never say
something the registries do not: a part registered by a plugin in ``$DSE_PLUGINS`` is listed too.
Only the parts' own declarations are read; no runtime, sensor library or sampler is imported.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from dse.core import DseError

KINDS: tuple[str, ...] = ("metrics", "backends", "probes", "samplers")


def list_parts(kind: str) -> list[dict[str, str]]:
    """Every registered part of ``kind`` (or every built-in metric), one row of text each.

    Args:
        kind: ``metrics``, ``backends``, ``probes`` or ``samplers``.

    Returns:
        One dict per part, in the order of its table (metrics as ``dse/core/metrics.py`` lists them,
        parts by name); every row has the same keys, the table's columns.

    Raises:
        DseError: ``kind`` is none of the four.

    Examples:
        >>> import dse
        >>> p99 = next(row for row in dse.list_parts("metrics") if row["metric"] == "latency_p99_ms")
        >>> p99["unit"], p99["direction"]
        ('ms', 'minimize')
        >>> onnxruntime = next(row for row in dse.list_parts("backends")
        ...                    if row["backend"] == "onnxruntime")
        >>> onnxruntime["cpu"], onnxruntime["cuda"]
        ('fp32, int8', '—')
    """
    return _ROWS[_known(kind)]()


def markdown_table(kind: str) -> str:
    """The rows of :func:`list_parts` as one Markdown table (names in code font, ``|`` escaped).

    Args:
        kind: ``metrics``, ``backends``, ``probes`` or ``samplers``.

    Returns:
        The table's lines, a header and its rule first, ending in a newline.

    Raises:
        DseError: ``kind`` is none of the four.

    Examples:
        >>> import dse
        >>> print(dse.markdown_table("samplers").splitlines()[0])
        | sampler | settings (type, default) | ranges need a step | what it does |
        >>> "| `grid` |" in dse.markdown_table("samplers")
        True
    """
    rows = list_parts(kind)
    columns = list(rows[0]) if rows else []
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [f"`{row[columns[0]]}`", *(row[column] for column in columns[1:])]
        lines.append("| " + " | ".join(_cell(text) for text in cells) + " |")
    return "\n".join(lines) + "\n"


def _known(kind: str) -> str:
    if kind not in _ROWS:
        from dse.spec import allowed_hint

        raise DseError(f"unknown kind {kind!r}; {allowed_hint(kind, KINDS)}")
    return kind


def _cell(text: str) -> str:
    # A pipe would end the cell; a line break would end the table.
    return " ".join(text.split()).replace("|", "\\|") or "—"


def _first_sentence(doc: str | None) -> str:
    """A docstring's first sentence, in Markdown's code quotes rather than reST's; a pointer
    to the module docstring (there for the code's reader) is left out."""
    paragraph = " ".join((doc or "").strip().split("\n\n")[0].split())
    paragraph = re.sub(r"\s*\((see )?(the )?module docstring\)", "", paragraph)
    match = re.match(r"(.+?[.!?])(\s|$)", paragraph)
    return (match.group(1) if match else paragraph).replace("``", "`")


def _code_list(names: Iterable[str]) -> str:
    return ", ".join(f"`{name}`" for name in sorted(names)) or "—"


def _metric_rows() -> list[dict[str, str]]:
    from dse.core import METRICS

    return [{"metric": spec.name, "unit": spec.unit, "direction": spec.direction.value,
             "description": spec.description} for spec in METRICS.values()]


def _backend_rows() -> list[dict[str, str]]:
    from dse.plugins import BACKEND_DECLARATIONS, DEVICE_KINDS, PRECISIONS

    rows = []
    for name in BACKEND_DECLARATIONS.names():
        declared = BACKEND_DECLARATIONS[name]
        row = {"backend": name}
        for kind in DEVICE_KINDS:  # a column per device kind: the precisions it runs there
            row[kind] = ", ".join(precision for precision in PRECISIONS
                                  if declared.capability(precision, kind).supported) or "—"
        # The precisions it runs a generative language model at, on any device kind.
        generation = declared.generation
        row["language models"] = "—" if generation is None else ", ".join(
            precision for precision in PRECISIONS
            if any(generation(precision, kind).supported for kind in DEVICE_KINDS)) or "—"
        row["knobs"] = _code_list(declared.knobs)
        row["profiler"] = declared.profiler or "—"  # what `dse profile` runs
        row["extra"] = f"`dse[{declared.extra}]`" if declared.extra else "—"
        row["what it is"] = declared.summary
        rows.append(row)
    return rows


def _probe_rows() -> list[dict[str, str]]:
    from dse.plugins import PROBES

    rows = []
    for name in PROBES.names():
        probe = PROBES[name]
        settings = probe.settings_model.model_fields
        rows.append({"probe": name, "metrics": _code_list(probe.provides),
                     "settings (default)": ", ".join(
                         f"`{field}` ({info.default})" for field, info in settings.items()),
                     "what it reads": _first_sentence(probe.__doc__)})
    return rows


def _sampler_rows() -> list[dict[str, str]]:
    from dse.plugins import SAMPLERS

    return [{"sampler": name,
             "settings (type, default)": _settings_text(name),
             "ranges need a step": "yes" if SAMPLERS[name].needs_steps else "no",
             "what it does": SAMPLERS[name].summary} for name in SAMPLERS.names()]


def _settings_text(sampler: str) -> str:
    """``startup_trials`` (int or null, default null), one per setting the sampler takes, in its
    model's order; empty (``—`` by :func:`_cell`) when it takes none."""
    from dse.spec import sampler_setting_rows

    return ", ".join(f"`{key}` ({kind}, default {default})"
                     for key, kind, default in sampler_setting_rows(sampler))


_ROWS: dict[str, Callable[[], list[dict[str, str]]]] = {
    "metrics": _metric_rows, "backends": _backend_rows, "probes": _probe_rows,
    "samplers": _sampler_rows}
