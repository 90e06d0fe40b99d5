"""Custom evaluators, free-parameter spaces and replay devices, end to end: real Optuna storage,
real result tables and dashboards, the real CLI; a real local-cpu device beside a replay one."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import optuna
import pandas as pd
import pytest
import yaml
from pydantic import BaseModel, ValidationError
from typer.testing import CliRunner

from dse.app.api import load_experiment, run_campaign
from dse.cli import app
from dse.core.candidate import Candidate
from dse.core.exceptions import SpecError
from dse.core.measurement import Measurement
from dse.examples.evaluators import zdt1, zdt1_values
from dse.farm.dispatcher import Job
from dse.search.evaluators.dispatchers import EvaluatorDispatcher, InfeasibleCandidate, ReplayEvaluator
from dse.spec import HardwareProfile, MeasureSpec, SearchSpace, TrainingSpec
from tests.conftest import LOCAL_CPU, REPO, TINY_SPACE

runner = CliRunner()

FREE_SPACE = """\
name: free
parameters:
  x1: {low: 0.0, high: 1.0, step: 0.25}
  x2: [0.0, 0.5, 1.0]
metrics:
  - {name: zdt_f1, unit: "1", direction: minimize}
  - {name: zdt_f2, unit: "1", direction: minimize}
objectives:
  - metric: zdt_f1
  - metric: zdt_f2
