"""A campaign whose run folder cannot grow: `dse run` stops with one line naming the folder and
why ("file too large", "no space left on device"), no traceback; the study written before stays
readable with its completed trials intact, the results files stay whole, and once there is room
the same command resumes.

The driver is a real `dse run` in a child process, on a replay device (no Ray: the limit must
not reach Ray's own files). Two ways to stop the folder growing:
- a file size limit (RLIMIT_FSIZE, with SIGXFSZ ignored, writes past it fail with EFBIG) that
  lets the study grow a little, then no more; works for any user;
- a real full file system: a small tmpfs mounted on the run folder (ENOSPC); needs root, skipped
  where mounting is not permitted.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from optuna.trial import TrialState

from dse.results import load_campaign
from tests.conftest import REPO
from tests.replay_campaign import replay_campaign

NAME = "full"
FIRST_BUDGET = 20
ENV = dict(os.environ, PYTHONUNBUFFERED="1", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
           RAY_USAGE_STATS_ENABLED="0")


def _campaign(root: Path, budget: int) -> Path:
    return replay_campaign(root, NAME, budget)


# Sets the file size limit, ignores SIGXFSZ (else the kernel kills the process at the limit) and
# execs dse: both survive exec. A wrapper, not preexec_fn: the test process may have threads
# (the session's Ray client), and a fork of a threaded process can deadlock before exec.
LIMITED = """\
import os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
os.execv(sys.executable, [sys.executable, "-m", "dse.cli", *sys.argv[2:]])
"""


def _dse(*args: str, size_limit: int | None = None) -> subprocess.CompletedProcess[str]:
    start = ["-m", "dse.cli"] if size_limit is None else ["-c", LIMITED, str(size_limit)]
    return subprocess.run([sys.executable, *start, *args], capture_output=True, text=True,
                          env=ENV, cwd=REPO, timeout=300)


def _complete(run_dir: Path) -> dict[int, tuple[object, object]]:
    """COMPLETE trials that measured (number -> values, candidate id; a reuse of an earlier
    result is not one: the budget counts distinct candidates), read through dse's read-only
    reader."""
    [study] = load_campaign(run_dir)
    return {t.number: (t.values, t.user_attrs["candidate_id"]) for t in study.trials
            if t.state == TrialState.COMPLETE and "reused_from" not in t.user_attrs}


def _check_refused(result: subprocess.CompletedProcess[str], run_dir: Path, why: str) -> None:
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{run_dir}: cannot write the campaign's files: {why}"), lines[0]
    assert lines[0].endswith("The study keeps every trial completed before; free space (or raise "
                             "the limit) and run again to resume"), lines[0]


def _check_intact(run_dir: Path, before: dict[int, tuple[object, object]]) -> None:
    """The study passes SQLite's integrity check and holds every trial complete before as it
    was; the results files read back whole and no temporary file of theirs is left."""
    with sqlite3.connect(f"file:{run_dir / 'study.db'}?mode=ro", uri=True) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    now = _complete(run_dir)
    assert {n: now.get(n) for n in before} == before
    assert len(pd.read_parquet(run_dir / "trials.parquet")) >= len(before)
    assert not pd.read_csv(run_dir / "pareto.csv").empty
    dashboards = run_dir.parents[2] / "dashboards"
    leftovers = [p.name for p in (*run_dir.iterdir(), *dashboards.glob("*")) if p.suffix == ".tmp"]
    assert leftovers == []


def _resume(experiment: Path, run_dir: Path, before: dict[int, tuple[object, object]],
            budget: int) -> None:
    """With room again the same command resumes: the budget met, nothing lost or left RUNNING."""
    _campaign(experiment.parents[1], budget)
    resumed = _dse("run", str(experiment), "--no-report")
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr
    now = _complete(run_dir)
    assert len(now) == budget and {n: now[n] for n in before} == before
    [study] = load_campaign(run_dir)
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]


def test_a_file_size_limit_stops_the_run_with_one_line_and_leaves_the_study_whole(
        tmp_path: Path) -> None:
    experiment = _campaign(tmp_path, FIRST_BUDGET)
    run_dir = tmp_path / "experiments" / "runs" / NAME
    first = _dse("run", str(experiment))
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr
    before = _complete(run_dir)
    assert len(before) == FIRST_BUDGET

    # Room for a few more pages of the study, not for a campaign of 400 trials.
    _campaign(tmp_path, 400)
    limit = (run_dir / "study.db").stat().st_size + 48 * 1024
    stopped = _dse("run", str(experiment), size_limit=limit)
    _check_refused(stopped, run_dir, f"file too large (files may not grow past {limit:,} bytes")
    assert (run_dir / "study.db").stat().st_size <= limit
    _check_intact(run_dir, before)
    grown = _complete(run_dir)
    assert len(grown) > len(before)  # it measured until the limit, and kept those trials too

    # `dse report` under a limit smaller than trials.parquet: the old files stay, byte for byte.
    files = {name: (run_dir / name).read_bytes() for name in ("trials.parquet", "pareto.csv")}
    tables = _dse("report", str(experiment), size_limit=len(files["trials.parquet"]) // 2)
    assert tables.returncode == 2 and "Traceback" not in tables.stderr, tables.stderr
    assert tables.stderr.strip().startswith(f"{run_dir}: cannot write the campaign's files: "
                                            "file too large"), tables.stderr
    assert {name: (run_dir / name).read_bytes() for name in files} == files
    _check_intact(run_dir, grown)

    _resume(experiment, run_dir, grown, len(grown) + 5)


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted on the campaign's run folder; skips where mounting is refused."""
    run_dir = tmp_path / "experiments" / "runs" / NAME
    run_dir.mkdir(parents=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8); the file-size-limit test covers "
                    "a full run folder without them")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(run_dir)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield run_dir
    finally:
        subprocess.run(["umount", "-l", str(run_dir)], check=False)


