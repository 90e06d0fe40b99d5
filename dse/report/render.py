"""Thin plotly renderers: an info from :mod:`dse.report.info` in, a figure or HTML fragment out.

No decisions about data live here (what is on the front, what is feasible); only how it looks.
"""

from __future__ import annotations

import plotly.graph_objects as go
import plotly.io as pio

from dse.report.info import ParallelCoordinatesInfo, ParetoScatterInfo, PointGroup

# A fixed palette indexed by group order keeps colours identical from one report to the next.
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#17becf", "#bcbd22", "#7f7f7f")
_INFEASIBLE = "#b0b0b0"
_FRONT = "#111111"
# No plotly logo link and no "edit in Chart Studio": the page makes no request of its own.
_CONFIG = {"displaylogo": False, "responsive": True}


def scatter_figure(info: ParetoScatterInfo) -> go.Figure:
    """Feasible points coloured by backend/precision, front members ringed, the front joined
    (when the axes are the objectives), infeasible and failed points as grey crosses."""
    figure = go.Figure()
    for index, group in enumerate(info.groups):
        figure.add_trace(_points(group, _PALETTE[index % len(_PALETTE)], "circle"))
    if info.infeasible.trials:
        figure.add_trace(_points(info.infeasible, _INFEASIBLE, "x"))
    if info.front.trials:
        figure.add_trace(go.Scatter(
            x=info.front.x, y=info.front.y, name=info.front.name,
            mode="lines" if info.front_is_line else "markers",
            line={"color": _FRONT, "width": 1.5, "dash": "dot"},
            marker={"symbol": "circle-open", "size": 16, "color": _FRONT},
            text=info.front.hover, hovertemplate="%{text}<extra></extra>"))
    figure.update_layout(
        template="plotly_white", height=520, margin={"l": 70, "r": 20, "t": 30, "b": 60},
        legend={"title": {"text": "backend/precision"}},
        xaxis={"title": {"text": info.x_axis.title if info.x_axis else ""},
               "type": "log" if info.x_axis and info.x_axis.log else "linear"},
        yaxis={"title": {"text": info.y_axis.title if info.y_axis else ""},
               "type": "log" if info.y_axis and info.y_axis.log else "linear"})
    return figure


def parallel_figure(info: ParallelCoordinatesInfo) -> go.Figure:
    """One line per feasible trial across parameters and objectives, coloured by the first
    objective so that the better end is always the bright one."""
    dimensions = []
    for dimension in info.dimensions:
        axis: dict[str, object] = {"label": dimension.label, "values": dimension.values}
        if dimension.ticktext is not None:
            axis.update(tickvals=dimension.tickvals, ticktext=dimension.ticktext)
        dimensions.append(axis)
    line = {"color": info.color, "colorscale": "Viridis",
            "reversescale": not info.color_higher_is_better, "showscale": True,
            "colorbar": {"title": {"text": info.color_title}}}
    figure = go.Figure(go.Parcoords(line=line, dimensions=dimensions))
    figure.update_layout(template="plotly_white", height=480,
                         margin={"l": 80, "r": 80, "t": 60, "b": 30})
    return figure


def figure_html(figure: go.Figure, div_id: str, include_plotlyjs: bool) -> str:
    """A ``<div>`` and its script. A fixed ``div_id`` (plotly would draw a random one) keeps the
    page identical for the same study; plotly.js is inlined only where ``include_plotlyjs``."""
    html: str = pio.to_html(figure, full_html=False, include_plotlyjs=include_plotlyjs,
                            div_id=div_id, config=_CONFIG)
    return html


def _points(group: PointGroup, color: str, symbol: str) -> go.Scatter:
    return go.Scatter(
        x=group.x, y=group.y, name=group.name, mode="markers", text=group.hover,
        hovertemplate="%{text}<extra></extra>",
        marker={"color": color, "symbol": symbol, "size": [12 if f else 8 for f in group.on_front],
                "line": {"color": _FRONT, "width": [1.5 if f else 0 for f in group.on_front]}})
