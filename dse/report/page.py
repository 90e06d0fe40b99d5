"""The dashboard page: one HTML document, all styles inline, nothing fetched from elsewhere."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import NamedTuple

from dse.report.summary import SummaryInfo, TableInfo

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem 2rem; color: #222; }
h1 { margin-bottom: 0.2rem; }
section { margin-top: 2rem; }
.meta { color: #555; margin: 0.2rem 0; }
.note, .empty { color: #666; font-style: italic; }
table { border-collapse: collapse; font-size: 0.9rem; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25rem 0.6rem; text-align: right; }
th { background: #f4f4f4; position: sticky; top: 0; }
"""


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
    return "\n".join(f'<p class="meta">{line}</p>' for line in lines)


def table_html(table: TableInfo) -> str:
    """A plain HTML table of text cells, every cell escaped."""
    if table.empty_reason is not None:
        return message_html(table.empty_reason)
    head = "".join(f"<th>{html.escape(column)}</th>" for column in table.columns)
    body = "\n".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
                     for row in table.rows)
    return (f'<table class="front">\n<thead><tr>{head}</tr></thead>\n'
            f"<tbody>\n{body}\n</tbody>\n</table>")


def message_html(text: str, kind: str = "empty") -> str:
    return f'<p class="{kind}">{html.escape(text)}</p>'


def page_html(title: str, summary: SummaryInfo, sections: Sequence[Section]) -> str:
    """The whole document: title, header, then each section in order."""
    parts = [f"<section>\n<h2>{html.escape(s.heading)}</h2>\n{s.body}\n</section>"
             for s in sections]
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en">',
        '<head>\n<meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{_STYLE}</style>\n</head>",
        "<body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="meta">campaign <strong>{html.escape(summary.campaign)}</strong></p>',
        header_html(summary),
        *parts,
        "</body>\n</html>\n",
    ])
