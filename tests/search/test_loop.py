"""The search loop end to end through a real local Ray, real builds and real Optuna storage."""

from __future__ import annotations

from pathlib import Path

import optuna
import pandas as pd
import pytest

from dse.app.api import load_experiment, run_campaign
from dse.core.metrics import metric
from tests.conftest import tiny_experiment_text


@pytest.mark.usefixtures("ray_cluster")
def test_campaign_measures_reports_and_resumes(tiny_campaign: Path) -> None:
    outcomes = []
    result = run_campaign(tiny_campaign, on_trial=outcomes.append)

    trials = result.trials
    done = trials[trials["state"] == "COMPLETE"]
    # The budget counts distinct candidates measured; a repeat reuses an earlier result.
    assert done["reused_from"].isna().sum() == 4
    assert (done["status"] == "ok").all()
    for name in ["accuracy", "latency_p50_ms", "latency_p99_ms", "throughput_sps",
                 "process_rss_peak_mb", "model_size_mb", "params_m"]:
        column = metric(name).column
        assert (done[column] > 0).all(), column
    assert (done[metric("accuracy").column] <= 1).all()
    assert (result.run_dir / "trials.parquet").is_file()
    assert (result.run_dir / "pareto.csv").is_file()
    assert result.dashboard is not None and result.dashboard.is_file()
    front = result.pareto()
    assert 1 <= len(front) <= 4
    assert len(outcomes) >= 4

    # Each measured trial keeps its raw latency samples; a repeat reuses the earlier measurement.
    measured = done[done["reused_from"].isna()]
    for number in measured["trial"]:
        assert (result.run_dir / "samples" / f"trial-{number:05d}.npz").is_file()

    # Power and thermal metrics are measured where the host has the sensors, else missing with
    # the reason (this VM has no RAPL, thermal zones or cpufreq); never a made-up number.
    for name in ["energy_per_inference_mj", "power_mean_w", "temperature_peak_c",
                 "clock_drop_pct", "throttled_fraction"]:
        column = metric(name).column
        for _, row in done.iterrows():
            measured = column in done.columns and row[column] == row[column]
            assert measured or f"{name}: " in row["missing"], (name, row["missing"])
    assert done[metric("latency_p50_ci_low_ms").column].le(done[metric("latency_p50_ms").column]).all()

    # Provenance says where and when each measurement ran, and at normal priority.
    study = optuna.load_study(study_name="tiny-campaign",
                              storage=f"sqlite:///{result.run_dir / 'study.db'}")
    first = study.trials[0].user_attrs["provenance"]
    assert first["niceness"] == "0"
    assert float(first["window_start"]) < float(first["window_end"])
    assert first["device_profile"] == "local-cpu"
    assert first["kernel"] and first["version_onnxruntime"]
    assert first["target_met"] in ("True", "False")

    # Raising the budget resumes: the earlier trials are kept as they were, two new ones are added.
    tiny_campaign.write_text(tiny_experiment_text(6))
    before = {int(t): v for t, v in zip(done["trial"], done[metric("latency_p99_ms").column],
                                        strict=True)}
    again = run_campaign(load_experiment(tiny_campaign), report=False)
    study = optuna.load_study(study_name="tiny-campaign",
                              storage=f"sqlite:///{again.run_dir / 'study.db'}")
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert sum("reused_from" not in t.user_attrs for t in complete) == 6
    for t in complete:
        if t.number in before:
            assert t.values[1] == before[t.number]


