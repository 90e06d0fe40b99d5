"""The profile page of one trial (``dse profile``): one self-contained, offline HTML file in the
campaign's dashboards folder, named by :func:`profile_page_name`, linked from the campaign
dashboard's front row and from ``dashboards/index.html`` (its ``<head>`` says which trial it
profiles: :func:`dse.report.index.profile_meta_html`).

:func:`dse.report.profile_info.profile_page_info` is the data (no plotly); this module draws it.
"""

from __future__ import annotations

import html
import math
from functools import partial
from pathlib import Path

import plotly.graph_objects as go

from dse.profiling import COMPUTE_BOUND, MEMORY_BOUND, OVERHEAD_BOUND, UNKNOWN
from dse.report.index import ProfileMeta, profile_meta_html
from dse.report.page import _STYLE, Section, document_html, message_html, table_html
from dse.report.profile_info import (
    HostDeviceInfo,
    OpRooflineInfo,
    ProfilePageInfo,
    TopOpsInfo,
    profile_page_info,
    profile_page_name,
)
from dse.report.profile_tables import FileLink
from dse.report.render import Panel, panel_sections
from dse.util import atomic_write_text

__all__ = ["profile_page_html", "profile_page_info", "profile_page_name", "write_profile_page"]

# One colour per verdict on every panel; anything else (a newer profiler's verdict) is grey.
VERDICT_COLORS = {COMPUTE_BOUND: "#1f77b4", MEMORY_BOUND: "#ff7f0e", OVERHEAD_BOUND: "#9467bd",
                  UNKNOWN: "#7f7f7f"}
_OTHER = "#7f7f7f"
_CEILING = "#555555"
# Marker area follows the operator's share of time: a 1% operator is small, a 50% one large.
_SIZE_MIN, _SIZE_SPAN = 7.0, 38.0
# The div ids of the figures (fixed: the same profile gives the same page).
TOP_OPS_DIV = "dse-profile-top"
ROOFLINE_DIV = "dse-profile-roofline"
HOST_DEVICE_DIV = "dse-profile-host-device"
_EXTRA_STYLE = """
dl.header { display: grid; grid-template-columns: max-content auto; gap: 0.15rem 1rem; }
dl.header dt { color: #555; }
dl.header dd { margin: 0; }
ul.files li.absent { color: #888; }
td:first-child, th:first-child { text-align: left; }
"""


def write_profile_page(profile_folder: Path, out_path: Path) -> Path:
    """Write the page of the profile in ``profile_folder`` to ``out_path`` (atomically; links to
    the profile's files relative to ``out_path``'s folder); returns ``out_path``.

    Raises:
        ValueError: the folder holds no readable profile (one line naming the file).
    """
    info = profile_page_info(profile_folder, out_path.parent)
    return atomic_write_text(out_path, profile_page_html(info))


def profile_page_html(info: ProfilePageInfo) -> str:
    """The page: header, latency accounting, the figures (plotly.js inlined once, with the first
    one drawn, never fetched), then the tables, notes and files."""
    figures: list[Panel] = [
        ("Top operators", TOP_OPS_DIV, info.top_ops.empty_reason,
         partial(top_ops_figure, info.top_ops), info.top_ops.note),
        ("Per-operator roofline", ROOFLINE_DIV, info.roofline.empty_reason,
         partial(op_roofline_figure, info.roofline), info.roofline.note),
        ("Host and device time", HOST_DEVICE_DIV, info.host_device.empty_reason,
         partial(host_device_figure, info.host_device), info.host_device.note),
    ]
    accounting = info.accounting
    sections = [Section("Latency accounting", "\n".join(
        [table_html(accounting.table), message_html(accounting.coverage, kind="meta"),
         *([message_html(accounting.overhead, kind="note")] if accounting.overhead else [])]))]
    sections += panel_sections(figures)
    sections += [
        Section("All operators", table_html(info.ops)),
        Section("Perf counters", table_html(info.counters)),
        Section("Call stacks and symbols (perf record)",
                "<h3>Most sampled stacks</h3>\n" + table_html(info.stacks)
                + "\n<h3>Most sampled functions</h3>\n" + table_html(info.symbols)),
        Section("Nsight kernels", table_html(info.kernels)),
        Section("Notes", "\n".join(message_html(n, kind="meta") for n in info.notes)
                or message_html("none")),
        Section("Files", _files_html(info.files)),
    ]
    return _document(info, sections)


