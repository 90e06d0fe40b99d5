"""dse.results.run_files and files: parquet and CSV written atomically, the study opened read-only."""

from __future__ import annotations

from pathlib import Path

import optuna
import pandas as pd
import pytest

from dse.core.exceptions import DseError
from dse.results import atomic_write_text, front_frame, load_study, trials_frame, write_results
from dse.testing import EXAMPLE_FRONT, EXAMPLE_OBJECTIVES, campaign_study, example_run


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return example_run(tmp_path / "runs" / "example")


def test_parquet_round_trips_the_trials_table(run_dir: Path) -> None:
    study = load_study(run_dir)
    parquet, _ = write_results(study, run_dir, EXAMPLE_OBJECTIVES)
    assert parquet == run_dir / "trials.parquet"
    pd.testing.assert_frame_equal(pd.read_parquet(parquet), trials_frame(study))


def test_pareto_csv_holds_exactly_the_front(run_dir: Path) -> None:
    study = load_study(run_dir)
    _, csv = write_results(study, run_dir, EXAMPLE_OBJECTIVES)
    written = pd.read_csv(csv)
    assert sorted(written["trial"]) == sorted(EXAMPLE_FRONT)
    expected = front_frame(trials_frame(study), EXAMPLE_OBJECTIVES)
    assert written["trial"].tolist() == expected["trial"].tolist()
    assert "latency_p99_ms [ms]" in written.columns


def test_writes_replace_old_files_and_leave_no_temporaries(run_dir: Path) -> None:
    (run_dir / "pareto.csv").write_text("stale")
    write_results(load_study(run_dir), run_dir, EXAMPLE_OBJECTIVES)
    write_results(load_study(run_dir), run_dir, EXAMPLE_OBJECTIVES)
    assert sorted(p.name for p in run_dir.iterdir()) == ["pareto.csv", "study.db",
                                                         "trials.parquet"]
    assert (run_dir / "pareto.csv").read_text() != "stale"


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = atomic_write_text(tmp_path / "out.txt", "old")

    def explode(tmp: Path) -> None:
        tmp.write_text("half")
        raise RuntimeError("disk full")

    from dse.results import atomic_write

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(target, explode)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_load_study_finds_the_campaign_and_never_writes(run_dir: Path) -> None:
    study = load_study(run_dir)
    assert study.study_name == "example"
    assert len(study.trials) == 9
    with pytest.raises(optuna.exceptions.StorageInternalError):
        study.set_user_attr("touched", True)


def test_load_study_refuses_a_missing_database_without_creating_one(tmp_path: Path) -> None:
    with pytest.raises(DseError, match="no study database"):
        load_study(tmp_path)
    assert not (tmp_path / "study.db").exists()


def test_load_study_with_several_studies_takes_the_one_named_like_the_folder(
        run_dir: Path) -> None:
    storage = f"sqlite:///{run_dir / 'study.db'}"
    campaign_study("other", EXAMPLE_OBJECTIVES, storage=storage)
    assert load_study(run_dir).study_name == "example"
    renamed = run_dir.rename(run_dir.parent / "elsewhere")
    with pytest.raises(DseError, match="holds 2 studies"):
        load_study(renamed)