def test_a_full_file_system_stops_the_run_with_one_line_and_leaves_the_study_whole(
        tmp_path: Path, small_tmpfs: Path) -> None:
    run_dir = small_tmpfs
    experiment = _campaign(tmp_path, FIRST_BUDGET)
    first = _dse("run", str(experiment))
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr
    before = _complete(run_dir)

    # Fill the file system but for a few pages (tmpfs counts whole 4 KiB pages).
    _campaign(tmp_path, 400)
    free = shutil.disk_usage(run_dir).free
    filler = run_dir / "filler"
    with filler.open("wb") as out:
        out.write(b"\0" * max(0, free - 32 * 1024))
    stopped = _dse("run", str(experiment))
    _check_refused(stopped, run_dir, "no space left on device")
    _check_intact(run_dir, before)
    grown = _complete(run_dir)

    filler.unlink()
    _resume(experiment, run_dir, grown, len(grown) + 5)


def test_a_folder_full_before_the_first_trial_is_one_line_too(tmp_path: Path) -> None:
    """The study cannot even be created (its first pages exceed the limit): the same one line,
    from opening the study rather than from the search loop."""
    experiment = _campaign(tmp_path, FIRST_BUDGET)
    done = _dse("run", str(experiment), size_limit=16 * 1024)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"{tmp_path / 'experiments' / 'runs' / NAME}: cannot write the "
                               f"campaign's files: file too large"), lines[0]


def test_a_full_dashboards_folder_is_named_not_the_run_folder(tmp_path: Path) -> None:
    experiment = _campaign(tmp_path, 4)
    assert _dse("run", str(experiment)).returncode == 0
    dashboards = tmp_path / "dashboards"
    # 1 MB: the results files fit, the dashboard (plotly inlined, megabytes) does not.
    result = _dse("report", str(experiment), size_limit=1 << 20)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{dashboards}: cannot write the campaign's files: file too large")