"""

SIM_PROFILE = LOCAL_CPU.replace("name: local-cpu", "name: sim")


def _experiment_text(name: str, devices: str, trials: int, extra: str = "",
                     max_failed: int = 50) -> str:
    return (f"name: {name}\nsearch_space: ../search_spaces/free.yaml\ndevices: [{devices}]\n"
            f"sampler: {{name: random, seed: 3}}\n"
            f"budget: {{trials: {trials}, max_failed: {max_failed}}}\n{extra}")


@pytest.fixture
def free_campaign(tmp_path: Path) -> Path:
    """A free-parameter campaign on one CPU profile that an evaluator stands in for."""
    for folder, name, text in [("search_spaces", "free.yaml", FREE_SPACE),
                               ("hw_profiles", "sim.yaml", SIM_PROFILE),
                               ("experiments", "free.yaml",
                                _experiment_text("free", "../hw_profiles/sim.yaml", 6))]:
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / name).write_text(text)
    return tmp_path / "experiments" / "free.yaml"


# Evaluators the YAML files below name as tests.search.test_evaluators:<function>.

def failing_above_half(candidate: Candidate) -> dict[str, float]:
    if candidate.params["x1"] > 0.5:
        raise ValueError(f"x1 = {candidate.params['x1']} is too hot")
    return zdt1(candidate)


NOT_A_FUNCTION = 3


# -- the Python API --------------------------------------------------------------------------------

def test_api_runs_a_free_parameter_space_with_an_evaluator(free_campaign: Path) -> None:
    import ray

    ray_was_up = ray.is_initialized()
    seen: list[Candidate] = []

    def evaluator(candidate: Candidate) -> dict[str, float]:
        seen.append(candidate)
        return zdt1(candidate)

    result = run_campaign(free_campaign, evaluator=evaluator)

    assert ray.is_initialized() == ray_was_up  # no farm for an evaluator campaign
    assert seen and all(set(c.params) == {"x1", "x2"} and not c.backend for c in seen)
    trials = result.trials
    done = trials[trials["state"] == "COMPLETE"]
    assert len(done) == 6 and (done["status"] == "ok").all()
    for _, row in done.iterrows():
        expected = zdt1_values({"x1": row["param.x1"], "x2": row["param.x2"]})
        assert row["zdt_f1 [1]"] == pytest.approx(expected["zdt_f1"])
        assert row["zdt_f2 [1]"] == pytest.approx(expected["zdt_f2"])
    assert "param.backend" not in trials.columns and "param.family" not in trials.columns
    front = result.pareto()
    assert 1 <= len(front) <= 6
    assert (result.run_dir / "trials.parquet").is_file()
    assert (result.run_dir / "pareto.csv").is_file()
    assert result.dashboard is not None and result.dashboard.is_file()

    # The study keeps the declared metrics, so a report built from the database alone knows them.
    from dse.report.dashboard import dashboard_info
    from dse.results import load_campaign

    studies = load_campaign(result.run_dir)
    assert studies[0].user_attrs["metrics"][0] == {
        "name": "zdt_f1", "unit": "1", "direction": "minimize", "description": ""}
    info = dashboard_info(studies)
    assert info.scatter.empty_reason is None
    assert sorted(info.scatter.front.trials) == sorted(front["trial"])


def test_a_failing_evaluator_fails_its_trials_and_the_campaign_goes_on(
        free_campaign: Path) -> None:
    free_campaign.write_text(_experiment_text(
        "failing", "../hw_profiles/sim.yaml", 4,
        "evaluator: tests.search.test_evaluators:failing_above_half\n"))
    result = run_campaign(free_campaign, report=False)

    trials = result.trials
    failed = trials[trials["status"] == "failed"]
    assert len(failed) >= 1, "x1 > 0.5 in 2 of the 5 grid values: a random sampler hits one"
    assert (failed["param.x1"] > 0.5).all()
    assert failed["reason"].str.contains(
        "evaluator tests.search.test_evaluators:failing_above_half raised ValueError: x1 = "
        ).all()
    ok = trials[trials["status"] == "ok"]
    assert len(ok) == 4 and (ok["param.x1"] <= 0.5).all()


def _job(candidate: Candidate) -> Job:
    return Job(0, candidate, TrainingSpec(), MeasureSpec(), 60.0)


def test_evaluator_results_are_checked_and_become_measurements() -> None:
    candidate = Candidate(params={"x1": 0.25, "x2": 0.5}, device_profile="sim")

    def outcome(function: object) -> Measurement:
        dispatcher = EvaluatorDispatcher({"sim": function}, {"zdt_f1", "zdt_f2"})  # type: ignore[dict-item]
        assert dispatcher.idle("sim") == 1
        dispatcher.submit(_job(candidate))
        assert dispatcher.idle("sim") == 0 and dispatcher.in_flight() == 1
        [done] = dispatcher.wait()
        assert dispatcher.idle("sim") == 1 and dispatcher.wait(timeout_s=0) == []
        dispatcher.cancel()  # stops a worker process, if the function has one
        return done.measurement

    ok = outcome(zdt1)
    assert ok.status == "ok" and ok.metrics == zdt1(candidate)
    assert ok.provenance["evaluator"] == "dse.examples.evaluators:zdt1"
    assert ok.provenance["evaluator_runs_in"] == "worker process"  # an importable function

    def infeasible(c: Candidate) -> dict[str, float]:
        raise InfeasibleCandidate("needs x1 > 0.5")

    cases = {
        infeasible: ("infeasible", "needs x1 > 0.5"),
        lambda c: 1.5: ("failed", "returned a float; expected a mapping of metric name to number"),
        lambda c: {"zdt_f1": math.nan, "zdt_f2": 1.0}: ("failed", "zdt_f1 = nan, not a finite"),
        lambda c: {"zdt_f1": 1.0, "zdt_f2": "fast"}: ("failed", "zdt_f2 = 'fast', not a number"),
        lambda c: {"zdt_f1": 1.0, "speed": 2.0}: ("failed", "unknown metrics ['speed']; allowed"),
        lambda c: 1 / 0: ("failed", "raised ZeroDivisionError: division by zero"),
    }
    for function, (status, reason) in cases.items():
        measured = outcome(function)
        assert (measured.status, reason in measured.reason) == (status, True), measured.reason
    assert outcome(lambda c: {"zdt_f1": 1.0, "speed": 2.0}).metrics == {"zdt_f1": 1.0}

    # An evaluator written before memory_peak_mb was renamed reports the metric by its old name.
    old = EvaluatorDispatcher({"sim": lambda c: {"zdt_f1": 1.0, "memory_peak_mb": 5.0}},
                              {"zdt_f1", "process_rss_peak_mb"}).measure(candidate)
    assert (old.status, old.metrics) == ("ok", {"zdt_f1": 1.0, "process_rss_peak_mb": 5.0})


def test_an_evaluator_measures_a_model_space_without_the_capability_table(
        tiny_campaign: Path) -> None:
    """A latency predictor, say: it sees model candidates, and what exists is its business, so
    torch/int8 (which the capability table refuses on a CPU) is offered too."""
    import ray

    ray_was_up = ray.is_initialized()
    tiny_campaign.write_text(tiny_campaign.read_text().replace("budget: {trials: 4}",
                                                               "budget: {trials: 12}"))
    stacks = set()

    def predictor(candidate: Candidate) -> dict[str, float]:
        stacks.add((candidate.backend, candidate.precision))
        return {"accuracy": candidate.arch["width_mult"] / 2, "process_rss_peak_mb": 10.0,
                "latency_p99_ms": candidate.batch_size * (0.5 if candidate.precision == "int8"
                                                          else 1.0)}

    result = run_campaign(tiny_campaign, evaluator=predictor, report=False)
    assert ray.is_initialized() == ray_was_up
    assert ("torch", "int8") in stacks
    measured = result.trials[result.trials["reused_from"].isna()]
    assert (measured["status"] == "ok").sum() == 12

    space = load_experiment(tiny_campaign).space
    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    from dse.search.space import device_options

    assert device_options(space, profile)["torch"] == ["fp32"]
    assert device_options(space, profile, capabilities=False)["torch"] == ["fp32", "int8"]
    replay = HardwareProfile.model_validate({"name": "r", "kind": "replay", "table": "t.csv"})
    assert device_options(space, replay) == {"onnxruntime": ["fp32", "int8"],
                                             "torch": ["fp32", "int8"]}


def test_a_model_free_space_cannot_go_to_the_farm(free_campaign: Path) -> None:
    with pytest.raises(SpecError, match=r"devices: sim would be measured on the device farm.*"
                                        r"has no model: name an evaluator"):
        run_campaign(free_campaign)


# -- the CLI ---------------------------------------------------------------------------------------

def _shipped_example(tmp_path: Path, trials: int) -> Path:
    """The shipped custom-evaluator example, copied with its files into ``tmp_path``."""
    for relative in ["experiments/custom-evaluator.yaml", "search_spaces/free-params-example.yaml",
                     "hw_profiles/local-cpu.yaml", "hw_profiles/replay/replay-example.yaml",
                     "hw_profiles/tables/zdt1-grid.csv"]:
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / relative, tmp_path / relative)
    experiment = tmp_path / "experiments" / "custom-evaluator.yaml"
    text = experiment.read_text()
    assert "  trials: 30\n" in text
    experiment.write_text(text.replace("  trials: 30\n", f"  trials: {trials}\n"))
    return experiment


def test_cli_runs_the_shipped_example_evaluator_and_replay_device(tmp_path: Path) -> None:
    experiment = _shipped_example(tmp_path, trials=5)
    result = runner.invoke(app, ["run", str(experiment)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Pareto front" in result.output
    trial_lines = [line for line in result.output.splitlines() if line.startswith("#")]
    assert len(trial_lines) >= 10
    assert any(line.startswith("#0 local-cpu x1=") and "zdt_f1" in line for line in trial_lines)
    assert any(line.startswith("#0 replay-example x1=") for line in trial_lines)

    run_dir = tmp_path / "experiments" / "runs" / "custom-evaluator"
    trials = pd.read_parquet(run_dir / "trials.parquet")
    done = trials[trials["status"] == "ok"]
    assert done.groupby("device").size().to_dict() == {"local-cpu": 5, "replay-example": 5}
    # The replay device serves the recorded table; the evaluator computes the same toy.
    for _, row in done.iterrows():
        expected = zdt1_values({k: row[f"param.{k}"] for k in ("x1", "x2", "x3")})
        assert row["zdt_f2 [1]"] == pytest.approx(expected["zdt_f2"], rel=1e-5)
    front = pd.read_csv(run_dir / "pareto.csv")
    assert set(front["device"]) == {"local-cpu", "replay-example"}
    assert (tmp_path / "dashboards" / "custom-evaluator.html").is_file()


@pytest.mark.parametrize(("reference", "expected"), [
    ("zdt1", "evaluator: must read module:function (e.g. dse.examples.evaluators:zdt1), got "
             "'zdt1'"),
    ("no_such_module_for_dse:f", "evaluator: cannot import module 'no_such_module_for_dse' (No "
                                 "module named 'no_such_module_for_dse'); it must be installed"),
    ("dse.examples.evaluators:zdt2", "evaluator: module 'dse.examples.evaluators' has no function "
                                     "'zdt2'"),
    ("tests.search.test_evaluators:NOT_A_FUNCTION",
     "evaluator: tests.search.test_evaluators:NOT_A_FUNCTION is not a function; found int 3"),
])
def test_a_bad_evaluator_reference_is_one_line_and_exit_2(free_campaign: Path, reference: str,
                                                          expected: str) -> None:
    free_campaign.write_text(_experiment_text("bad", "../hw_profiles/sim.yaml", 1,
                                              f"evaluator: '{reference}'\n"))
    result = runner.invoke(app, ["run", str(free_campaign)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"{free_campaign}: {expected}")


# -- replay ----------------------------------------------------------------------------------------

def _replay_profile(folder: Path, table: str, name: str = "bench") -> Path:
    path = folder / "hw_profiles" / f"{name}.yaml"
    path.write_text(f"name: {name}\nkind: replay\ntable: {table}\n")
    return path


def test_a_replay_campaign_finds_only_rows_of_its_table(free_campaign: Path) -> None:
    root = free_campaign.parent.parent
    recorded = {(0.0, 0.0), (0.25, 0.5), (0.5, 1.0), (1.0, 0.0), (0.75, 0.5)}
    rows = [{"x1": x1, "x2": x2, **zdt1_values({"x1": x1, "x2": x2})} for x1, x2 in recorded]
    pd.DataFrame(rows).to_csv(root / "hw_profiles" / "bench.csv", index=False)
    _replay_profile(root, "bench.csv")
    free_campaign.write_text(_experiment_text("replayed", "../hw_profiles/bench.yaml", 4,
                                              max_failed=200))
    result = run_campaign(free_campaign, report=False)

    trials = result.trials
    ok = trials[trials["status"] == "ok"]
    assert len(ok) == 4
    for _, row in ok.iterrows():
        assert (row["param.x1"], row["param.x2"]) in recorded
        expected = zdt1_values({"x1": row["param.x1"], "x2": row["param.x2"]})
        assert row["zdt_f2 [1]"] == pytest.approx(expected["zdt_f2"])
    others = trials[trials["status"] != "ok"]
    assert (others["status"] == "infeasible").all()
    assert (others["reason"] == "not in the recorded table bench.csv").all()
    assert all((x1, x2) not in recorded for x1, x2 in zip(others["param.x1"], others["param.x2"],
                                                          strict=True))


def test_a_campaigns_trials_table_replays_as_it_is(free_campaign: Path) -> None:
    first = run_campaign(free_campaign, evaluator=zdt1, report=True)
    space = load_experiment(free_campaign).space
    replay = ReplayEvaluator(first.run_dir / "trials.parquet", space)
    for _, row in first.trials.iterrows():
        # A stepped range's float arithmetic still finds the row.
        candidate = Candidate(params={"x1": row["param.x1"] * (1 - 1e-15), "x2": row["param.x2"]},
                              device_profile="any")
        expected = zdt1_values({"x1": row["param.x1"], "x2": row["param.x2"]})
        assert replay(candidate) == pytest.approx(expected)
    with pytest.raises(InfeasibleCandidate, match=r"not in the recorded table trials\.parquet"):
        replay(Candidate(params={"x1": 0.1, "x2": 0.0}))


def test_a_replay_table_must_cover_the_space(free_campaign: Path) -> None:
    root = free_campaign.parent.parent
    pd.DataFrame([{"x1": 0.0, "zdt_f1 [1]": 0.0}]).to_csv(root / "hw_profiles" / "t.csv",
                                                          index=False)
    _replay_profile(root, "t.csv")
    free_campaign.write_text(_experiment_text("uncovered", "../hw_profiles/bench.yaml", 1))
    with pytest.raises(SpecError, match=r"t.csv: no column for the search space's parameter "
                                        r"'x2' \(named 'x2' or 'param.x2'\)"):
        load_experiment(free_campaign)
    _replay_profile(root, "missing.csv")
    with pytest.raises(SpecError, match=r"bench.yaml: table: file not found: .*missing.csv"):
        load_experiment(free_campaign)


TINY_ONE = (TINY_SPACE.replace("width_mult: [0.5, 1.0]", "width_mult: [0.5]")
            .replace("    torch:\n      knobs:\n        num_threads: [1]\n", "")
            .replace("precisions: [fp32, int8]", "precisions: [fp32]")
            .replace("batch_sizes: [1, 4]", "batch_sizes: [1]")
            .replace("epochs: 2", "epochs: 1"))


@pytest.mark.usefixtures("ray_cluster")
def test_a_replay_device_beside_the_real_local_cpu_gives_two_fronts(tmp_path: Path) -> None:
    for folder in ("search_spaces", "hw_profiles", "experiments"):
        (tmp_path / folder).mkdir()
    assert "torch" not in TINY_ONE and "int8" not in TINY_ONE
    (tmp_path / "search_spaces" / "free.yaml").write_text(TINY_ONE)
    (tmp_path / "hw_profiles" / "local-cpu.yaml").write_text(LOCAL_CPU)
    recorded = {"arch.num_stages": 1, "arch.depth": 1, "arch.width_mult": 0.5,
                "arch.kernel_size": 3, "arch.expand_ratio": 2, "backend": "onnxruntime",
                "precision": "fp32", "batch_size": 1, "knob.intra_op_threads": 1,
                "accuracy": 0.5, "latency_p99_ms [ms]": 0.25, "process_rss_peak_mb": 10.0}
    pd.DataFrame([recorded]).to_csv(tmp_path / "hw_profiles" / "bench.csv", index=False)
    _replay_profile(tmp_path, "bench.csv")
    experiment = tmp_path / "experiments" / "mixed.yaml"
    experiment.write_text(_experiment_text(
        "mixed", "../hw_profiles/local-cpu.yaml, ../hw_profiles/bench.yaml", 1,
        # non_ok_on_front: two fronts are the point here, not the quality label, which a busy
        # machine's 0.2-second window can make "unstable" and so keep off the front.
        "measurement: {warmup_max_seconds: 0.1, min_iters: 5, min_seconds: 0.0, "
        "max_seconds: 0.2, precision: {p50: 50, p99: 50}, non_ok_on_front: true, "
        "second_looks: 0}\n"))

    result = run_campaign(experiment)

    storage = f"sqlite:///{result.run_dir / 'study.db'}"
    assert sorted(optuna.study.get_all_study_names(storage)) == ["mixed@bench", "mixed@local-cpu"]
    trials = result.trials
    done = trials[trials["status"] == "ok"]
    assert done.groupby("device").size().to_dict() == {"bench": 1, "local-cpu": 1}
    replayed = done[done["device"] == "bench"].iloc[0]
    assert replayed["accuracy [fraction]"] == 0.5
    assert replayed["latency_p99_ms [ms]"] == 0.25
    measured = done[done["device"] == "local-cpu"].iloc[0]
    assert measured["latency_p99_ms [ms]"] > 0 and measured["latency_p99_ms [ms]"] != 0.25
    assert set(result.pareto()["device"]) == {"bench", "local-cpu"}
    assert result.dashboard is not None and result.dashboard.is_file()


# -- specs and candidates --------------------------------------------------------------------------

def test_model_candidate_ids_are_unchanged_and_free_candidates_hold_only_their_parts() -> None:
    # Pinned before free parameters existed: a model candidate's id must never change.
    model = Candidate("cnn", {"num_stages": 1, "depth": 1, "width_mult": 0.5}, "fp32", 4,
                      "onnxruntime", {"intra_op_threads": 1}, "local-cpu")
    assert model.candidate_id == "a2fd54733f4b0ad2"
    assert model.arch_id == "acbf01f012f339c7"
    assert "params" not in model.to_dict()

    free = Candidate(params={"x1": 0.5}, device_profile="sim")
    assert free.to_dict() == {"device_profile": "sim", "params": {"x1": 0.5}}
    assert Candidate.from_dict(free.to_dict()) == free
    assert free.parameters() == {"x1": 0.5}
    assert model.parameters()["knob.intra_op_threads"] == 1


def test_spec_rules_for_free_parameters_declared_metrics_and_replay() -> None:
    free = yaml.safe_load(FREE_SPACE)
    assert [m.name for m in SearchSpace.model_validate(free).metric_specs()] == ["zdt_f1", "zdt_f2"]

    def problem(model: type[BaseModel], data: dict[str, object]) -> str:
        with pytest.raises(ValidationError) as info:
            model.model_validate(data)
        return str(info.value)

    assert "a search space needs a model (family and arch) or free parameters" in problem(
        SearchSpace, {**free, "parameters": {}})
    assert "unknown metric 'zdt_f1'" in problem(SearchSpace, {**free, "metrics": []})
    assert "metric 'accuracy' is built in" in problem(
        SearchSpace, {**free, "metrics": [{"name": "accuracy", "unit": "1",
                                           "direction": "maximize"}]})
    assert "free parameter name 'backend' is reserved" in problem(
        SearchSpace, {**free, "parameters": {"backend": [1]}})
    assert "a replay profile needs table" in problem(HardwareProfile,
                                                     {"name": "r", "kind": "replay"})
    assert "table is for replay profiles only" in problem(
        HardwareProfile, {**yaml.safe_load(LOCAL_CPU), "table": "t.csv"})