@pytest.mark.usefixtures("ray_cluster")
def test_a_trial_left_running_by_a_dead_driver_is_failed_and_requeued_once(
        tiny_campaign: Path) -> None:
    from dse.search.space import suggest_candidate
    from dse.search.study import open_study

    tiny_campaign.write_text(tiny_experiment_text(1, name="orphan"))
    experiment = load_experiment(tiny_campaign)
    study = open_study(experiment.run_dir, experiment.name, experiment.space,
                       experiment.spec.sampler)
    orphan = study.ask()
    suggest_candidate(orphan, experiment.space, experiment.devices[0])
    del study  # the driver "dies" here: the trial stays RUNNING in storage

    run_campaign(experiment, report=False)

    study = optuna.load_study(study_name="orphan",
                              storage=f"sqlite:///{experiment.run_dir / 'study.db'}")
    first = study.trials[orphan.number]
    assert first.state == optuna.trial.TrialState.FAIL
    assert first.user_attrs["reason"] == "the driver stopped while this trial ran"
    retried = [t for t in study.trials if t.user_attrs.get("requeued_from") == orphan.number]
    assert len(retried) == 1
    assert retried[0].state == optuna.trial.TrialState.COMPLETE
    assert retried[0].params == orphan.params

    # A second resume learns from that history without tripping over the orphan.
    tiny_campaign.write_text(tiny_experiment_text(2, name="orphan"))
    run_campaign(load_experiment(tiny_campaign), report=False)
    study = optuna.load_study(study_name="orphan",
                              storage=f"sqlite:///{experiment.run_dir / 'study.db'}")
    assert sum(t.state == optuna.trial.TrialState.COMPLETE and "reused_from" not in t.user_attrs
               for t in study.trials) == 2


@pytest.mark.usefixtures("ray_cluster")
def test_trials_that_time_out_are_failed_with_the_reason_and_stop_the_run(
        tiny_campaign: Path) -> None:
    from dse.core.exceptions import DseError

    tiny_campaign.write_text(tiny_experiment_text(3, name="timeouts").replace(
        "budget: {trials: 3}", "budget: {trials: 3, trial_timeout_s: 0.01, max_failed: 2}"))
    with pytest.raises(DseError, match=r"budget\.max_failed: stopped after 2 failed"):
        run_campaign(tiny_campaign)
    experiment = load_experiment(tiny_campaign)
    study = optuna.load_study(study_name="timeouts",
                              storage=f"sqlite:///{experiment.run_dir / 'study.db'}")
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL] * 2
    for trial in study.trials:
        assert trial.user_attrs["status"] == "failed"
        assert trial.user_attrs["reason"].startswith("timed out after 0.01 s")
    # What was measured (here: the failures) still reaches the tables.
    assert (experiment.run_dir / "trials.parquet").is_file()


@pytest.mark.usefixtures("ray_cluster")
def test_a_two_device_campaign_runs_one_study_per_profile_and_reports_both(
        tiny_campaign: Path) -> None:
    from tests.conftest import LOCAL_CPU, SECOND_CPU_NAME

    (tiny_campaign.parent.parent / "hw_profiles" / "second.yaml").write_text(
        LOCAL_CPU.replace("name: local-cpu", f"name: {SECOND_CPU_NAME}"))
    tiny_campaign.write_text(tiny_experiment_text(2, name="two-devices").replace(
        "devices: [../hw_profiles/local-cpu.yaml]",
        "devices: [../hw_profiles/local-cpu.yaml, ../hw_profiles/second.yaml]"))
    result = run_campaign(load_experiment(tiny_campaign))

    storage = f"sqlite:///{result.run_dir / 'study.db'}"
    assert sorted(optuna.study.get_all_study_names(storage)) == [
        "two-devices@local-cpu", "two-devices@local-cpu-b"]
    trials = result.trials
    done = trials[trials["state"] == "COMPLETE"]
    assert done.groupby("device").size().to_dict() == {"local-cpu": 2, SECOND_CPU_NAME: 2}
    front = result.pareto()
    assert set(front["device"]) == {"local-cpu", SECOND_CPU_NAME}
    written = pd.read_csv(result.run_dir / "pareto.csv")
    assert len(written) == len(front)
    portable = pd.read_csv(result.run_dir / "portable.csv")
    assert {"devices", "device_count", "trials"} <= set(portable.columns)
    assert (portable["device_count"] >= 2).all()
    assert result.dashboard is not None and result.dashboard.is_file()
    assert "Portable front" in result.dashboard.read_text()
