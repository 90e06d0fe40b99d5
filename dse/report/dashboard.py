"""A campaign's dashboard: study -> infos -> one self-contained, offline HTML file."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import quote

import optuna
import pandas as pd
import plotly.graph_objects as go

from dse.core import StudyAttr
from dse.report.description import campaign_description
from dse.report.distributions import (
    LatencyDistributionsInfo,
    latency_distributions_figure,
    latency_distributions_info,
)
from dse.report.duels import DuelsInfo, duels_info, duels_section
from dse.report.failures import FailuresInfo, failures_info, failures_table
from dse.report.front_table import front_table_info
from dse.report.generation_views import GenerationView, generation_views
from dse.report.history import (
    HypervolumeHistoryInfo,
    hypervolume_history_figure,
    hypervolume_history_info,
)
from dse.report.info import ParetoScatterInfo, pareto_scatter_info, trial_provenance
from dse.report.page import Section, comparison_html, page_html, table_html
from dse.report.parallel import (
    ParallelCoordinatesInfo,
    parallel_coordinates_info,
    parallel_figure,
)
from dse.report.profile_info import profile_pages
from dse.report.render import panel_sections, scatter3d_figure, scatter_figure
from dse.report.roofline import RooflineInfo, roofline_figure, roofline_info
from dse.report.summary import (
    DeviceComparisonInfo,
    SummaryInfo,
    device_comparison_info,
    portable_table_info,
    summary_info,
)
from dse.report.table_info import TableInfo
from dse.report.traces import TracesInfo, traces_figure, traces_info
from dse.results import (
    atomic_write_text,
    front_frame,
    load_campaign,
    screening_summary,
    study_constraints,
    study_objectives,
    trials_frame,
)

if TYPE_CHECKING:
    from dse.storage import CampaignStorage

FAILURES_ANCHOR = "failures"
"""The id of the failures section, linked from the header's trial counts."""
FRONT_ANCHOR = "front"
"""The id of the section of the front's table."""


class DashboardInfo(NamedTuple):
    """Everything the page shows, computed once; the HTML is a rendering of this."""

    summary: SummaryInfo
    scatter: ParetoScatterInfo
    parallel: ParallelCoordinatesInfo
    front: TableInfo
    portable: TableInfo | None  # None for a single-device campaign
    history: HypervolumeHistoryInfo
    latencies: LatencyDistributionsInfo
    traces: TracesInfo
    roofline: RooflineInfo
    screening: TableInfo | None = None  # None when no trial was screened
    devices: DeviceComparisonInfo | None = None  # None for a single-device campaign
    profiles: TableInfo | None = None  # None when no trial has a profile page beside the page
    failures: FailuresInfo | None = None  # None: not computed (an info made by hand)
    duels: DuelsInfo | None = None  # None when no duel ran
    generation: tuple[GenerationView, ...] = ()  # a language-model campaign's own views


def dashboard_info(study: optuna.Study | Sequence[optuna.Study],
                   run_dir: Path | None = None) -> DashboardInfo:
    """Read the study (or a multi-device campaign's studies) once and derive every panel from the
    same trials table and one front. ``run_dir`` is where the raw samples live (latency
    distributions and traces say they have none without it)."""
    studies = [study] if isinstance(study, optuna.Study) else list(study)
    trials: pd.DataFrame = trials_frame(studies)
    first = studies[0]
    objectives = study_objectives(first)
    campaign = str(first.user_attrs.get(StudyAttr.CAMPAIGN) or first.study_name)
    # The front is the costly part of a large study: computed once, shared by every panel.
    front = front_frame(trials, objectives)
    several = trials["device"].nunique() > 1
    provenance = trial_provenance(studies)
    duels = duels_info(studies)
    summary = summary_info(trials, campaign, objectives, study_constraints(first))
    return DashboardInfo(
        summary=summary._replace(duels=duels.headline) if duels is not None else summary,
        scatter=pareto_scatter_info(trials, objectives, provenance=provenance, front=front),
        parallel=parallel_coordinates_info(trials, objectives),
        front=front_table_info(front, objectives, provenance),
        portable=portable_table_info(front) if several else None,
        history=hypervolume_history_info(trials, objectives),
        latencies=latency_distributions_info(trials, objectives, studies, run_dir, front=front),
        traces=traces_info(trials, objectives, studies, run_dir, front=front),
        roofline=roofline_info(trials, objectives, studies, front=front),
        screening=screening_table_info(trials),
        devices=device_comparison_info(trials, objectives, front) if several else None,
        failures=failures_info(trials),
        duels=duels,
        generation=tuple(generation_views(trials, objectives, provenance, front)),
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
    ]
    if info.scatter.empty_reason is None and info.scatter.triples:
        panels.append(("Pareto front in 3-D", "dse-pareto-3d", None,
                       partial(scatter3d_figure, info.scatter), ""))
    panels += [(view.heading, view.div_id, view.scatter.empty_reason,
                partial(scatter_figure, view.scatter), view.scatter.note)
               for view in info.generation]
    panels += [
        ("Parameters and objectives", "dse-parallel", info.parallel.empty_reason,
         partial(parallel_figure, info.parallel), info.parallel.note),
        ("Hypervolume history", "dse-hypervolume", info.history.empty_reason,
         partial(hypervolume_history_figure, info.history), info.history.note),
        ("Latency distributions of the front", "dse-latency", info.latencies.empty_reason,
         partial(latency_distributions_figure, info.latencies), info.latencies.note),
        ("Power, temperature and clock traces", "dse-traces", info.traces.empty_reason,
         partial(traces_figure, info.traces), info.traces.note),
        ("Roofline", "dse-roofline", info.roofline.empty_reason,
         partial(roofline_figure, info.roofline), info.roofline.note),
    ]
    sections = panel_sections(panels)
    sections.append(Section("Configurations on the front", table_html(info.front), FRONT_ANCHOR))
    if info.duels is not None:
        sections.append(duels_section(info.duels))
    if info.failures is not None:
        sections.append(Section("Failed and infeasible trials, by reason",
                                table_html(failures_table(info.failures)), FAILURES_ANCHOR))
    if info.devices is not None:
        sections.append(Section("Devices compared", comparison_html(info.devices)))
    if info.portable is not None:
        sections.append(Section("Portable front: architectures on several devices' fronts",
                                table_html(info.portable)))
    if info.screening is not None:
        sections.append(Section("Screening: device time spent and saved",
                                table_html(info.screening)))
    if info.profiles is not None:
        sections.append(Section("Profiled trials (dse profile)", table_html(info.profiles)))
    failed = (0 if info.failures is None else
              sum(group.size for group in info.failures.groups))
    return page_html(title or f"{info.summary.campaign} — dse dashboard", info.summary, sections,
                     failures=(FAILURES_ANCHOR, failed) if failed else None)


