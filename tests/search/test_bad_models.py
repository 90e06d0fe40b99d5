"""Bad models through a real campaign on the embedded Ray: each becomes a failed or infeasible
trial with its reason, and the campaign completes on the good candidates, or (when no candidate
can run) stops with a DseError naming that reason — never a hang or a traceback.

A file dse can judge on its own (truncated, a dynamic sample axis, a fixed batch that is not the
searched one) is rejected at load with a SpecError naming the file and the axis, before anything
runs: cheaper and clearer than one failed trial per candidate.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from dse import load_experiment, run_campaign
from dse.core.exceptions import DseError, SpecError
from tests.conftest import REPO
from tests.models.bad_factories import write_linear_onnx
from tests.search.test_model_sources_campaign import _campaign

# A two-value arch; under the default seed 2 the default sampler's random start (Optuna's
# RandomSampler(2)) proposes the bad value (16) first, so one campaign sees both.
FACTORY_ARCH = "  dataset: digits\n  arch:\n    hidden: [16, 64]"


def _factory_campaign(root: Path, factory: str, *, budget: str = "{trials: 2}",
                      seed: int = 2, precisions: str = "[fp32]",
                      objectives: str = "accuracy") -> Path:
    experiment = _campaign(root, factory, f"  factory: tests.models.bad_factories:{factory}\n"
                           + FACTORY_ARCH, precisions=precisions, objectives=objectives)
    text = experiment.read_text()
    experiment.write_text(text.replace("{trials: 2}", budget).replace("seed: 3", f"seed: {seed}"))
    return experiment


def _onnx_campaign(root: Path, name: str, *, budget: str = "{trials: 1}",
                   batch_sizes: str = "[4]") -> Path:
    experiment = _campaign(root, name, "  onnx: model.onnx\n"
                           "  evaluator: dse.examples.evaluators:digits_validation", trials=1)
    experiment.write_text(experiment.read_text().replace("{trials: 1}", budget))
    space = root / "search_spaces" / f"{name}.yaml"
    space.write_text(space.read_text().replace("batch_sizes: [4]", f"batch_sizes: {batch_sizes}"))
    return experiment


def _model_file(root: Path) -> Path:
    (root / "search_spaces").mkdir(exist_ok=True)
    return root / "search_spaces" / "model.onnx"


def _study_trials(experiment: Path) -> list[object]:
    import optuna

    spec = load_experiment(experiment)
    db = experiment.parent / "runs" / spec.spec.name / "study.db"
    storage = f"sqlite:///{db}"
    names = optuna.get_all_study_names(storage)
    return [t for name in names
            for t in optuna.load_study(study_name=name, storage=storage).get_trials()]


def _assert_told_finite(experiment: Path) -> None:
    """Optuna is only ever told finite objective values: a trial with a non-finite one must be
    failed with its reason instead."""
    from optuna.trial import FrozenTrial, TrialState

    for trial in _study_trials(experiment):
        assert isinstance(trial, FrozenTrial)
        if trial.state == TrialState.COMPLETE:
            assert trial.values is not None and all(math.isfinite(v) for v in trial.values), trial
        elif trial.state == TrialState.FAIL:
            assert trial.user_attrs.get("reason"), trial


def _stops_naming(experiment: Path, *fragments: str) -> str:
    """Run a campaign none of whose candidates can run: it stops with a DseError that carries
    the trial's reason — at ``budget.max_failed`` distinct failures, or, in a space whose every
    candidate failed, once the sampler proposes only those (repeats reuse the failure and are no
    new failures)."""
    with pytest.raises(DseError, match=r"budget\.max_failed|every candidate the sampler "
                                       r"proposes on a device failed") as stopped:
        run_campaign(load_experiment(experiment), report=False)
    message = str(stopped.value)
    for fragment in fragments:
        assert fragment in message, message
    _assert_told_finite(experiment)
    return message


@pytest.mark.usefixtures("ray_cluster")
def test_factory_that_raises_fails_its_trial_and_the_campaign_completes(tmp_path: Path) -> None:
    # One good candidate exists (hidden=64): a budget of one distinct measured candidate.
    result = run_campaign(load_experiment(_factory_campaign(
        tmp_path, "raises_when_small", budget="{trials: 1}")), report=False)
    trials = result.trials
    failed = trials[trials["state"] == "FAIL"]
    done = trials[trials["state"] == "COMPLETE"]
    assert len(done) == 1 and (done["param.arch.hidden"] == 64).all()
    # Measured once; the sampler's repeats of it reuse that failure.
    assert failed["reused_from"].isna().sum() == 1 and (failed["param.arch.hidden"] == 16).all()
    assert failed["reason"].str.contains("user factory bug: hidden=16 is not supported").all(), (
        failed["reason"].tolist())


@pytest.mark.usefixtures("ray_cluster")
def test_factory_that_hangs_times_out_and_the_campaign_goes_on(tmp_path: Path) -> None:
    experiment = _factory_campaign(tmp_path, "hangs_when_small",
                                   budget="{trials: 1, trial_timeout_s: 8}")
    result = run_campaign(load_experiment(experiment), report=False)
    trials = result.trials
    failed = trials[trials["state"] == "FAIL"]
    assert (trials["state"] == "COMPLETE").sum() == 1
    # Measured once; the sampler's repeats of it reuse that failure.
    assert failed["reused_from"].isna().sum() == 1 and (failed["param.arch.hidden"] == 16).all()
    assert failed["reason"].str.contains("timed out after 8 s").all(), failed["reason"].tolist()


@pytest.mark.usefixtures("ray_cluster")
def test_nan_weights_are_infeasible_and_never_told_to_optuna(tmp_path: Path) -> None:
    # int8 too: its calibration would choke on NaN, and fidelity against a NaN fp32 reference
    # (rel_l2_error, the objective here) would be NaN. Seed 2 draws hidden=16 at both precisions.
    experiment = _factory_campaign(tmp_path, "nan_when_small", precisions="[fp32, int8]",
                                   objectives="rel_l2_error", seed=2)
    trials = run_campaign(load_experiment(experiment), report=False).trials
    bad = trials[trials["param.arch.hidden"] == 16]
    assert set(bad["param.precision"]) == {"fp32", "int8"} and (bad["state"] == "FAIL").all() and (
        bad["status"] == "infeasible").all(), bad[["status", "reason"]].to_string()
    for _, row in bad.iterrows():
        assert re.fullmatch(
            r"the model's outputs contain NaN "
            r"\((\d+) of \1 values non-finite\) on the validation batch in its own fp32 "
            r"reference: the model produces them, whatever the backend or precision",
            str(row["reason"])), row["reason"]
    # The model's own failure is its architecture's: measured once, the arch's other candidates
    # (the other precision here) answered from it.
    measured = bad[bad["reused_from"].isna()]
    assert len(measured) == 1 and set(bad["reused_from"].dropna()) == set(measured["trial"]), (
        bad[["trial", "param.precision", "reused_from"]].to_string())
    assert (trials["state"] == "COMPLETE").sum() == 2
    _assert_told_finite(experiment)


def test_truncated_onnx_file_is_a_clear_spec_error(tmp_path: Path) -> None:
    model = write_linear_onnx(_model_file(tmp_path))
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    with pytest.raises(SpecError, match=r"model\.onnx: not a readable ONNX model"):
        load_experiment(_onnx_campaign(tmp_path, "truncated"))


def test_dynamic_sample_axes_are_a_spec_error_naming_them(tmp_path: Path) -> None:
    write_linear_onnx(_model_file(tmp_path), input_dims=("n", 1, "h", "w"))
    with pytest.raises(SpecError, match=r"model\.onnx: input 'x' has dynamic axes 2 \('h'\), "
                                        r"3 \('w'\) besides the batch \(axis 0\)"):
        load_experiment(_onnx_campaign(tmp_path, "dynamic-hw"))


def test_a_fixed_batch_other_than_the_searched_one_is_a_spec_error(tmp_path: Path) -> None:
    write_linear_onnx(_model_file(tmp_path), input_dims=(1, 1, 8, 8))
    with pytest.raises(SpecError, match=r"the ONNX file fixes the batch at 1; \[4\] cannot run "
                                        r"\(.*model\.onnx: input 'x' axis 0 is 1"):
        load_experiment(_onnx_campaign(tmp_path, "fixed-batch"))


@pytest.mark.usefixtures("ray_cluster")
def test_a_batch_size_the_runtime_rejects_is_infeasible_and_the_campaign_completes(
        tmp_path: Path) -> None:
    """The file declares a dynamic batch but its graph only runs at batch 1 (a Reshape to
    [1, 64]): only ONNX Runtime can tell. Batch 4 is infeasible with its message; batch 1 runs."""
    write_linear_onnx(_model_file(tmp_path), reshape_batch=1)
    experiment = _onnx_campaign(tmp_path, "reshape-batch", batch_sizes="[4, 1]")
    # Seed 2 draws batch 4 first.
    experiment.write_text(experiment.read_text().replace("seed: 3", "seed: 2"))
    trials = run_campaign(load_experiment(experiment), report=False).trials
    done, failed = trials[trials["state"] == "COMPLETE"], trials[trials["state"] == "FAIL"]
    assert len(done) == 1 and (done["param.batch_size"] == 1).all()
    assert len(failed) >= 1 and (failed["param.batch_size"] == 4).all()
    assert (failed["status"] == "infeasible").all()
    assert failed["reason"].str.startswith(
        "the fp32 reference (onnxruntime, CPU) of model.onnx failed at batch size 4").all()
    assert failed["reason"].str.contains(
        "Input shape:{4,1,8,8}, requested shape:{1,64}", regex=False).all()
    _assert_told_finite(experiment)


def test_unsupported_operator_is_refused_at_the_start_with_the_runtime_reason(
        tmp_path: Path) -> None:
    """A file ONNX Runtime's CPU provider cannot load has no fp32 reference, so no candidate of
    it could run: the run's start (dse.models.output_check, before Ray) says so, naming ORT's
    message."""
    write_linear_onnx(_model_file(tmp_path), op_domain="com.example.mystery")
    experiment = _onnx_campaign(tmp_path, "mystery-op", budget="{trials: 1, max_failed: 3}")
    with pytest.raises(SpecError, match=r"model\.onnx: ONNX Runtime \(CPU, which computes every "
                                        r"candidate's fp32 reference\) cannot load it: .*"
                                        r"com\.example\.mystery:Mystery\(-1\) is not a "
                                        r"registered function/op"):
        run_campaign(load_experiment(experiment), report=False)


def test_an_objective_the_evaluator_leaves_out_fails_naming_it(tmp_path: Path) -> None:
    """An ok result without a finite objective is failed by the search loop, and that reason (not
    the measurement's empty one) is what the stop and the progress lines report."""
    for folder, name in (("search_spaces", "free-params-example.yaml"),
                         ("hw_profiles", "local-cpu.yaml")):
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / name).write_text((REPO / folder / name).read_text())
    (tmp_path / "experiments").mkdir()
    experiment = tmp_path / "experiments" / "missing-objective.yaml"
    experiment.write_text("""\
name: missing-objective
search_space: ../search_spaces/free-params-example.yaml
devices: [../hw_profiles/local-cpu.yaml]
evaluator: tests.models.bad_factories:one_objective_only
sampler: {name: random, seed: 0}
budget: {trials: 4, max_failed: 2}
""")
    with pytest.raises(DseError, match=r"budget\.max_failed") as stopped:
        run_campaign(load_experiment(experiment), report=False)
    assert str(stopped.value).endswith("failed: zdt_f2 not measured: no value")
    _assert_told_finite(experiment)


@pytest.mark.usefixtures("ray_cluster")
def test_nan_onnx_weights_are_infeasible_and_never_told_to_optuna(tmp_path: Path) -> None:
    write_linear_onnx(_model_file(tmp_path), weight=math.nan)
    message = _stops_naming(_onnx_campaign(tmp_path, "nan-onnx",
                                           budget="{trials: 1, max_failed: 1}"))
    # No dataset (the user's evaluator scores it): the batch is dse's stand-in inputs.
    assert re.search(r"trial 0 infeasible: the model's outputs contain NaN "
                     r"\((\d+) of \1 values non-finite\) on the validation batch in its own fp32 "
                     r"reference", message), message
