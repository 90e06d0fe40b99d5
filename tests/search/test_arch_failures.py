"""A failure of the model itself (its build, proxies, training or fp32 reference: before any
backend) is its architecture's: measured once, then every other candidate of that architecture
on the device is answered from it (``reused_from``, ``failure_scope: arch``), in this run and
after a resume; failures that are not deterministic (a timeout, a dead worker, an interrupt) are
not. And a run whose first candidates all fail for one same reason stops early, naming it in
full (``budget.stop_after_same_failure``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from dse import load_experiment, run_campaign
from dse.core.candidate import Candidate
from dse.core.exceptions import BuildError, DseError
from dse.search.failure_stops import FailureStops
from tests.models.bad_factories import TRAINING_FAILURE, write_linear_onnx
from tests.search.test_model_sources_campaign import _campaign

if TYPE_CHECKING:
    from dse.search.device_search import DeviceSearch
    from dse.spec import HardwareProfile

FACTORY = "tests.models.bad_factories:fails_in_training"
REASON = f"cannot build 'factory:{FACTORY}': {TRAINING_FAILURE}"


def _candidate(hidden: int, precision: str = "fp32") -> Candidate:
    from dse.models.sources import candidate_source
    from dse.spec import ModelSpec

    family, settings = candidate_source(ModelSpec(factory=FACTORY, dataset="digits"))
    return Candidate(family=family, arch={"hidden": hidden}, precision=precision, batch_size=4,
                     backend="onnxruntime", knobs={"intra_op_threads": 1}, model=settings)


def test_the_worker_tells_a_model_failure_from_a_deployment_one(tmp_path: Path) -> None:
    """Training that fails is the architecture's (ArchFailure, its reason free of the arch
    values so it reads alike across architectures); a batch size an ONNX graph rejects is that
    candidate's only."""
    import yaml

    from dse.models.sources import candidate_source
    from dse.spec import HardwareProfile, ModelSpec, TrainingSpec
    from dse.trial.candidate_model import ArchFailure
    from dse.trial.prepare import prepare_candidate
    from tests.conftest import LOCAL_CPU

    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    training = TrainingSpec(epochs=1, batch_size=128, threads=1)
    with pytest.raises(ArchFailure) as failed:
        prepare_candidate(_candidate(16), training, profile, tmp_path / "cache")
    assert str(failed.value) == REASON

    write_linear_onnx(tmp_path / "model.onnx", reshape_batch=1)
    family, settings = candidate_source(ModelSpec(onnx="model.onnx"), tmp_path)
    candidate = Candidate(family=family, precision="fp32", batch_size=4, backend="onnxruntime",
                          knobs={"intra_op_threads": 1}, model=settings)
    with pytest.raises(BuildError, match="failed at batch size 4") as rejected:
        prepare_candidate(candidate, training, profile, tmp_path / "cache")
    assert not isinstance(rejected.value, ArchFailure)


def test_only_an_architecture_failure_answers_the_other_candidates_of_its_arch(
        tmp_path: Path) -> None:
    """A timeout, a dead worker or an interrupt says nothing of the architecture: its other
    candidates are measured. Recovery from the stored study learns the same as the run did."""
    import optuna

    from dse.search.device_search import ARCH_SCOPE, DeviceSearch, KnownResult
    from dse.spec import HardwareProfile

    profile = HardwareProfile(name="local-cpu", kind="cpu", backends=["onnxruntime"],
                              precisions=["fp32", "int8"])
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="arch", storage=storage,
                                directions=["maximize", "minimize"])
    search = DeviceSearch(profile, study, None, ["accuracy", "latency_p50_ms"], [], False)
    timed_out, broken = _candidate(16), _candidate(32)
    for number, (candidate, scope) in enumerate([(timed_out, None), (broken, ARCH_SCOPE)]):
        trial = study.ask()
        trial.set_user_attr("candidate", candidate.to_dict())
        trial.set_user_attr("candidate_id", candidate.candidate_id)
        if scope is not None:
            trial.set_user_attr("failure_scope", scope)
        # What the dispatcher records of a timeout, and what the worker returns of training
        # that failed.
        status, reason = ("failed", "timed out after 8 s") if scope is None else (
            "infeasible", REASON)
        search.record(trial, status, reason, {}, {}, None)
        search.learn(candidate, KnownResult(number, status, reason, {}, {}, None, scope))

    for learnt in (search, _recovered(profile, storage)):
        assert learnt.answer(_candidate(16, "int8")) is None
        answer = learnt.answer(_candidate(32, "int8"))
        assert answer is not None and (answer.number, answer.reason) == (1, REASON)
        assert answer.scope == ARCH_SCOPE