def write_dashboard(run_dir: Path, out_path: Path, title: str | None = None,
                    storage: CampaignStorage | None = None,
                    experiment: Path | None = None, description: str | None = None) -> Path:
    """Write the dashboard of the campaign in ``run_dir`` (its study in ``storage``, by default
    where the run folder says) to ``out_path`` (atomically, so a browser reloading during a run
    never sees half a page); returns ``out_path``, wherever the caller puts it. With
    ``experiment`` (its YAML file), each front row has its ``dse export`` command, and the page
    (and the dashboards index) shows the campaign's description: ``description``, else the
    experiment's, else its search space's (:func:`dse.report.description.campaign_description`)."""
    info = with_profile_links(dashboard_info(load_campaign(run_dir, storage), run_dir),
                              out_path.parent)
    if experiment is not None:
        info = info._replace(front=with_export_commands(info.front, experiment,
                                                        info.summary.campaign))
    if description is None and experiment is not None:
        description = campaign_description(experiment)
    if description:
        info = info._replace(summary=info.summary._replace(description=description))
    return atomic_write_text(out_path, dashboard_html(info, title))


def with_export_commands(front: TableInfo, experiment: Path, campaign: str) -> TableInfo:
    """The front table with each row's ``dse export`` command: its trial and device, and a
    bundle folder named after them beside the current folder."""
    if front.empty_reason is not None or not {"trial", "device"} <= set(front.columns):
        return front
    trial, device = front.columns.index("trial"), front.columns.index("device")
    commands = [
        shlex.join(["dse", "export", str(experiment), "--trial", row[trial], "--device",
                    row[device], "--out",
                    f"bundles/{campaign}-{row[device]}-trial-{int(row[trial]):05d}"])
        if row[trial].isdigit() else "" for row in front.rows]
    return front._replace(commands=commands)


def with_profile_links(info: DashboardInfo, dashboards_dir: Path) -> DashboardInfo:
    """The info with a link in each front row whose trial has a profile page in
    ``dashboards_dir`` (``dse.report.profile_info.profile_page_name``), and a table of every
    profiled trial of the campaign (a profile of a trial off the front has no row to sit in).
    One listing of the folder, found when the page is written, so a profile made since shows on
    the next write."""
    pages = profile_pages(dashboards_dir, info.summary.campaign)
    if not pages:
        return info
    front = info.front
    if front.empty_reason is None and {"trial", "device"} <= set(front.columns):
        trial, device = front.columns.index("trial"), front.columns.index("device")
        links = [pages.get((row[device], int(row[trial])), "") if row[trial].isdigit() else ""
                 for row in front.rows]
        front = front._replace(links=[quote(link) for link in links])
    keys = sorted(pages)
    profiles = TableInfo(["device", "trial"], [[device, str(trial)] for device, trial in keys],
                         None, links=[quote(pages[key]) for key in keys])
    return info._replace(front=front, profiles=profiles)
