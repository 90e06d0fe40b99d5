"""Thin plotly renderers: an info from :mod:`dse.report.info` in, a figure or HTML fragment out.

No decisions about data live here (what is on the front, what is feasible); only how it looks.
Choices a reader makes on the page (which device, which axes) are plotly's own ``updatemenus``:
buttons that restyle and relayout the figure, so the page needs no script of its own.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import plotly.graph_objects as go
import plotly.io as pio

from dse.core import Direction, find_metric
from dse.report.axis_text import wrap_title
from dse.report.info import ParetoScatterInfo, PointGroup
from dse.report.page import Section, message_html

# A fixed palette indexed by group order keeps colours identical from one report to the next.
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#17becf", "#bcbd22", "#7f7f7f")
_INFEASIBLE = "#9a9a9a"
_FAILED = "#7b0d1e"
_FRONT = "#111111"
_UNCLEAN = "#e69f00"
# One symbol per kind of point; all five exist in 2-D and in 3-D.
_SYMBOLS = {"feasible": "circle", "infeasible": "diamond-open", "failed": "x",
            "unclean": "square-open", "front": "circle-open"}
# Open symbols are all outline; filled ones need none.
_OUTLINE = {"feasible": 0.0, "infeasible": 1.5, "failed": 0.0, "unclean": 1.5, "front": 1.5}
# No plotly logo link and no "edit in Chart Studio": the page makes no request of its own.
_CONFIG = {"displaylogo": False, "responsive": True}
# Positions are drawn, not read: six significant digits place a point to a millionth of its
# value and keep a page of 10,000 trials (each in every pair's button) small. They stay plain
# JSON arrays, not base64 typed arrays, so that the page's figure data reads as numbers.
_DIGITS = 6


class _Slice(NamedTuple):
    """The points of one group on one device: one trace."""

    device: str
    group: PointGroup
    points: list[int]
    color: str


def scatter_figure(info: ParetoScatterInfo) -> go.Figure:
    """Each device's points along one pair of axes: feasible points coloured by backend/precision,
    infeasible ones as grey diamonds, ones not measured cleanly as orange squares, failed ones as
    dark red crosses, the front ringed (and joined
    when the axes are the two objectives). A menu picks the pair of axes, another the device;
    the first device along the first pair shows first."""
    slices = _slices(info)
    first = info.pairs[0] if info.pairs else (0, 1)
    joined = bool(info.joined and info.joined[0])
    figure = go.Figure([_scatter(s, info, first, joined, s.device == info.devices[0])
                        for s in slices])  # no slice without a device to show
    menus = []
    if len(info.pairs) > 1:
        menus.append(_menu([
            {"method": "update", "label": _pair_label(info, x, y),
             "args": [{"x": [_coords(s, x) for s in slices], "y": [_coords(s, y) for s in slices],
                       "mode": [_mode(s, line) for s in slices]},
                      {**_axis_layout(info, "xaxis", x), **_axis_layout(info, "yaxis", y)}]}
            for (x, y), line in zip(info.pairs, info.joined, strict=True)], 0.0))
    if len(info.devices) > 1:
        menus.append(_device_menu(info, slices, 0.5 if menus else 0.0))
    figure.update_layout(
        template="plotly_white", height=560,
        margin={"l": 70, "r": 20, "t": 70 if menus or info.projection_note else 30, "b": 60},
        legend={"title": {"text": "backend/precision"}}, updatemenus=menus,
        annotations=_projection_annotation(info),
        **_axis_layout(info, "xaxis", first[0]), **_axis_layout(info, "yaxis", first[1]))
    return figure


def _projection_annotation(info: ParetoScatterInfo) -> list[dict[str, Any]]:
    """The note that the ringed front is over more objectives than the two drawn, above the plot
    on the right (the menus are on the left), wrapped to a few short lines."""
    if not info.projection_note:
        return []
    lines = wrap_title([info.projection_note], 64)
    return [{"text": "<br>".join(_text(line) for line in lines), "showarrow": False,
             "xref": "paper", "yref": "paper", "x": 1.0, "y": 1.01, "xanchor": "right",
             "yanchor": "bottom", "align": "right", "font": {"size": 11, "color": "#555"}}]


def scatter3d_figure(info: ParetoScatterInfo) -> go.Figure:
    """The same points along three axes (the first objective up); a menu picks the three axes
    when there are more, another the device. Needs ``info.triples`` (three axes or more)."""
    if not info.triples:
        raise ValueError(f"a 3-D scatter needs three axes, but got "
                         f"{[axis.metric for axis in info.axes]}")
    slices = _slices(info)
    first = info.triples[0]
    figure = go.Figure([_scatter3d(s, info, first, s.device == info.devices[0])
                        for s in slices])
    menus = []
    if len(info.triples) > 1:
        menus.append(_menu([
            {"method": "update", "label": _text(" · ".join(info.axes[a].metric for a in triple)),
             "args": [{key: [_coords(s, a) for s in slices]
                       for key, a in zip("xyz", triple, strict=True)},
                      _scene_layout(info, triple)]}
            for triple in info.triples], 0.0))
    if len(info.devices) > 1:
        menus.append(_device_menu(info, slices, 0.5 if menus else 0.0))
    # The axis titles are drawn inside the scene's box: a camera further out than plotly's
    # (1.25, 1.25, 1.25) keeps the cube and its titles inside it at any rotation of the default.
    figure.update_layout(
        template="plotly_white", height=660,
        margin={"l": 10, "r": 10, "t": 70 if menus else 30, "b": 10},
        legend={"title": {"text": "backend/precision"}}, updatemenus=menus,
        scene={"camera": {"eye": {"x": 1.6, "y": 1.6, "z": 0.95},
                          "center": {"x": 0.0, "y": 0.0, "z": -0.08}},
               "aspectmode": "cube", "domain": {"x": [0.0, 0.82]}},
        **_scene_layout(info, first))
    return figure


def figure_html(figure: go.Figure, div_id: str, include_plotlyjs: bool) -> str:
    """A ``<div>`` and its script. A fixed ``div_id`` (plotly would draw a random one) keeps the
    page identical for the same study; plotly.js is inlined only where ``include_plotlyjs``."""
    html_text: str = pio.to_html(figure, full_html=False, include_plotlyjs=include_plotlyjs,
                                 div_id=div_id, config=_CONFIG)
    return html_text


def _slices(info: ParetoScatterInfo) -> list[_Slice]:
    """One slice per device and group that has points there, device by device; a group keeps its
    colour on every device."""
    styled = [*[(g, _PALETTE[i % len(_PALETTE)]) for i, g in enumerate(info.groups)],
              (info.infeasible, _INFEASIBLE), (info.unclean, _UNCLEAN), (info.failed, _FAILED),
              (info.front, _FRONT)]
    slices = []
    for device in info.devices:
        for group, color in styled:
            points = [i for i, own in enumerate(group.devices) if own == device]
            if points:
                slices.append(_Slice(device, group, points, color))
    return slices


def _scatter(part: _Slice, info: ParetoScatterInfo, pair: tuple[int, int], joined: bool,
             visible: bool) -> go.Scatter:
    front = part.group.kind == "front"
    customdata, template = _hover(part, info)
    return go.Scatter(
        x=_coords(part, pair[0]), y=_coords(part, pair[1]), name=part.group.name,
        mode=_mode(part, joined), visible=visible, customdata=customdata,
        hovertemplate=template,
        line={"color": _FRONT, "width": 1.5, "dash": "dot"} if front else None,
        marker={"color": part.color, "symbol": _SYMBOLS[part.group.kind],
                "size": 15 if front else 8, "line": {"width": _OUTLINE[part.group.kind]}})


def _scatter3d(part: _Slice, info: ParetoScatterInfo, triple: tuple[int, int, int],
               visible: bool) -> go.Scatter3d:
    front = part.group.kind == "front"
    customdata, template = _hover(part, info)
    x, y, z = (_coords(part, axis) for axis in triple)
    return go.Scatter3d(
        x=x, y=y, z=z, name=part.group.name, mode="markers", visible=visible,
        customdata=customdata, hovertemplate=template,
        marker={"color": part.color, "symbol": _SYMBOLS[part.group.kind],
                "size": 9 if front else 4})


def _mode(part: _Slice, joined: bool) -> str:
    return "lines+markers" if joined and part.group.kind == "front" else "markers"


def _coords(part: _Slice, axis: int) -> list[float]:
    values = part.group.values[axis]
    return [float(f"{values[i]:.{_DIGITS}g}") for i in part.points]


def _hover(part: _Slice, info: ParetoScatterInfo) -> tuple[npt.NDArray[np.str_], str]:
    """Per point its texts, and the template that lays them out: a field every point of the
    slice has is labelled once, in the template (a page holds thousands of points); a field only
    some points have (a knob or a provenance key of one runtime, among the front's several) is
    labelled in those points' own texts, so that no point shows another runtime's field; the
    device's shared provenance is said once, in the template."""
    rows = [part.group.hover[i] for i in part.points]
    fields = [f for f in range(1, len(info.hover_fields)) if any(row[f] for row in rows)]
    everywhere = {f for f in fields if all(row[f] for row in rows)}
    # A text array: plotly copies it whole rather than checking each text.
    customdata = np.array([[row[0], *(row[f] if f in everywhere else _own_line(info, f, row[f])
                                      for f in fields)] for row in rows], dtype=str)
    template = f"<b>trial %{{customdata[0]}}</b> on {_text(part.device)}"
    for n, f in enumerate(fields, start=1):
        template += (f"<br>{_safe(info.hover_fields[f])}: %{{customdata[{n}]}}"
                     if f in everywhere else f"%{{customdata[{n}]}}")
    template += "".join(f"<br><i>{_safe(note)}</i>"
                        for note in info.device_notes.get(part.device, []))
    return customdata, template + "<extra></extra>"


def _own_line(info: ParetoScatterInfo, field: int, text: str) -> str:
    """A point's line for a field not every point of its trace has: '' without it. Filled into
    the template as data, its ``%`` needs no guarding."""
    return f"<br>{info.hover_fields[field]}: {text}" if text else ""


def _safe(text: str) -> str:
    """Escaped text made inert in a hover template: ``%`` as its character reference, so that
    a ``%{...}`` in a name is shown rather than filled in."""
    return text.replace("%", "&#37;")


def _menu(buttons: list[dict[str, Any]], x: float) -> dict[str, Any]:
    return {"buttons": buttons, "direction": "down", "showactive": True, "active": 0,
            "x": x, "xanchor": "left", "y": 1.02, "yanchor": "bottom",
            "pad": {"r": 4, "t": 4}}


def _device_menu(info: ParetoScatterInfo, slices: list[_Slice], x: float) -> dict[str, Any]:
    return _menu([{"method": "restyle", "label": f"device: {_text(device)}",
                   "args": [{"visible": [s.device == device for s in slices]}]}
                  for device in info.devices], x)


def _pair_label(info: ParetoScatterInfo, x: int, y: int) -> str:
    return _text(f"x: {info.axes[x].metric} · y: {info.axes[y].metric}")


def _text(text: str) -> str:
    """Plain text (a metric's name or unit, declared in a search space) as plotly's labels take
    it: they read markup, so it is escaped."""
    return _safe(html.escape(text, quote=False))


def _axis_layout(info: ParetoScatterInfo, name: str, axis: int) -> dict[str, Any]:
    """Layout of one 2-D axis, as ``relayout`` keys (``xaxis.title.text``), autoranged anew."""
    if axis >= len(info.axes):
        return {}
    spec = info.axes[axis]
    return {f"{name}.title.text": _text(spec.title),
            f"{name}.type": "log" if spec.log else "linear",
            f"{name}.autorange": True}


def _short_title(metric: str) -> str:
    """``latency_p99_ms [ms] better ↓``: a 3-D axis has little room; the arrow points the way
    values are better, as on the parallel coordinates."""
    spec = find_metric(metric)
    if spec is None:
        return metric
    return f"{spec.column} better {'↑' if spec.direction is Direction.MAXIMIZE else '↓'}"


def _scene_layout(info: ParetoScatterInfo, triple: tuple[int, int, int]) -> dict[str, Any]:
    layout: dict[str, Any] = {}
    for name, axis in zip(("xaxis", "yaxis", "zaxis"), triple, strict=True):
        spec = info.axes[axis]
        layout |= {f"scene.{name}.title.text": _text(_short_title(spec.metric)),
                   f"scene.{name}.type": "log" if spec.log else "linear",
                   # On a log axis, ticks at 1, 2 and 5 of each decade rather than at every digit.
                   f"scene.{name}.dtick": "D2" if spec.log else None,
                   f"scene.{name}.autorange": True}
    return layout


# A page's figure: heading, div id, why it is not drawn (None when it is), how to draw it, a note.
Panel = tuple[str, str, str | None, Callable[[], go.Figure], str]


def panel_sections(panels: Sequence[Panel]) -> list[Section]:
    """One section per panel: its figure (plotly.js inlined with the first one drawn, never
    fetched) or the reason it has none, then its note."""
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
    return sections
