"""Campaigns written by an older dse (tests/fixtures/older_main: commit b2e9ba3, before the parts
registries and module splits) keep working: their studies read into the same tables, report,
resume, and their build cache is hit — nothing to retrain or rebuild."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dse.results.run_files import load_campaign
from dse.results.table import trials_frame
from tests.conftest import REPO

FIXTURE = REPO / "tests" / "fixtures" / "older_main"
COLUMNS = ["trial", "status", "reason", "device"]


@pytest.fixture()
def older(tmp_path: Path) -> Path:
    """A copy of the older campaigns (a run writes into its folder)."""
    shutil.copytree(FIXTURE, tmp_path / "older")
    return tmp_path / "older"


def _dse(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dse.cli", *args], capture_output=True,
                          text=True, timeout=600, cwd=REPO)


@pytest.mark.parametrize("campaign", ["older-replay", "older-cpu"])
def test_an_older_study_reads_into_the_table_it_wrote(older: Path, campaign: str) -> None:
    run = older / "experiments" / "runs" / campaign
    written = pd.read_parquet(run / "trials.parquet")
    (study,) = load_campaign(run)
    read = trials_frame(study)
    assert len(read) == len(written) and len(read) > 0
    assert read[COLUMNS].equals(written[COLUMNS])
    metric_columns = [c for c in written.columns if c.endswith("]")]
    assert metric_columns and set(metric_columns) <= set(read.columns)
    pd.testing.assert_frame_equal(read[metric_columns], written[metric_columns])


def test_an_older_campaign_reports(older: Path) -> None:
    done = _dse("report", str(older / "experiments" / "older-cpu.yaml"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    page = older / "dashboards" / "older-cpu.html"
    text = page.read_text()
    assert page.is_file() and "older-cpu" in text
    # Its front drawn from the old study: both objectives, with their units.
    assert "accuracy [fraction]" in text and "latency_p50_ms [ms]" in text


def test_an_older_campaign_resumes_where_it_stopped(older: Path) -> None:
    experiment = older / "experiments" / "older-replay.yaml"
    experiment.write_text(experiment.read_text().replace("trials: 12", "trials: 16"))
    before = pd.read_parquet(older / "experiments" / "runs" / "older-replay" / "trials.parquet")
    done = _dse("run", str(experiment))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    after = pd.read_parquet(older / "experiments" / "runs" / "older-replay" / "trials.parquet")
    # The budget counts distinct candidates measured to ok (today's rule, also on an older study).
    assert ((after["status"] == "ok") & after["reused_from"].isna()).sum() == 16
    kept = ["trial", "status", "zdt_f1 [1]", "zdt_f2 [1]"]
    pd.testing.assert_frame_equal(after[kept].iloc[:12], before[kept])


def test_an_older_build_cache_is_hit(older: Path) -> None:
    from dse.accuracy import train_or_load
    from dse.artifacts.artifact import fp32_onnx
    from dse.artifacts.cache import ArtifactCache
    from dse.spec import TrainingSpec

    cache = older / "experiments" / "runs" / "older-cpu" / "cache"
    arch = {"num_stages": 1, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2}
    trained = train_or_load("cnn", arch, TrainingSpec(epochs=1, batch_size=128),
                            cache / "trained")
    assert trained.cached and trained.train_seconds == 0.0
    artifacts = sorted((cache / "artifacts").iterdir())
    path, _ = fp32_onnx(trained, ArtifactCache(cache / "artifacts"))
    assert path in artifacts and sorted((cache / "artifacts").iterdir()) == artifacts
