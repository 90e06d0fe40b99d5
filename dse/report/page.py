"""The dashboard page: one HTML document, all styles inline, nothing fetched from elsewhere."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import NamedTuple

from dse.report.index import dashboard_meta_html
from dse.report.summary import DeviceComparisonInfo, SummaryInfo, TableInfo

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem 2rem; color: #222; }
h1 { margin-bottom: 0.2rem; }
section { margin-top: 2rem; }
.meta { color: #555; margin: 0.2rem 0; }
.note, .empty { color: #666; font-style: italic; }
.table { overflow: auto; max-height: 80vh; max-width: 100%; }
table { border-collapse: collapse; font-size: 0.9rem; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25rem 0.6rem; text-align: right; }
th { background: #f4f4f4; position: sticky; top: 0; cursor: pointer; user-select: none; }
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


def header_html(summary: SummaryInfo) -> str:
    """Campaign, trial counts by status, objectives and constraints, first and last times."""
    counts = ", ".join(f"{count} {kind}" for kind, count in summary.counts) or "none yet"
    lines = [
        f"<strong>{summary.trials}</strong> trials: {html.escape(counts)}",
        "objectives: " + html.escape("; ".join(summary.objectives) or "none"),
        "constraints: " + html.escape("; ".join(summary.constraints) or "none"),
    ]
    if summary.first_started is not None:
        last = summary.last_completed or "—"
        lines.append(html.escape(f"first trial started {summary.first_started}, "
                                 f"last finished {last}"))
    if summary.quality:
        lines.append("measurement: " + html.escape(summary.quality))
    return "\n".join(f'<p class="meta">{line}</p>' for line in lines)


def table_html(table: TableInfo) -> str:
    """An HTML table of text cells, every cell escaped, sorted by a click on a heading; with
    ``links``, a column links each row's profile page; with ``deploy_yaml``, a last column holds
    each row's configuration as YAML, folded."""
    if table.empty_reason is not None:
        return message_html(table.empty_reason)
    columns = [*table.columns, *(["profile"] if table.links is not None else []),
               *(["export"] if table.commands is not None else []),
               *(["deploy (YAML)"] if table.deploy_yaml is not None else [])]
    head = "".join(f"<th>{html.escape(column)}</th>" for column in columns)
    configs = table.deploy_yaml if table.deploy_yaml is not None else [None] * len(table.rows)
    links = table.links if table.links is not None else [None] * len(table.rows)
    commands = table.commands if table.commands is not None else [None] * len(table.rows)
    body = "\n".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row)
        + ("" if link is None else _link_cell(link))
        + ("" if command is None else _command_cell(command))
        + ("" if config is None else _yaml_cell(config)) + "</tr>"
        for row, link, command, config in zip(table.rows, links, commands, configs,
                                              strict=True))
    note = "" if not table.note else "\n" + message_html(table.note, kind="note")
    # The table scrolls in its own box, so a wide one (every metric) does not widen the page
    # and its head stays in view.
    return (f'<div class="table"><table class="front">\n'
            f'<thead onclick="{html.escape(_SORT_ON_CLICK)}">'
            f"<tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table></div>{note}")


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


def _command_cell(command: str) -> str:
    """The row's ``dse export`` command, folded like the YAML ('' for none)."""
    if not command:
        return "<td></td>"
    return (f'<td class="yaml"><details><summary>dse export</summary>'
            f"<pre>{html.escape(command)}</pre></details></td>")


def _yaml_cell(text: str) -> str:
    return (f'<td class="yaml"><details><summary>YAML</summary><pre>{html.escape(text)}</pre>'
            f"</details></td>")


def message_html(text: str, kind: str = "empty") -> str:
    return f'<p class="{kind}">{html.escape(text)}</p>'


def page_html(title: str, summary: SummaryInfo, sections: Sequence[Section]) -> str:
    """The whole document: title, header, then each section in order."""
    return document_html(
        title, dashboard_meta_html(summary.campaign, summary.trials, summary.devices), _STYLE,
        [f'<p class="meta">campaign <strong>{html.escape(summary.campaign)}</strong></p>',
         header_html(summary)], sections)


def document_html(title: str, meta: str, style: str, top: Sequence[str],
                  sections: Sequence[Section]) -> str:
    """A dse page: its ``<meta>`` tags and style in the head, the title, ``top`` (HTML), then
    each section in order."""
    parts = [f"<section>\n<h2>{html.escape(s.heading)}</h2>\n{s.body}\n</section>"
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
