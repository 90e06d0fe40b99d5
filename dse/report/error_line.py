"""An exception as one short line for a log that a page reloading every few seconds would
otherwise fill: the dashboard server's rebuild failures and unanswered requests."""

from __future__ import annotations


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``, cut short: SQLAlchemy adds the statement and a URL
    on further lines, and an unknown metric lists every known one."""
    lines = str(exc).splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= 200 else text[:199] + "…"
