"""The tables of metrics, backends, probes and samplers in the documentation are the registries'
own (`dse list KIND`), never hand copies that drift: each table between a kind's markers is
exactly what the command prints, and every kind has a table somewhere in docs/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dse.app.catalog import KINDS
from dse.cli.list_command import begin_marker, marked_blocks
from tests.conftest import REPO

PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])


@pytest.fixture(scope="module")
def tables() -> dict[str, str]:
    """Every kind's table from a fresh interpreter without $DSE_PLUGINS: dse's own parts, none
    that a test registered in this process."""
    env = {key: value for key, value in os.environ.items() if key != "DSE_PLUGINS"}
    code = ("import json; from dse.app.catalog import KINDS, markdown_table; "
            "print(json.dumps({kind: markdown_table(kind) for kind in KINDS}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found: dict[str, str] = json.loads(done.stdout)
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
@pytest.mark.parametrize("kind", KINDS)
def test_each_marked_table_is_what_dse_list_prints(page: Path, kind: str,
                                                   tables: dict[str, str]) -> None:
    text = page.read_text(encoding="utf-8")
    blocks = marked_blocks(text, kind)
    where = page.relative_to(REPO)
    assert len(blocks) == text.count(begin_marker(kind)), (
        f"{where}: a {begin_marker(kind)} line without its end marker below it")
    for block in blocks:
        assert block == tables[kind], (
            f"{where}: the table of {kind} is not what the registries hold; refresh it: "
            f".venv/bin/dse list {kind} --write {where}")


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_has_a_table_in_the_docs(kind: str) -> None:
    assert any(begin_marker(kind) in page.read_text(encoding="utf-8") for page in PAGES), (
        f"no page of docs/ holds the table of {kind} ({begin_marker(kind)})")
