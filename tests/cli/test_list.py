"""`dse list metrics|backends|probes|samplers` as a user runs it: the registries as Markdown
tables, a plugin's parts among them, ``--write`` refreshing a document's table, and one line
(exit code 2) for what it cannot do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dse.app.catalog import KINDS, markdown_table
from dse.cli import app
from dse.cli.list_command import begin_marker, end_marker
from dse.core.metrics import METRICS
from tests.conftest import REPO


def _dse(*args: str, plugins: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real command line in a fresh interpreter: no part a test registered in this one."""
    env = {key: value for key, value in os.environ.items() if key != "DSE_PLUGINS"}
    env["PYTHONPATH"] = str(REPO)
    if plugins is not None:
        env["DSE_PLUGINS"] = plugins
    return subprocess.run([sys.executable, "-m", "dse.cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=REPO, env=env)


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_is_the_catalogs_table(kind: str) -> None:
    result = CliRunner().invoke(app, ["list", kind])
    assert result.exit_code == 0, result.output
    assert result.output == markdown_table(kind)
    header, rule, *rows = result.output.splitlines()
    assert header.startswith(f"| {kind.rstrip('s')} |") and set(rule) == {"|", "-"}
    assert rows and all(row.startswith("| `") for row in rows)


def test_metrics_lists_every_metric_with_its_unit_and_direction() -> None:
    output = CliRunner().invoke(app, ["list", "metrics"]).output
    for spec in METRICS.values():
        assert f"| `{spec.name}` | {spec.unit} | {spec.direction.value} |" in output


def test_backends_say_which_precisions_run_on_which_device_kind() -> None:
    output = CliRunner().invoke(app, ["list", "backends"]).output
    assert output.splitlines()[0].startswith(
        "| backend | cpu | cuda | jetson | language models | knobs |")
    assert "| `onnxruntime` | fp32, int8 | — | — | — |" in output
    assert "| `torch` | fp32, fp16, bf16 | fp32, fp16, bf16 | fp32, fp16, bf16 | fp32, fp16, bf16 |" \
        in output
    assert "| `tensorrt` | — | fp32, fp16, bf16, int8, fp8 | fp32, fp16, bf16, int8 |" in output


def test_a_plugins_parts_are_listed() -> None:
    done = _dse("list", "backends", plugins="tests.test_toy_parts:register")
    assert done.returncode == 0, done.stderr
    assert "| `toy_torch` | fp32 | — | — |" in done.stdout


@pytest.mark.parametrize(("kind", "says"), [
    ("metric", "unknown kind 'metric'; did you mean 'metrics'?"),
    ("zzz", "unknown kind 'zzz'; allowed: metrics, backends, probes, samplers"),
])
def test_an_unknown_kind_is_one_line(kind: str, says: str) -> None:
    done = _dse("list", kind)
    assert done.returncode == 2
    assert (done.stdout, done.stderr) == ("", says + "\n")


def test_write_refreshes_the_table_between_the_markers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    text = (f"# Samplers\n\nBefore.\n\n{begin_marker('samplers')}\n| stale |\n"
            f"{end_marker('samplers')}\n\nAfter.\n")
    page.write_text(text)
    result = CliRunner().invoke(app, ["list", "samplers", "--write", str(page)])
    assert result.exit_code == 0, result.output
    assert result.output == f"{page}: the table of samplers refreshed\n"
    assert page.read_text() == text.replace("| stale |\n", markdown_table("samplers"))
    again = CliRunner().invoke(app, ["list", "samplers", "--write", str(page)])
    assert again.output == f"{page}: the table of samplers is current\n"


def test_write_to_a_file_without_the_markers_or_no_file_is_one_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# nothing marked\n")
    result = CliRunner().invoke(app, ["list", "probes", "--write", str(page)])
    assert result.exit_code == 2
    assert result.output == (f"{page}: no table of probes to replace: it needs a line "
                             "<!-- dse list probes --> and, below it, <!-- end dse list probes -->\n")
    assert page.read_text() == "# nothing marked\n"
    result = CliRunner().invoke(app, ["list", "probes", "--write", str(tmp_path / "none.md")])
    assert result.exit_code == 2
    assert result.output.startswith(f"{tmp_path / 'none.md'}: cannot read it: ")
    assert len(result.output.splitlines()) == 1
