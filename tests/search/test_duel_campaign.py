"""Duels in a real campaign: real Ray, real runners, real Optuna storage on disk. The close call
is dueled at the end of the search, its verdict kept on the study, the front drawn by it, and a
resumed campaign duels nothing again."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import optuna
import pytest

from dse.app.api import run_campaign
from dse.search.duel_records import MEASURED, read_records
from dse.search.pareto import pareto_mask
from tests.conftest import LOCAL_CPU

# One model, two candidates that differ only in a knob sequential ONNX Runtime never uses: the
# closest call there is, and equally accurate, so the order of their medians decides the front.
SPACE = """\
name: twins
model:
  family: cnn
  arch: {num_stages: [1], depth: [1], width_mult: [0.5], kernel_size: [3], expand_ratio: [2]}
training: {epochs: 1, batch_size: 256}
deployment:
  backends:
    onnxruntime:
      knobs: {intra_op_threads: [1], inter_op_threads: [1, 2]}
  precisions: [fp32]
  batch_sizes: [1]
objectives:
  - metric: accuracy
  - metric: latency_p50_ms
"""
# Every pair counts as close (close_within) and the duel's time is granted whatever the search
# spent (time_share); other work on this shared machine is recorded, not acted on, and a trial
# not measured cleanly still competes (non_ok_on_front), so the pair is always there and the duel's
# verdict always counts.
EXPERIMENT = """\
name: twins
search_space: ../search_spaces/twins.yaml
devices: [../hw_profiles/local-cpu.yaml]
sampler: {name: grid, seed: 0}
budget: {trials: 2}
measurement: {warmup_max_seconds: 0.1, min_iters: 5, min_seconds: 0.0, max_seconds: 0.3,
              target_rel_ci: 0.05, interference: {action: ignore}, non_ok_on_front: true,
              second_looks: 0,
              duels: {close_within: 100, time_share: 1000, max_seconds: 1.5, max_pairs: 1}}
"""
OBJECTIVES = ["accuracy", "latency_p50_ms"]


@pytest.mark.usefixtures("ray_cluster")
def test_a_close_call_is_dueled_recorded_used_and_never_dueled_again(tmp_path: Path) -> None:
    for folder, name, text in [("search_spaces", "twins.yaml", SPACE),
                               ("hw_profiles", "local-cpu.yaml", LOCAL_CPU),
                               ("experiments", "twins.yaml", EXPERIMENT)]:
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / name).write_text(text)
    experiment = tmp_path / "experiments" / "twins.yaml"
    notices: list[str] = []
    result = run_campaign(experiment, report=False, on_notice=notices.append)

    assert "local-cpu: 1 duel of close calls on the front (at most 1.5 s of timing each)" in notices
    study = optuna.load_study(study_name="twins",
                              storage=f"sqlite:///{result.run_dir / 'study.db'}")
    (record,) = read_records(study.user_attrs)
    assert (record.a, record.b, record.status) == (0, 1, MEASURED)
    assert record.rounds >= 3 and record.device_id.startswith("local-cpu")
    (verdict,) = record.verdicts
    assert verdict.metric == "latency_p50_ms" and verdict.low <= verdict.ratio <= verdict.high

    # The front is what the verdict says: equally accurate, so the faster alone, or both on a
    # tie, whatever their separately measured medians say.
    trials = result.trials
    expected = {"a_faster": [0], "b_faster": [1], "tie": [0, 1]}[verdict.verdict]
    assert sorted(result.pareto()["trial"]) == expected
    values = trials[["accuracy [fraction]", "latency_p50_ms [ms]"]].to_numpy(np.float64)
    assert values[0, 0] == values[1, 0]
    by_values = [int(t) for t, keep in zip(trials["trial"], pareto_mask(values, OBJECTIVES),
                                           strict=True) if keep]
    assert len(by_values) == 1 or values[0, 1] == values[1, 1]  # what the values alone say
    assert trials["duels"].notna().all()

    # Resumed with nothing left to measure and its duel decided: no dispatcher, no duel again.
    again: list[str] = []
    run_campaign(experiment, report=False, on_notice=again.append)
    assert any(line.endswith("nothing left to measure") for line in again), again
    assert not any("duel" in line for line in again)
    study = optuna.load_study(study_name="twins",
                              storage=f"sqlite:///{result.run_dir / 'study.db'}")
    assert read_records(study.user_attrs) == [record]