def top_ops_figure(info: TopOpsInfo) -> go.Figure:
    """Horizontal bars, the most time on top, coloured by verdict (one legend entry each)."""
    figure = go.Figure()
    known = [v for v in VERDICT_COLORS if v in info.verdicts]
    for verdict in [*known, *(v for v in dict.fromkeys(info.verdicts) if v not in known)]:
        mine = [i for i, v in enumerate(info.verdicts) if v == verdict]
        # hovertext, not text: a bar would print its text inside itself.
        figure.add_trace(go.Bar(
            x=[info.ms_per_run[i] for i in mine], y=[info.labels[i] for i in mine],
            orientation="h", name=_text(verdict),
            marker={"color": VERDICT_COLORS.get(verdict, _OTHER)},
            hovertext=[info.hover[i] for i in mine], hovertemplate="%{hovertext}<extra></extra>"))
    figure.update_layout(
        template="plotly_white", height=140 + 26 * len(info.labels), barmode="overlay",
        margin={"l": 20, "r": 20, "t": 30, "b": 50}, legend={"title": {"text": "verdict"}},
        xaxis={"title": {"text": "ms per run"}},
        yaxis={"categoryorder": "array", "categoryarray": list(reversed(info.labels)),
               "automargin": True})
    return figure


def op_roofline_figure(info: OpRooflineInfo) -> go.Figure:
    """Log-log: each operator at (intensity, attained GFLOP/s), coloured by verdict, sized by its
    share of time, under the ceilings (dashed)."""
    figure = go.Figure()
    for ceiling in info.ceilings:
        figure.add_trace(go.Scatter(
            x=ceiling.x, y=ceiling.y, name=ceiling.name, mode="lines+text", showlegend=False,
            text=[""] * (len(ceiling.x) - 1) + [_text(ceiling.name)], textposition="top left",
            textfont={"color": _CEILING, "size": 11},
            line={"color": _CEILING, "dash": "dash", "width": 1.5},
            hovertemplate=f"{_text(ceiling.name)}<extra></extra>"))
    for group in info.groups:
        figure.add_trace(go.Scatter(
            x=group.x, y=group.y, name=_text(group.verdict), mode="markers", text=group.hover,
            hovertemplate="%{text}<extra></extra>",
            marker={"color": VERDICT_COLORS.get(group.verdict, _OTHER), "opacity": 0.8,
                    "size": [_size(share) for share in group.share],
                    "line": {"width": 0.5, "color": "#333333"}}))
    figure.update_layout(
        template="plotly_white", height=560, margin={"l": 70, "r": 20, "t": 30, "b": 60},
        legend={"title": {"text": "verdict (size: share of time)"}},
        xaxis={"type": "log", "title": {"text": info.x_title}},
        yaxis={"type": "log", "title": {"text": info.y_title}})
    return figure


def host_device_figure(info: HostDeviceInfo) -> go.Figure:
    """Host and device milliseconds per run side by side: all operators, then the top ones."""
    # Device first: plotly stacks a horizontal group bottom-up, so host is drawn on top.
    figure = go.Figure([
        go.Bar(x=[None if math.isnan(v) else v for v in values], y=info.labels, orientation="h",
               name=name, marker={"color": color})
        for name, values, color in (("device", info.device_ms, "#d62728"),
                                    ("host", info.host_ms, "#2ca02c"))])
    figure.update_layout(
        template="plotly_white", height=160 + 34 * len(info.labels), barmode="group",
        margin={"l": 20, "r": 20, "t": 30, "b": 50}, legend={"traceorder": "reversed"},
        xaxis={"title": {"text": "ms per run"}},
        yaxis={"categoryorder": "array", "categoryarray": list(reversed(info.labels)),
               "automargin": True})
    return figure


def _size(share: float) -> float:
    return _SIZE_MIN + _SIZE_SPAN * math.sqrt(min(max(share, 0.0), 1.0))


def _text(text: str) -> str:
    """Plain text as plotly's labels take it (they read markup), a ``%{`` shown, not filled."""
    return html.escape(text, quote=False).replace("%", "&#37;")


def _files_html(files: list[FileLink]) -> str:
    items = []
    for file in files:
        role = html.escape(file.role)
        if file.present:
            items.append(f'<li><a href="{html.escape(file.href)}">{html.escape(file.name)}</a> '
                         f"— {role}</li>")
        else:
            items.append(f'<li class="absent">{html.escape(file.name)} — {role} (absent)</li>')
    note = message_html("trace.json opens in Perfetto (ui.perfetto.dev) or chrome://tracing. The "
                        "links lead into the run folder: they work with the page opened as a file "
                        "(dse report --serve serves the dashboards folder only).", kind="note")
    return '<ul class="files">\n' + "\n".join(items) + "\n</ul>\n" + note


def _header_html(info: ProfilePageInfo) -> str:
    rows = "\n".join(f"<dt>{html.escape(name)}</dt><dd>{html.escape(value)}</dd>"
                     for name, value in info.header)
    return f'<dl class="header">\n{rows}\n</dl>'


def _document(info: ProfilePageInfo, sections: list[Section]) -> str:
    meta = profile_meta_html(ProfileMeta(info.campaign, info.device, info.trial, info.backend))
    return document_html(info.title, meta, _STYLE + _EXTRA_STYLE, [_header_html(info)], sections)
