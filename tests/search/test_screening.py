"""Multi-fidelity measurement: the screening verdict, its safety, and a real campaign on the CPU.

The campaign (real Ray worker, real training, ONNX Runtime timing) measures the baseline in full,
then a clearly dominated candidate (the same model at batch 16: as big, slower per call) that is
screened out, then a competitive one (int8: smaller) that goes on to the full protocol.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest
import yaml

from dse.app.api import load_experiment, run_campaign
from dse.results import screening_summary
from dse.search.baseline_plan import plan_baseline
from dse.search.pareto import CI_COLUMNS, noise_aware_mask, pareto_front, pareto_mask
from dse.search.screening import CI_QUANTILES, FrontTracker, screening_request
from dse.search.study import open_experiment_studies
from dse.spec import MeasureSpec
from dse.spec.models import BaselineSpec, ConstraintSpec, ScreeningSpec
from dse.trial.screening import FrontPoint, Screening, screening_measure, screening_verdict
from tests.conftest import TINY_SPACE, tiny_experiment_text

OBJECTIVES = ("accuracy", "latency_p99_ms", "process_rss_peak_mb")
P99 = CI_COLUMNS["latency_p99_ms"]


def _screening(front: list[tuple[float, ...]], margin: float = 0.05) -> Screening:
    return Screening(OBJECTIVES, (True, False, False), (None, (*P99, 0.99), None),
                     tuple(FrontPoint(i, point) for i, point in enumerate(front)), 0.05, 0.5,
                     margin)


def _metrics(accuracy: float, p99: float, low: float, high: float,
             memory: float) -> dict[str, float]:
    return {"accuracy": accuracy, "latency_p99_ms": p99, P99[0]: low, P99[1]: high,
            "process_rss_peak_mb": memory}


def test_the_verdict_compares_the_optimistic_vector_with_the_front() -> None:
    screening = _screening([(0.9, 1.0, 100.0)])
    exact = {"accuracy"}
    # Worse everywhere even at best: the CI's low end 1.05 > 1.0, memory 110 less 5% > 100.
    out, why = screening_verdict(_metrics(0.85, 1.2, 1.05, 1.3, 110.0), exact, screening)
    assert not out and why.startswith("dominated by front trial #0 even at best (accuracy 0.85, "
                                      "latency_p99_ms 1.05, process_rss_peak_mb 104.5)")
    # The interval reaches below the front's latency: it could still enter.
    assert screening_verdict(_metrics(0.85, 1.2, 0.98, 1.3, 110.0), exact, screening) == (
        True, "could enter the front")
    # Memory has no interval: 104 made 5% better is 98.8, under the front's 100.
    assert screening_verdict(_metrics(0.85, 1.2, 1.05, 1.3, 104.0), exact, screening)[0]
    assert not screening_verdict(_metrics(0.85, 1.2, 1.05, 1.3, 104.0), exact,
                                 _screening([(0.9, 1.0, 100.0)], margin=0.0))[0]
    # Accuracy is exact: a hair better keeps the candidate in.
    assert screening_verdict(_metrics(0.91, 1.2, 1.05, 1.3, 110.0), exact, screening)[0]
    # Too few samples for the p99 interval: nothing shows it cannot enter.
    unbounded = {"accuracy": 0.5, "latency_p99_ms": 9.0, "process_rss_peak_mb": 500.0}
    assert screening_verdict(unbounded, exact, screening) == (
        True, "the screening gave latency_p99_ms no confidence interval")
    assert screening_verdict({}, exact, screening) == (
        True, "accuracy not measured by the screening")
    assert screening_verdict(unbounded, exact, _screening([]))[0]


def test_a_screened_out_point_is_never_on_the_noise_aware_or_strict_front() -> None:
    """Random fronts and candidates: whatever the verdict screens out, the reported fronts over
    the recorded values (the screening's, with its interval) leave out."""
    rng = np.random.default_rng(7)
    tracker = FrontTracker(OBJECTIVES, [ConstraintSpec.model_validate("process_rss_peak_mb <= 180")])
    full = []
    for trial in range(30):
        p99 = float(rng.uniform(1.0, 3.0))
        width = float(rng.uniform(0.01, 0.3))
        row = _metrics(float(rng.uniform(0.7, 0.95)), p99, p99 - width, p99 + width,
                       float(rng.uniform(50, 200)))
        if tracker.add(trial, row):
            full.append(row)
    assert 0 < len(tracker.front()) <= len(full) < 30  # some were infeasible (memory > 180)
    screening = screening_request(ScreeningSpec(enabled=True), tracker)
    screened = 0
    for _ in range(400):
        p99 = float(rng.uniform(1.0, 4.0))
        width = float(rng.uniform(0.0, 0.5))
        row = _metrics(float(rng.uniform(0.6, 0.95)), p99, p99 - width, p99 + width * 2,
                       float(rng.uniform(50, 180)))
        enters, _ = screening_verdict(row, {"accuracy"}, screening)
        if enters:
            continue
        screened += 1
        rows = [*full, row]
        values = np.array([[r[n] for n in OBJECTIVES] for r in rows])
        lows = np.array([[math.nan, r[P99[0]], math.nan] for r in rows])
        highs = np.array([[math.nan, r[P99[1]], math.nan] for r in rows])
        assert not noise_aware_mask(values, lows, highs, list(OBJECTIVES))[-1]
        assert not pareto_mask(values, list(OBJECTIVES))[-1]
    assert screened > 50


def test_the_screening_protocol_is_short_but_bounds_every_objective() -> None:
    spec = screening_request(ScreeningSpec(enabled=True, max_seconds=0.3),
                             FrontTracker(["accuracy", "latency_p99_ms"], []))
    assert spec.ci == (None, (*P99, CI_QUANTILES["latency_p99_ms"]))
    # Every latency objective with an interval; a language model's trials are never screened
    # (the worker times their requests in full), so TTFT and TPOT need no screening quantile.
    assert set(CI_QUANTILES) == {name for name in CI_COLUMNS if name.startswith("latency_")}
    full = MeasureSpec(target_rel_ci=0.01, max_seconds=5.0, offline_concurrency=4,
                       sustained_seconds=10.0)
    short = screening_measure(full, spec)
    assert (short.target_rel_ci, short.max_seconds, short.min_seconds) == (0.05, 0.3, 0.0)
    assert short.min_iters == 2 * 368  # a p99 interval needs 368 independent samples
    assert (short.offline_concurrency, short.sustained_seconds) == (0, 0.0)
    # Never longer or tighter than the campaign's own protocol.
    loose = screening_measure(MeasureSpec(target_rel_ci=0.1, max_seconds=0.1, min_seconds=0.0),
                              spec)
    assert (loose.target_rel_ci, loose.max_seconds) == (0.1, 0.1)


def test_the_campaign_figures_estimate_savings_per_device() -> None:
    trials = pd.DataFrame({
        "device": ["a", "a", "a", "a", "b", "b", "b"],
        "fidelity": ["full", "full", "screen", "screen", "full", "screen", None],
        "reused_from": pd.array([None, None, None, 2, None, None, None], dtype="Int64"),
        "screen_seconds": [0.0, 0.1, 0.1, 0.1, 0.2, 0.2, None],
        "full_seconds": [1.0, 3.0, 0.0, 0.0, 10.0, 0.0, None],
    })
    summary = screening_summary(trials)
    assert summary is not None
    assert (summary.screened_out, summary.fully_measured) == (2, 3)
    assert summary.screen_device_seconds == pytest.approx(0.6)
    assert summary.full_device_seconds == pytest.approx(14.0)
    assert summary.median_full_seconds == pytest.approx(3.0)
    # a: 1 screened out x median 2.0; b: 1 x 10.0 (the repeat of trial 2 measured nothing).
    assert summary.device_seconds_saved_est == pytest.approx(12.0)
    assert "estimate" in str(summary.as_dict()["device_seconds_saved_est_is"])
    assert screening_summary(trials.drop(columns=["fidelity"])) is None


SCREEN_SPACE = (TINY_SPACE.replace("    torch:\n      knobs:\n        num_threads: [1]\n", "")
                .replace("  - metric: accuracy\n  - metric: latency_p99_ms\n",
                         "  - metric: latency_p50_ms\n  - metric: model_size_mb\n")
                .replace("epochs: 2", "epochs: 1").replace("batch_sizes: [1, 4]",
                                                           "batch_sizes: [1, 16]"))
BASELINE = """\
baseline:
  arch: {num_stages: 1, depth: 1, width_mult: 0.5, kernel_size: 3, expand_ratio: 2}
  backend: onnxruntime
  precision: fp32
  batch_size: 1
  knobs: {intra_op_threads: 1}
"""


@pytest.mark.usefixtures("ray_cluster")
def test_a_dominated_candidate_is_screened_out_and_a_competitive_one_measured_in_full(
        tiny_campaign: Path) -> None:
    (tiny_campaign.parent.parent / "search_spaces" / "tiny.yaml").write_text(SCREEN_SPACE)
    text = tiny_experiment_text(3, name="screened")
    quick = text[text.index("measurement:"):]
    assert quick.startswith("measurement: {") and quick.endswith("}\n")
    tiny_campaign.write_text(
        # One block: this is about the screening's verdict, which three blocks' t-intervals
        # (wide on a loaded machine) would make depend on how busy the machine is.
        text.replace(quick, "measurement: {warmup_max_seconds: 0.1, min_iters: 5, "
                            "min_seconds: 0.4, max_seconds: 0.6, target_rel_ci: 0.002, "
                            "blocks: 1, non_ok_on_front: true, second_looks: 0}\n")
        + "search: {screening: {enabled: true, max_seconds: 0.15}}\n" + BASELINE)
    experiment = load_experiment(tiny_campaign)
    # After the baseline: the same model at batch 16 (as big, slower per call), then int8
    # (smaller).
    study = open_experiment_studies(experiment)["local-cpu"]
    base = yaml.safe_load(BASELINE)["baseline"]
    for change in ({"batch_size": 16}, {"precision": "int8"}):
        point = BaselineSpec.model_validate(base | change)
        plan = plan_baseline(point, experiment.space, experiment.devices[0])
        assert plan.params is not None
        study.enqueue_trial(plan.params)

    result = run_campaign(experiment)

    trials = sorted(optuna.load_study(study_name="screened", storage=f"sqlite:///"
                                      f"{result.run_dir / 'study.db'}").trials,
                    key=lambda t: t.number)
    assert [t.user_attrs["status"] for t in trials] == ["ok"] * 3
    baseline, dominated, competitive = (t.user_attrs for t in trials)
    assert baseline["fidelity"] == "full" and baseline["screen_seconds"] == 0.0  # nothing to beat
    assert dominated["candidate"]["batch_size"] == 16
    assert dominated["fidelity"] == "screen", dominated["provenance"].get("screen_verdict")
    assert dominated["provenance"]["screen_verdict"].startswith("dominated by front trial #0")
    assert dominated["full_seconds"] == 0.0 and dominated["screen_seconds"] > 0
    assert competitive["candidate"]["precision"] == "int8"
    assert competitive["fidelity"] == "full"
    assert competitive["provenance"]["screen_verdict"] == "could enter the front"
    assert competitive["screen_seconds"] > 0 and competitive["full_seconds"] > 0
    # The screening was the short protocol, the full one the campaign's.
    assert int(dominated["provenance"]["timed_iters"]) < int(
        competitive["provenance"]["timed_iters"])
    for attrs in (baseline, dominated, competitive):
        assert attrs["device_seconds"] >= attrs["screen_seconds"] + attrs["full_seconds"]

    # Never on a reported front, strict or noise-aware.
    table = result.trials
    assert table.set_index("trial")["fidelity"].tolist() == ["full", "screen", "full"]
    objectives = result.objectives
    for front in (result.pareto(), pareto_front(table, objectives),
                  pareto_front(table, objectives, noise_aware=True)):
        assert 1 not in front["trial"].tolist()
    assert 1 not in pd.read_csv(result.run_dir / "pareto.csv")["trial"].tolist()

    # The campaign's figures: in screening.json beside the other results.
    written = json.loads((result.run_dir / "screening.json").read_text())
    assert written["screened_out"] == 1 and written["fully_measured"] == 2
    median = float(np.median([baseline["full_seconds"], competitive["full_seconds"]]))
    assert written["device_seconds_saved_est"] == pytest.approx(median)
    # (Whether screening pays is a matter of seconds on a loaded machine, so docs/benchmarks.md's figure
    # comes from measured campaigns, not from this test: here only what is counted, and how.)
    assert written["screen_device_seconds"] > 0
    # ... in the API and the dashboard too.
    summary = result.screening()
    assert summary is not None and summary.screened_out == 1
    assert result.dashboard is not None
    page = result.dashboard.read_text()
    assert "Screening: device time spent and saved" in page
    assert "device seconds saved est" in page
