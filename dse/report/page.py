"""The dashboard page: one HTML document, all styles inline, nothing fetched from elsewhere."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import NamedTuple

from dse.report.index import dashboard_meta_html
from dse.report.summary import DeviceComparisonInfo, SummaryInfo
from dse.report.table_info import TableInfo

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem 2rem; color: #222; }
h1 { margin-bottom: 0.2rem; }
section { margin-top: 2rem; }
.meta { color: #555; margin: 0.2rem 0; }
.description { margin: 0.2rem 0 0.6rem; font-size: 1.05rem; }
.note, .empty { color: #666; font-style: italic; }
.table { overflow: auto; max-height: 80vh; max-width: 100%; }
table { border-collapse: collapse; font-size: 0.9rem; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25rem 0.6rem; text-align: right; }
th { background: #f4f4f4; position: sticky; top: 0; cursor: pointer; user-select: none;
     vertical-align: bottom; }
td { vertical-align: top; }
.tablebox .more { display: none; }
.tablebox:has(.unfold input:checked) .more { display: table-cell; }
.unfold { display: inline-block; margin-bottom: 0.4rem; color: #555; cursor: pointer; }
td.prose { text-align: left; min-width: 16rem; max-width: 32rem; white-space: pre-wrap; }
th.prose { text-align: left; }
th[aria-sort="ascending"]::after { content: " \\25B2"; }
th[aria-sort="descending"]::after { content: " \\25BC"; }
td.yaml { text-align: left; }
td.yaml pre { margin: 0.3rem 0; font-size: 0.85rem; }
h3 { margin-bottom: 0.4rem; }
"""

# Sorting a table by the header clicked (again: the other way), numbers as numbers, empty cells
# last; the rows' order on the page is the only state. One handler on the table's head, so the
# page stays one static document with no script element of its own.
_SORT_ON_CLICK = (
    "var th=event.target.closest('th');if(!th)return;"
    "var i=th.cellIndex,up=th.getAttribute('aria-sort')!=='ascending',"
    "body=this.parentNode.tBodies[0],rows=Array.from(body.rows);"
    "Array.from(this.rows[0].cells).forEach(function(c){c.removeAttribute('aria-sort')});"
    "th.setAttribute('aria-sort',up?'ascending':'descending');"
    "function v(r){return r.cells[i]?r.cells[i].textContent.trim():''}"
    "rows.sort(function(a,b){var x=v(a),y=v(b);"
    "if(x===''||y==='')return (x==='')-(y==='');"
    "var c=(isFinite(x)&&isFinite(y))?x-y:x.localeCompare(y,undefined,{numeric:true});"
    "return up?c:-c});"
    "rows.forEach(function(r){body.appendChild(r)})"
)


class Section(NamedTuple):
    """A titled part of the page; ``body`` is HTML already (a figure, a table, a message)."""

    heading: str
    body: str
    anchor: str = ""
    """The section's id, for a link to it ('' for none)."""


def header_html(summary: SummaryInfo, failures: tuple[str, int] | None = None) -> str:
    """Campaign, trial counts by status (with ``failures``, the id of the section that says why
    trials failed and how many it lists: a link there), objectives and constraints, first and
    last times."""
    counts = ", ".join(f"{count} {kind}" for kind, count in summary.counts) or "none yet"
    why = ("" if failures is None else
           f' (<a href="#{html.escape(failures[0])}">{failures[1]} without a feasible result: '
           f"why</a>)")
    if summary.repeats:  # the measured-cleanly count below leaves them out: say why they differ
        why += html.escape(f"; {summary.repeats} of them reused an earlier trial's result, "
                           f"measuring nothing")
    lines = [
        f"<strong>{summary.trials}</strong> trials: {html.escape(counts)}{why}",
        "objectives: " + html.escape("; ".join(summary.objectives) or "none"),
        "constraints: " + html.escape("; ".join(summary.constraints) or "none"),
    ]
    if summary.first_started is not None:
        last = summary.last_completed or "—"
        lines.append(html.escape(f"first trial started {summary.first_started}, "
                                 f"last finished {last}"))
    if summary.quality:
        lines.append("measurement: " + html.escape(summary.quality))
    if summary.duels:
        lines.append("duels: " + html.escape(summary.duels))
    return "\n".join(f'<p class="meta">{line}</p>' for line in lines)


