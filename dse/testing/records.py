"""Studies written the way the search loop writes them, for tests and demos without hardware.

:func:`record_trial` writes a trial as ``dse.search.loop`` does (user attrs, constraints through
Optuna, objective values in order); :func:`example_study` builds a small campaign whose Pareto
front is known by construction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from dse.core import METRICS, StudyAttr, TrialAttr

EXAMPLE_OBJECTIVES = ("accuracy", "latency_p99_ms")
EXAMPLE_CONSTRAINT = "process_rss_peak_mb <= 4096"
# By construction (see example_study): the feasible, non-dominated trials.
EXAMPLE_FRONT = (0, 1, 2)


def campaign_study(name: str, objectives: Sequence[str], constraints: Sequence[str] = (),
                   storage: str | optuna.storages.BaseStorage | None = None) -> optuna.Study:
    """An empty campaign study: directions from the metrics table, the loop's study attrs."""
    study = optuna.create_study(
        storage=storage, study_name=name,
        directions=[METRICS[o].direction.value for o in objectives])
    study.set_user_attr(StudyAttr.CAMPAIGN, name)
    study.set_user_attr(StudyAttr.OBJECTIVES, list(objectives))
    study.set_user_attr(StudyAttr.CONSTRAINTS, list(constraints))
    return study


def record_trial(study: optuna.Study, candidate: Mapping[str, Any], *,
                 state: TrialState = TrialState.COMPLETE, status: str | None = "ok",
                 reason: str = "", metrics: Mapping[str, float] | None = None,
                 constraints: Mapping[str, float] | None = None,
                 extra_attrs: Mapping[str, Any] | None = None) -> int:
    """Add one finished or in-flight trial; returns its number. A COMPLETE trial's values are
    its metrics for the study's objectives, in objective order."""
    metrics = dict(metrics or {})
    attrs: dict[str, Any] = {TrialAttr.CANDIDATE: dict(candidate),
                             TrialAttr.CANDIDATE_ID: _fake_id(candidate)}
    if status is not None:
        attrs.update({TrialAttr.STATUS: status, TrialAttr.REASON: reason,
                      TrialAttr.METRICS: metrics, TrialAttr.MISSING: {}})
    attrs.update(extra_attrs or {})
    values = None
    if state is TrialState.COMPLETE:
        values = [metrics[name] for name in study.user_attrs[StudyAttr.OBJECTIVES]]
    study.add_trial(optuna.trial.create_trial(
        state=state, values=values, user_attrs=attrs,
        constraints=dict(constraints) if constraints else None))
    return study.trials[-1].number


def candidate(backend: str, precision: str, width: float, threads: int | str,
              batch_size: int = 1) -> dict[str, Any]:
    """A CNN candidate on local-cpu, shaped like ``Candidate.to_dict()``."""
    knob = "intra_op_threads" if backend == "onnxruntime" else "num_threads"
    return {"family": "cnn", "arch": {"depth": 2, "width_mult": width}, "precision": precision,
            "batch_size": batch_size, "backend": backend, "knobs": {knob: threads},
            "device_profile": "local-cpu"}


def example_study(storage: str | optuna.storages.BaseStorage | None = None,
                  name: str = "example") -> optuna.Study:
    """Nine trials of accuracy (max) vs p99 latency (min) under ``process_rss_peak_mb <= 4096``.

    0, 1, 2 form the front. 3 is dominated by 1; 4 beats everyone but breaks the memory bound;
    5 is infeasible and 7 failed (7 with a partial accuracy); 6 is still running; 8 reuses 3's
    measurement. Trial 2 also reports ``energy_j``, a metric this dse does not know, and the torch
    knob mixes an int and a string.
    """
    study = campaign_study(name, EXAMPLE_OBJECTIVES, [EXAMPLE_CONSTRAINT], storage)

    def measured(acc: float, p99: float, memory: float) -> dict[str, float]:
        return {"accuracy": acc, "latency_p99_ms": p99, "latency_p50_ms": p99 / 2,
                "process_rss_peak_mb": memory}

    def bound(memory: float) -> dict[str, float]:
        return {EXAMPLE_CONSTRAINT: memory - 4096}

    ort, torch = "onnxruntime", "torch"
    record_trial(study, candidate(ort, "fp32", 2.0, 1), metrics=measured(0.95, 4.0, 800),
                 constraints=bound(800))
    record_trial(study, candidate(ort, "int8", 1.0, 2), metrics=measured(0.90, 1.5, 500),
                 constraints=bound(500))
    record_trial(study, candidate(torch, "fp32", 0.5, 1),
                 metrics={**measured(0.85, 1.0, 400), "energy_j": 0.2}, constraints=bound(400))
    record_trial(study, candidate(torch, "fp32", 1.0, "auto"), metrics=measured(0.88, 3.0, 600),
                 constraints=bound(600))
    record_trial(study, candidate(torch, "fp32", 2.0, 2, batch_size=8),
                 metrics=measured(0.99, 0.5, 9000), constraints=bound(9000))
    record_trial(study, candidate(torch, "int8", 1.0, 1), state=TrialState.FAIL,
                 status="infeasible", reason="int8 is not supported by torch on local-cpu")
    record_trial(study, candidate(ort, "fp32", 1.5, 1), state=TrialState.RUNNING, status=None)
    record_trial(study, candidate(ort, "int8", 0.5, 1), state=TrialState.FAIL, status="failed",
                 reason="latency_p99_ms not measured: timeout", metrics={"accuracy": 0.8})
    record_trial(study, candidate(torch, "fp32", 1.0, "auto"), metrics=measured(0.88, 3.0, 600),
                 constraints=bound(600), extra_attrs={TrialAttr.REUSED_FROM: 3})
    return study


def example_run(run_dir: Path) -> Path:
    """A run folder as a campaign leaves it: the example study in ``study.db``, named like the
    folder. Returns ``run_dir``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    example_study(storage=f"sqlite:///{run_dir / 'study.db'}", name=run_dir.name)
    return run_dir


def _fake_id(candidate: Mapping[str, Any]) -> str:
    # The real id is dse.core.candidate.stable_hash; any stable text will do here.
    return "-".join(str(v) for v in candidate.values() if not isinstance(v, Mapping))
