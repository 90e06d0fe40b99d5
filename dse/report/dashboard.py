"""A campaign's dashboard: study -> infos -> one self-contained, offline HTML file."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import NamedTuple

import optuna
import pandas as pd
import plotly.graph_objects as go

from dse.report.info import (
    ParallelCoordinatesInfo,
    ParetoScatterInfo,
    parallel_coordinates_info,
    pareto_scatter_info,
)
from dse.report.page import Section, message_html, page_html, table_html
from dse.report.render import figure_html, parallel_figure, scatter_figure
from dse.report.summary import (
    SummaryInfo,
    TableInfo,
    front_table_info,
    portable_table_info,
    summary_info,
)
from dse.results import (
    atomic_write_text,
    front_frame,
    load_campaign,
    screening_summary,
    study_constraints,
    study_objectives,
    trials_frame,
)


class DashboardInfo(NamedTuple):
    """Everything the page shows, computed once; the HTML is a rendering of this."""

    summary: SummaryInfo
    scatter: ParetoScatterInfo
    parallel: ParallelCoordinatesInfo
    front: TableInfo
    portable: TableInfo | None  # None for a single-device campaign
    screening: TableInfo | None = None  # None when no trial was screened


def dashboard_info(study: optuna.Study | Sequence[optuna.Study]) -> DashboardInfo:
    """Read the study (or a multi-device campaign's studies) once and derive every panel from the
    same trials table."""
    studies = [study] if isinstance(study, optuna.Study) else list(study)
    trials: pd.DataFrame = trials_frame(studies)
    first = studies[0]
    objectives = study_objectives(first)
    campaign = str(first.user_attrs.get("campaign") or first.study_name)
    return DashboardInfo(
        summary=summary_info(trials, campaign, objectives, study_constraints(first)),
        scatter=pareto_scatter_info(trials, objectives),
        parallel=parallel_coordinates_info(trials, objectives),
        front=front_table_info(front_frame(trials, objectives), objectives),
        portable=portable_table_info(front_frame(trials, objectives))
        if trials["device"].nunique() > 1 else None,
        screening=screening_table_info(trials),
    )


def screening_table_info(trials: pd.DataFrame) -> TableInfo | None:
    """The campaign's screening figures as a two-column table; None with screening off."""
    summary = screening_summary(trials)
    if summary is None:
        return None
    rows = [[name.replace("_", " "), "" if value is None else
             f"{value:.2f}" if isinstance(value, float) else str(value)]
            for name, value in summary.as_dict().items()]
    return TableInfo(["figure", "value"], rows, None)


def dashboard_html(info: DashboardInfo, title: str | None = None) -> str:
    """The page. plotly.js is inlined once, with the first figure drawn, and never fetched."""
    panels: list[tuple[str, str, str | None, Callable[[], go.Figure], str]] = [
        ("Pareto front", "dse-pareto", info.scatter.empty_reason,
         partial(scatter_figure, info.scatter), info.scatter.note),
        ("Parameters and objectives", "dse-parallel", info.parallel.empty_reason,
         partial(parallel_figure, info.parallel), ""),
    ]
    sections = []
    plotlyjs_included = False
    for heading, div_id, empty_reason, draw, note in panels:
        if empty_reason is not None:
            body = message_html(empty_reason)
        else:
            body = figure_html(draw(), div_id, include_plotlyjs=not plotlyjs_included)
            plotlyjs_included = True
        if note:
            body += "\n" + message_html(note, kind="note")
        sections.append(Section(heading, body))
    sections.append(Section("Configurations on the front", table_html(info.front)))
    if info.portable is not None:
        sections.append(Section("Portable front: architectures on several devices' fronts",
                                table_html(info.portable)))
    if info.screening is not None:
        sections.append(Section("Screening: device time spent and saved",
                                table_html(info.screening)))
    return page_html(title or f"{info.summary.campaign} — dse dashboard", info.summary, sections)


def write_dashboard(run_dir: Path, out_path: Path, title: str | None = None) -> Path:
    """Write the dashboard of the campaign in ``run_dir`` to ``out_path`` (atomically, so a
    browser reloading during a run never sees half a page); returns ``out_path``."""
    info = dashboard_info(load_campaign(run_dir))
    return atomic_write_text(out_path, dashboard_html(info, title))
