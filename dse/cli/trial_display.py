"""How a campaign run looks in the terminal: a progress bar, one line per finished trial (every
objective, or the whole reason it failed), and the Pareto front as a table narrow enough for a
terminal (its caption spells out the abbreviations). In a terminal a long cell folds onto more
lines; no cell is ever cut short."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from dse.core import TrialAttr

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pandas as pd
    from rich.console import Console

    from dse.search import TrialOutcome


def progress_printer(console: Console, total: int) -> tuple[object, object]:
    """A bar of the distinct candidates measured, out of ``total`` (budget.trials x devices)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                        MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=False)
    return progress, progress.add_task("measured candidates", total=total)


def describe(outcome: TrialOutcome, objectives: Sequence[str]) -> str:
    """One line per finished trial: the candidate, then every objective of the campaign with its
    unit, or the status and the whole reason of a trial that failed or was infeasible (a long
    reason wraps in a terminal; it is never cut)."""
    c = outcome.candidate
    head = f"#{outcome.number} {c.device_profile}"
    if c.backend:
        head += f" {c.backend}/{c.precision} b{c.batch_size}"
    if c.params:  # free parameters, as compact as the arch and knobs of the front table
        head += " " + " ".join(f"{key}={_value(value)}" for key, value in c.params.items())
    if outcome.second_look_of is not None:
        head += f" (second look at #{outcome.second_look_of})"
    if outcome.status != "ok":
        return f"{head}: {outcome.status}: {outcome.reason}"
    notes = f" (reused #{outcome.reused_from})" if outcome.reused_from is not None else ""
    if outcome.fidelity == "screen":
        notes += " (screened out)"
    if outcome.quality not in (None, "ok"):
        notes += f" [{outcome.quality}]"
    values = ", ".join(_objective(name, outcome.metrics.get(name, math.nan))
                       for name in objectives)
    return f"{head}: {values}{notes}"


# Units that say nothing a reader needs beside the value.
_UNITLESS = frozenset({"", "1", "fraction", "ratio"})


def _objective(name: str, value: float) -> str:
    """``latency_p99_ms`` 1.2345 -> ``latency_p99 1.234 ms``: the unit once, after the value."""
    from dse.core import find_metric

    spec = find_metric(name)
    unit = "" if spec is None or spec.unit in _UNITLESS else spec.unit
    label = name.removesuffix(f"_{unit.lower()}") if unit else name
    shown = "not measured" if math.isnan(value) else _number(value)
    return f"{label} {shown}{f' {unit}' if unit and not math.isnan(value) else ''}"


def _value(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _abbreviation(key: str) -> str:
    """``num_stages`` -> ``ns``: the terminal table is narrow; its caption spells them out."""
    return "".join(part[0] for part in key.split("_") if part)


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def front_table(front: pd.DataFrame, objectives: list[str]) -> object:
    """The front as a table that fits a terminal: one compact cell per part of the configuration."""
    import pandas as pd
    from rich.table import Table

    from dse.core import DUEL_COLUMN
    from dse.results import PARAM_PREFIX, duel_text, has_unclean, metric_column

    legend: dict[str, str] = {}
    # Free parameters are the param.* columns that are not the model's or the deployment's.
    own = ("param.family", "param.backend", "param.precision", "param.batch_size",
           "param.arch.", "param.knob.")
    free = [c for c in front.columns if c.startswith(PARAM_PREFIX) and not c.startswith(own)]
    deployed = "param.backend" in front.columns

    def joined(row: pd.Series, prefix: str) -> str:
        cells = []
        for column in row.index:
            if column.startswith(prefix) and not pd.isna(row[column]):
                key = column.removeprefix(prefix)
                legend[_abbreviation(key)] = key
                cells.append(f"{_abbreviation(key)}={row[column]}")
        return " ".join(cells)

    def values(row: pd.Series) -> str:
        return " ".join(f"{c.removeprefix(PARAM_PREFIX)}={_value(row[c])}" for c in free
                        if not pd.isna(row[c]))

    # The device column only when the front spans several devices: a terminal table is narrow;
    # the quality column only when a trial on it was not measured cleanly (non_ok_on_front).
    several = bool(len(front)) and front["device"].nunique() > 1
    unclean = has_unclean(front)
    # A duel column where a front point's order against another was decided side by side.
    dueled = DUEL_COLUMN in front.columns and bool(front[DUEL_COLUMN].notna().any())
    table = Table(title=f"Pareto front ({len(front)} points)")
    # Every column folds a cell too long for the terminal onto more lines: rich's default cuts it
    # with "…" (the runtime column read "onnxrun…").
    table.add_column("trial", justify="right", overflow="fold")
    if several:
        table.add_column("device", overflow="fold")
    if deployed:
        table.add_column("runtime", overflow="fold")
        table.add_column("batch", justify="right", overflow="fold")
        table.add_column("arch", overflow="fold")
        table.add_column("knobs", overflow="fold")
    if free:
        table.add_column("parameters", overflow="fold")
    for name in objectives:
        table.add_column(metric_column(name), justify="right", overflow="fold")
    if unclean:
        table.add_column("quality", overflow="fold")
    if dueled:
        table.add_column("duel", overflow="fold")
    for _, row in front.iterrows():
        cells = [str(row["trial"]), *([str(row["device"])] if several else [])]
        if deployed:
            cells += [f"{row['param.backend']}/{row['param.precision']}",
                      str(row["param.batch_size"]), joined(row, "param.arch."),
                      joined(row, "param.knob.")]
        if free:
            cells.append(values(row))
        quality = ([str(row[TrialAttr.MEASUREMENT_QUALITY])
                    if not pd.isna(row[TrialAttr.MEASUREMENT_QUALITY]) else ""] if unclean else [])
        duel = [duel_text(row[DUEL_COLUMN])] if dueled else []
        table.add_row(*cells, *[_number(row[metric_column(n)]) for n in objectives], *quality,
                      *duel)
    table.caption = ", ".join(f"{short}={full}" for short, full in sorted(legend.items()))
    return table
