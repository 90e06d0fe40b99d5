"""`dse list metrics|backends|probes|samplers`: what the registries hold, as a Markdown table;
with ``--write FILE``, the table between that kind's markers in FILE replaced by it (how the
tables in ``docs/`` are kept equal to the registries)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from dse.cli.common import fail
from dse.core import DseError
from dse.util import atomic_write_text


def begin_marker(kind: str) -> str:
    """The comment line a generated table of ``kind`` follows in a Markdown file."""
    return f"<!-- dse list {kind} -->"


def end_marker(kind: str) -> str:
    """The comment line that ends a generated table of ``kind``."""
    return f"<!-- end dse list {kind} -->"


def marked_blocks(text: str, kind: str) -> list[str]:
    """What stands between each pair of ``kind``'s markers in ``text``, in order."""
    return re.findall(re.escape(begin_marker(kind)) + r"\n(.*?)" + re.escape(end_marker(kind)),
                      text, flags=re.DOTALL)


def with_table(text: str, kind: str, table: str) -> str:
    """``text`` with every block between ``kind``'s markers replaced by ``table``."""
    pattern = re.escape(begin_marker(kind)) + r"\n.*?" + re.escape(end_marker(kind))
    return re.sub(pattern, lambda _: f"{begin_marker(kind)}\n{table}{end_marker(kind)}", text,
                  flags=re.DOTALL)


def list_cmd(kind: Annotated[str, typer.Argument(
                 help="What to list: metrics, backends, probes or samplers.")],
             write: Annotated[Path | None, typer.Option(
                 help="A Markdown file whose table between `<!-- dse list KIND -->` and "
                      "`<!-- end dse list KIND -->` is replaced, instead of printing.")] = None,
             ) -> None:
    """List the metrics, backends, probes or samplers dse knows, as a Markdown table.

    The parts of plugins named in $DSE_PLUGINS are listed too."""
    from dse.app import markdown_table

    try:
        table = markdown_table(kind)
        if write is None:
            print(table, end="")
            return
        _write(write, kind, table)
    except DseError as exc:
        raise fail(exc) from None


def _write(path: Path, kind: str, table: str) -> None:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DseError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    if not marked_blocks(text, kind):
        raise DseError(f"{path}: no table of {kind} to replace: it needs a line "
                       f"{begin_marker(kind)} and, below it, {end_marker(kind)}")
    updated = with_table(text, kind, table)
    if updated != text:
        atomic_write_text(path, updated)
    print(f"{path}: the table of {kind} {'refreshed' if updated != text else 'is current'}")
