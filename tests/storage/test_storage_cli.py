"""The storage choice as a user meets it through the `dse` command: a campaign on a real PostgreSQL
server run and reported from the CLI, and each storage fault in one line (exit 2, no traceback)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dse.storage import JOURNAL_FILE, STUDY_FILE
from tests.replay_campaign import replay_campaign

REPO = Path(__file__).resolve().parents[2]


def _dse(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dse.cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=REPO, env=dict(os.environ, **(env or {})))


def _one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_a_campaign_on_postgresql_runs_resumes_and_reports_from_the_cli(
        tmp_path: Path, postgres_url: str) -> None:
    env = {"DSE_CAMPAIGN_DB": postgres_url}
    experiment = replay_campaign(tmp_path, "pg", 6, "storage: env:DSE_CAMPAIGN_DB\n")
    done = _dse("run", str(experiment), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("\n#") + done.stdout.startswith("#") >= 6, done.stdout
    run_dir = tmp_path / "experiments" / "runs" / "pg"
    assert not (run_dir / STUDY_FILE).exists() and not (run_dir / JOURNAL_FILE).exists()

    # Resumed with a larger budget: only the new trials run.
    replay_campaign(tmp_path, "pg", 9, "storage: env:DSE_CAMPAIGN_DB\n")
    done = _dse("run", str(experiment), env=env)
    assert done.returncode == 0, done.stdout + done.stderr

    done = _dse("report", str(experiment), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    import pandas as pd

    trials = pd.read_parquet(run_dir / "trials.parquet")
    assert len(trials) == 9 and trials["trial"].is_unique


def test_a_server_that_does_not_answer_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql://dse:secret@127.0.0.1:{port}/campaigns"
    experiment = replay_campaign(tmp_path, "away", 3, "storage: env:DSE_CAMPAIGN_DB\n")
    line = _one_line_error(_dse("run", str(experiment), env={"DSE_CAMPAIGN_DB": url}))
    assert line.startswith(f"storage postgresql+psycopg://dse:***@127.0.0.1:{port}/"
                           f"campaigns: "), line
    assert "secret" not in line and "check that the server runs" in line


@pytest.mark.parametrize(("storage", "env", "expected"), [
    ("postgresql://ann:pw@db/c", {}, "storage: a password written in the experiment is readable "
                                     "by anyone who reads the file"),
    ("mysql://ann@db/c", {}, "storage: 'mysql://ann@db/c' is none of the forms allowed; allowed: "
                             "sqlite (default), journal, postgresql://"),
    ("env:DSE_NOT_SET_ANYWHERE", {}, "storage: the environment variable DSE_NOT_SET_ANYWHERE is "
                                     "not set"),
    ("env:DSE_CAMPAIGN_DB", {"DSE_CAMPAIGN_DB": "sqlite:///x.db"},
     "storage: the environment variable DSE_CAMPAIGN_DB: 'sqlite:///x.db' is none of the forms"),
])
def test_a_storage_setting_that_cannot_work_is_refused_at_validate(
        tmp_path: Path, storage: str, env: dict[str, str], expected: str) -> None:
    experiment = replay_campaign(tmp_path, "bad", 3, f"storage: '{storage}'\n")
    line = _one_line_error(_dse("validate", str(experiment), env=env))
    assert f"{experiment}: {expected}" in line, line
    assert "pw" not in line.replace("password", "")


def test_a_damaged_journal_is_one_line_and_keeps_what_it_holds(tmp_path: Path) -> None:
    experiment = replay_campaign(tmp_path, "j", 4, "storage: journal\n")
    assert _dse("run", str(experiment)).returncode == 0
    journal = tmp_path / "experiments" / "runs" / "j" / JOURNAL_FILE
    lines = journal.read_bytes().splitlines(keepends=True)
    # A line torn in the middle of the log (a torn last line is a write cut short, which Optuna
    # skips): what follows it cannot be trusted.
    lines[len(lines) // 2] = lines[len(lines) // 2][:20] + b"\n"
    kept = b"".join(lines[:len(lines) // 2])
    journal.write_bytes(b"".join(lines))
    line = _one_line_error(_dse("report", str(experiment)))
    assert line.startswith(f"{journal}: the study journal is damaged ("), line
    assert line.endswith("restore it from a backup"), line
    assert journal.read_bytes().startswith(kept)