def _recovered(profile: HardwareProfile, storage: str) -> DeviceSearch:
    import optuna

    from dse.search.device_search import DeviceSearch

    search = DeviceSearch(profile, optuna.load_study(study_name="arch", storage=storage), None,
                          ["accuracy", "latency_p50_ms"], [], False)
    search.recover()
    return search


def test_the_same_reason_for_the_first_candidates_stops_a_run() -> None:
    where = Path("experiments/x.yaml")
    stops = FailureStops(where, max_failed=50, same_failure=3)
    for number in range(2):
        stops.measured(f"local-cpu trial {number}", "infeasible", REASON)
        assert stops.same_failure_stop() is None
    stops.measured("local-cpu trial 2", "infeasible", REASON)
    with pytest.raises(DseError) as stopped:
        stops.check([], True, 0, 10)
    assert str(stopped.value) == (
        f"{where}: stopped early: the first 3 distinct candidates measured in this run were all "
        f"infeasible for the same reason, none completed (budget.stop_after_same_failure: 3): "
        f"{REASON}")
    # A completed candidate, or another reason, among the first ones: the rule never applies.
    for other in [("ok", ""), ("infeasible", "another reason")]:
        stops = FailureStops(where, max_failed=50, same_failure=3)
        for status, reason in [("infeasible", REASON), other, *[("infeasible", REASON)] * 5]:
            stops.measured("local-cpu trial 0", status, reason)
        assert stops.same_failure_stop() is None
        stops.check([], True, 0, 10)
    # 0 turns it off.
    stops = FailureStops(where, max_failed=50, same_failure=0)
    for _ in range(5):
        stops.measured("local-cpu trial 0", "infeasible", REASON)
    assert stops.same_failure_stop() is None


@pytest.mark.usefixtures("ray_cluster")
def test_a_model_failing_in_training_is_measured_once_per_arch_and_stops_the_run(
        tmp_path: Path) -> None:
    """Four architectures, two precisions each, every one failing in training for one reason:
    the run measures three architectures (one candidate each; any other candidate of theirs is
    answered from that record) and stops naming the reason; the resumed run measures only the
    fourth, answering the rest from the stored study, and stops once every candidate failed."""
    experiment = _campaign(tmp_path, "needs-labels", f"  factory: {FACTORY}\n  dataset: digits\n"
                           "  arch:\n    hidden: [16, 32, 64, 128]",
                           precisions="[fp32, int8]", trials=4)
    with pytest.raises(DseError) as stopped:
        run_campaign(load_experiment(experiment), report=False)
    assert str(stopped.value).endswith(
        f": stopped early: the first 3 distinct candidates measured in this run were all "
        f"infeasible for the same reason, none completed (budget.stop_after_same_failure: 3): "
        f"{REASON}"), stopped.value
    first = _measured_by_arch(experiment)
    assert len(first) == 3, first

    with pytest.raises(DseError, match="every candidate the sampler proposes on a device failed "
                                       r"\(1 distinct failed or infeasible in this run"):
        run_campaign(load_experiment(experiment), report=False)
    both = _measured_by_arch(experiment)
    assert sorted(both) == [16, 32, 64, 128] and all(both[h] == first[h] for h in first), both


def _measured_by_arch(experiment: Path) -> dict[int, int]:
    """hidden -> the number of the one trial that measured it; every other trial of the study is
    answered from the measured trial of its own architecture, with the same reason."""
    import optuna

    run_dir = load_experiment(experiment).run_dir
    study = optuna.load_study(study_name="needs-labels",
                              storage=f"sqlite:///{run_dir / 'study.db'}")
    measured: dict[int, int] = {}
    answered: list[tuple[int, int]] = []
    for trial in study.trials:
        attrs = trial.user_attrs
        hidden = int(attrs["candidate"]["arch"]["hidden"])
        assert attrs["reason"] == REASON and attrs["failure_scope"] == "arch", attrs
        if "reused_from" in attrs:
            answered.append((hidden, int(attrs["reused_from"])))
        else:
            assert hidden not in measured, (hidden, trial.number)
            measured[hidden] = trial.number
    assert all(measured[hidden] == source for hidden, source in answered), (measured, answered)
    return measured