def table_html(table: TableInfo) -> str:
    """An HTML table of text cells, every cell escaped, sorted by a click on a heading. With
    ``shown``, the columns after the first ``shown`` are folded behind a toggle; with ``links``,
    a column links each row's profile page; with ``deploy_yaml``, ``commands`` or
    ``provenance``, a last column holds each row's YAML, ``dse export`` command and provenance,
    each folded."""
    if table.empty_reason is not None:
        return message_html(table.empty_reason)
    count = len(table.columns)
    shown = count if table.shown is None else min(table.shown, count)
    folds = [' class="prose"' if i in table.prose else "" for i in range(shown)]
    folds += [' class="more"'] * (count - shown)
    extras = [*(["profile"] if table.links is not None else []),
              *(["deploy"] if _has_deploy(table) else [])]
    head = "".join(f"<th{fold}>{html.escape(column)}</th>"
                   for column, fold in zip(table.columns, folds, strict=True))
    head += "".join(f"<th>{column}</th>" for column in extras)
    links = table.links if table.links is not None else [None] * len(table.rows)
    body = "\n".join(
        "<tr>" + "".join(f"<td{fold}>{html.escape(cell)}</td>"
                         for cell, fold in zip(row, folds, strict=True))
        + ("" if link is None else _link_cell(link))
        + (_deploy_cell(table, i) if _has_deploy(table) else "") + "</tr>"
        for i, (row, link) in enumerate(zip(table.rows, links, strict=True)))
    note = "" if not table.note else "\n" + message_html(table.note, kind="note")
    toggle = "" if shown == count else (
        f'<label class="unfold"><input type="checkbox"> show all {count} columns (every '
        f"parameter and metric; sort by any)</label>\n")
    # The table scrolls in its own box, so a wide one (every metric) does not widen the page
    # and its head stays in view.
    return (f'<div class="tablebox">{toggle}<div class="table"><table class="front">\n'
            f'<thead onclick="{html.escape(_SORT_ON_CLICK)}">'
            f"<tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table></div></div>{note}")


def _has_deploy(table: TableInfo) -> bool:
    return any(part is not None for part in (table.deploy_yaml, table.commands,
                                              table.provenance))


def _deploy_cell(table: TableInfo, row: int) -> str:
    """The row's configuration as YAML, its ``dse export`` command and its provenance, each
    folded ('' where the row has none)."""
    parts = []
    if table.deploy_yaml is not None:
        parts.append(_folded("YAML", table.deploy_yaml[row]))
    if table.commands is not None and table.commands[row]:
        parts.append(_folded("dse export", table.commands[row]))
    if table.provenance is not None and table.provenance[row]:
        parts.append(_folded("provenance", "\n".join(table.provenance[row])))
    return f'<td class="yaml">{"".join(parts)}</td>'


def _folded(summary: str, text: str) -> str:
    return f"<details><summary>{summary}</summary><pre>{html.escape(text)}</pre></details>"


def comparison_html(comparison: DeviceComparisonInfo) -> str:
    """The devices table, then the architectures measured on several devices side by side."""
    return "\n".join([
        table_html(comparison.devices),
        "<h3>Architectures feasible on several devices: best of each objective per device</h3>",
        table_html(comparison.architectures),
    ])


def _link_cell(href: str) -> str:
    """A link to the row's profile page ('' for none). ``href`` is a relative address, quoted."""
    return f'<td><a href="{html.escape(href)}">profile</a></td>' if href else "<td></td>"


def _id(anchor: str) -> str:
    return f' id="{html.escape(anchor)}"' if anchor else ""


def message_html(text: str, kind: str = "empty") -> str:
    return f'<p class="{kind}">{html.escape(text)}</p>'


def page_html(title: str, summary: SummaryInfo, sections: Sequence[Section],
              failures: tuple[str, int] | None = None) -> str:
    """The whole document: title, the campaign's description, header (``failures``: see
    :func:`header_html`), then each section in order."""
    top = [f'<p class="meta">campaign <strong>{html.escape(summary.campaign)}</strong></p>',
           header_html(summary, failures)]
    if summary.description:
        top.insert(0, f'<p class="description">{html.escape(summary.description)}</p>')
    return document_html(
        title, dashboard_meta_html(summary.campaign, summary.trials, summary.devices,
                                   summary.description), _STYLE, top, sections)


def document_html(title: str, meta: str, style: str, top: Sequence[str],
                  sections: Sequence[Section]) -> str:
    """A dse page: its ``<meta>`` tags and style in the head, the title, ``top`` (HTML), then
    each section in order."""
    parts = [f"<section{_id(s.anchor)}>\n<h2>{html.escape(s.heading)}</h2>\n{s.body}\n</section>"
             for s in sections]
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en">',
        '<head>\n<meta charset="utf-8">',
        meta,
        f"<title>{html.escape(title)}</title>",
        f"<style>{style}</style>\n</head>",
        "<body>",
        f"<h1>{html.escape(title)}</h1>",
        *top,
        *parts,
        "</body>\n</html>\n",
    ])
