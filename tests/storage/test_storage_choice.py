"""A campaign on each storage an experiment can choose — SQLite in the run folder, Optuna's journal
file, a real PostgreSQL server — runs, resumes, warm-starts a device added later, reports, and
holds its lease there."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from dse.app.api import load_experiment, run_campaign, write_report
from dse.core.exceptions import DseError
from dse.results import load_campaign
from dse.search.lease import Lease
from dse.storage import JOURNAL_FILE, LEASE_FILE, POINTER_FILE, STUDY_FILE, CampaignStorage
from tests.search.test_warm_start import _experiment, lay_out_warm_campaigns


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return lay_out_warm_campaigns(tmp_path)


def _write(root: Path, text: str) -> Path:
    path = root / "experiments" / "s.yaml"
    path.write_text(text)
    return path


def test_a_campaign_runs_resumes_warm_starts_and_reports_on_each_storage(
        root: Path, storage_kind: str, storage_line: str) -> None:
    path = _write(root, _experiment("s", ["ace"], storage_line))
    first = run_campaign(load_experiment(path), report=False)
    assert len(first.trials) == 8

    # Rerun with a device added: the first device's study resumes (nothing re-run), the new
    # device's study starts from its front.
    path = _write(root, _experiment("s", ["ace", "bee"], storage_line))
    second = run_campaign(load_experiment(path))
    studies = {s.study_name: s for s in load_campaign(second.run_dir)}
    assert sorted(studies) == ["s", "s@bee"]
    assert len(studies["s"].trials) == 8
    seeded = [t for t in studies["s@bee"].trials if "warm_start_from" in t.user_attrs]
    assert len(seeded) == 2
    assert studies["s@bee"].user_attrs["warm_start"]["source"] == "s"
    # ace's 8 candidates and bee's whole space (4: onnxruntime only) measured once each; bee's
    # sampler then proposes only repeats (reused, no budget spent) until its search stops.
    measured = second.trials[second.trials["reused_from"].isna()]
    assert len(measured) == 12 and set(second.pareto()["device"]) == {"ace", "bee"}

    # Only the chosen storage's files are in the run folder, and the folder names it.
    files = {p.name for p in second.run_dir.iterdir()}
    expected = {"sqlite": {STUDY_FILE}, "journal": {JOURNAL_FILE, LEASE_FILE},
                "postgresql": set()}[storage_kind]
    assert files & {STUDY_FILE, JOURNAL_FILE, LEASE_FILE} == expected
    pointer = json.loads((second.run_dir / POINTER_FILE).read_text())
    assert pointer == {"storage": storage_line.split(": ", 1)[1].strip()}
    # A report given only the experiment reads the same trials.
    trials_file, _, dashboard = write_report(load_experiment(path))
    assert len(pd.read_parquet(trials_file)) == len(second.trials) and dashboard.is_file()


def test_a_second_driver_is_refused_by_the_lease_in_each_storage(
        root: Path, storage_kind: str, storage_line: str) -> None:
    path = _write(root, _experiment("s", ["ace"], storage_line))
    experiment = load_experiment(path)
    experiment.run_dir.mkdir(parents=True)
    storage = experiment.storage
    with Lease(storage.lease_url, "s", where="holder"), \
            pytest.raises(DseError, match=r"campaign 's' is being run by pid \d+ on "):
        run_campaign(experiment, report=False)
    # Nothing was written to the study by the refused driver.
    with pytest.raises(DseError, match="no study"):
        load_campaign(experiment.run_dir, storage)
    assert len(run_campaign(experiment, report=False).trials) == 8


def test_a_run_folder_refuses_another_kind_of_storage(root: Path) -> None:
    path = _write(root, _experiment("s", ["ace"], "storage: journal\n"))
    run_campaign(load_experiment(path), report=False)
    path = _write(root, _experiment("s", ["ace"]))
    with pytest.raises(DseError) as caught:
        run_campaign(load_experiment(path), report=False)
    assert str(caught.value).endswith(
        f"this campaign's study is in {JOURNAL_FILE}, the experiment now says storage: sqlite; "
        f"set storage back, or move the run folder away to start the campaign afresh in the "
        f"new storage")
    assert len(load_campaign(load_experiment(path).run_dir)[0].trials) == 8


def test_a_report_checks_a_sound_sqlite_study_without_reading_it_whole(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite's quick check reads the whole file: it runs only once a read has failed, not on
    every report (a served page is rebuilt every few seconds)."""
    import dse.storage.sqlite_file as sqlite_file

    checks: list[Path] = []
    real = sqlite_file._integrity_problem
    monkeypatch.setattr(sqlite_file, "_integrity_problem",
                        lambda study: checks.append(study) or real(study))
    path = _write(root, _experiment("s", ["ace"]))
    run_dir = run_campaign(load_experiment(path), report=False).run_dir
    checks.clear()
    assert len(load_campaign(run_dir)[0].trials) == 8
    assert checks == []

    study = run_dir / STUDY_FILE
    data = bytearray(study.read_bytes())
    data[len(data) // 2:len(data) // 2 + 4096] = b"\xff" * 4096  # a torn page mid-file
    study.write_bytes(bytes(data))
    with pytest.raises(DseError, match=r"study.db: the study database is damaged \(SQLite: "):
        load_campaign(run_dir)
    assert checks == [study]


def test_a_storage_is_named_without_its_password(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAM_DB", "postgresql://ann:s3cret@db.example:5433/campaigns")
    storage = CampaignStorage.from_setting("env:TEAM_DB", tmp_path, where="e.yaml: storage")
    assert storage.url == "postgresql+psycopg://ann:s3cret@db.example:5433/campaigns"
    assert storage.location == "postgresql+psycopg://ann:***@db.example:5433/campaigns"
    # The lease lives in the same database as the study (no second secret to hand out).
    assert storage.lease_url == storage.url
