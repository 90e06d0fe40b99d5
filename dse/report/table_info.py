"""A table of a page as plain data: headings, rows of text, and what each row carries beside its
cells (a profile link, a ``dse export`` command, its configuration as YAML, its provenance).
:func:`dse.report.page.table_html` draws it."""

from __future__ import annotations

from typing import NamedTuple


class TableInfo(NamedTuple):
    columns: list[str]
    rows: list[list[str]]
    empty_reason: str | None
    deploy_yaml: list[str] | None = None
    """Per row, its configuration as an experiment's ``baseline:`` block (YAML), or None."""
    note: str = ""
    """What the table leaves out."""
    links: list[str] | None = None
    """Per row, the relative address of its trial's profile page ('' for none), shown as a column
    of links (before the YAML one); None for a table without it."""
    commands: list[str] | None = None
    """Per row, the ``dse export`` command that makes its trial a deployable bundle ('' for
    none), shown before the YAML; None for a table without it."""
    shown: int | None = None
    """How many leading columns show at first; the others are folded behind a toggle ("show
    every column"). None: all show."""
    provenance: list[list[str]] | None = None
    """Per row, ``key: value`` lines of where and with what it was measured, folded in the row's
    last cell with the YAML; None for a table without it."""
    prose: tuple[int, ...] = ()
    """Columns of running text (a configuration in words, a reason): left-aligned, wrapped."""
