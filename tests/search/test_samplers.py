"""Every sampler a campaign may name: Optuna's own, proposing valid candidates of a conditional
space; the grid covering it exactly once; constraints reaching the samplers that use them."""

from __future__ import annotations

import itertools
from pathlib import Path

import optuna
import pytest
import yaml

from dse.core.candidate import Candidate
from dse.core.exceptions import SpecError
from dse.plugins import SAMPLERS, sampler_names
from dse.search.experiment_checks import grid_problems
from dse.search.samplers.registered import DEFAULT_POPULATION, OPTUNA_STARTUP, make_sampler
from dse.search.space import device_options, suggest_candidate
from dse.search.study import open_experiment_studies, open_study
from dse.spec import HardwareProfile, SamplerSpec, SearchSpace, load_experiment_files
from tests.conftest import LOCAL_CPU, TINY_SPACE

PROFILE = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
TINY = SearchSpace.model_validate(yaml.safe_load(TINY_SPACE))
CONSTRAINT = "process_rss_peak_mb <= 100000"

# The tiny space with a stepped float range and an int range: 3 widths x (onnxruntime: fp32 or
# int8, 1 or 2 threads; torch: fp32 only, 1 thread) x 2 batch sizes = 30 candidates on local-cpu.
GRIDDED_TEXT = (TINY_SPACE
                .replace("width_mult: [0.5, 1.0]", "width_mult: {low: 0.5, high: 1.0, step: 0.25}")
                .replace("intra_op_threads: [1]", "intra_op_threads: {low: 1, high: 2}"))
GRIDDED = SearchSpace.model_validate(yaml.safe_load(GRIDDED_TEXT))


def _every_valid_candidate() -> set[str]:
    """The gridded space's candidates, enumerated by hand from its conditional structure."""
    ids = set()
    arch = {"num_stages": 1, "depth": 1, "kernel_size": 3, "expand_ratio": 2}
    deployments = [("onnxruntime", p, {"intra_op_threads": t}) for p in ("fp32", "int8")
                   for t in (1, 2)] + [("torch", "fp32", {"num_threads": 1})]
    for width, (backend, precision, knobs), batch in itertools.product(
            (0.5, 0.75, 1.0), deployments, (1, 4)):
        ids.add(Candidate("cnn", {**arch, "width_mult": width}, precision, batch, backend, knobs,
                          "local-cpu").candidate_id)
    return ids


def _study(name: str, seed: int, **settings: int) -> optuna.Study:
    """A study of the sampler ``name``, given those of ``settings`` it takes (the others would be
    refused: each sampler has its own)."""
    takes = SAMPLERS[name].setting_names()
    spec = SamplerSpec(name=name, seed=seed,
                       **{key: value for key, value in settings.items() if key in takes})
    return optuna.create_study(directions=["maximize", "minimize"],
                               sampler=make_sampler(spec, 0))


def test_the_builders_get_the_settings_as_the_sampler_s_own_model() -> None:
    tpe = make_sampler(SamplerSpec(name="tpe", seed=0, startup_trials=7), 0)
    assert isinstance(tpe, optuna.samplers.TPESampler) and tpe._n_startup_trials == 7
    assert make_sampler(SamplerSpec(name="tpe"), 0)._n_startup_trials == OPTUNA_STARTUP
    nsga2 = make_sampler(SamplerSpec(name="nsga2", population_size=6), 0)
    assert isinstance(nsga2, optuna.samplers.NSGAIISampler) and nsga2._population_size == 6
    assert make_sampler(SamplerSpec(name="nsga3"), 0)._population_size == DEFAULT_POPULATION
    with pytest.raises(SpecError, match=r"sampler\.population_size: the tpe sampler has no"):
        make_sampler(SamplerSpec(name="tpe", population_size=6), 0)


def _measure(study: optuna.Study, trial: optuna.Trial, candidate: Candidate,
             constrained: bool = True) -> None:
    """Synthetic results, told as the search loop tells them: torch dominates onnxruntime but
    breaks the memory bound."""
    torch = candidate.backend == "torch"
    accuracy = (0.95 if torch else 0.80) + 0.01 * candidate.arch["width_mult"]
    latency = (1.0 if torch else 2.0) + 0.1 * candidate.batch_size + (
        0.05 if candidate.precision == "fp32" else 0.0)
    if constrained:
        trial.set_constraint(CONSTRAINT, 500.0 if torch else -500.0)
    study.tell(trial, [accuracy, latency])


@pytest.mark.parametrize("name", sampler_names())
def test_each_sampler_proposes_valid_candidates_of_the_conditional_space(name: str) -> None:
    study = _study(name, seed=3, startup_trials=3, population_size=4)
    options = device_options(TINY, PROFILE)
    for _ in range(8):
        trial = study.ask()
        candidate = suggest_candidate(trial, TINY, PROFILE)
        assert candidate.precision in options[candidate.backend]
        assert candidate.arch["width_mult"] in (0.5, 1.0)
        assert candidate.batch_size in (1, 4)
        # Only the chosen backend's conditional parameters exist on the trial.
        other = "torch" if candidate.backend == "onnxruntime" else "onnxruntime"
        assert not [p for p in trial.params if p.startswith((f"{other}.", f"precision.{other}"))]
        _measure(study, trial, candidate)
    assert len(study.get_trials(states=[optuna.trial.TrialState.COMPLETE])) == 8
    # Constraints are read from set_constraint alone: no second, unnamed copy of them.
    assert all(t.constraints.keys() == {CONSTRAINT} for t in study.trials)


def test_the_grid_covers_every_valid_combination_once_then_repeats_without_stopping() -> None:
    expected = _every_valid_candidate()
    assert len(expected) == 30
    study = _study("grid", seed=1)
    proposed: list[str] = []
    while len(proposed) < len(expected):
        # Two devices ask before either tells: running trials are not proposed again.
        pair = [study.ask() for _ in range(2)]
        candidates = [suggest_candidate(trial, GRIDDED, PROFILE) for trial in pair]
        for trial, candidate in zip(pair, candidates, strict=True):
            _measure(study, trial, candidate)
        proposed.extend(c.candidate_id for c in candidates)
    assert len(proposed) == len(set(proposed)) == len(expected)
    assert set(proposed) == expected
    # Past the end of the grid (a budget above its size) proposals repeat, and telling them does
    # not raise (Optuna's own sampler would call study.stop(), which fails outside optimize()).
    trial = study.ask()
    assert suggest_candidate(trial, GRIDDED, PROFILE).candidate_id in expected
    _measure(study, trial, suggest_candidate(trial, GRIDDED, PROFILE))


def test_a_resumed_grid_goes_on_where_it_stopped(tmp_path: Path) -> None:
    spec = SamplerSpec(name="grid", seed=2)
    seen = []
    for run in range(2):
        study = open_study(tmp_path, "grid", GRIDDED, spec)
        for _ in range(15):
            trial = study.ask()
            candidate = suggest_candidate(trial, GRIDDED, PROFILE)
            _measure(study, trial, candidate)
            seen.append(candidate.candidate_id)
        assert len(study.trials) == 15 * (run + 1)
    assert set(seen) == _every_valid_candidate()


def test_the_grid_refuses_a_continuous_range_naming_the_file_and_field(
        tiny_campaign: Path) -> None:
    space = SearchSpace.model_validate(yaml.safe_load(
        TINY_SPACE.replace("width_mult: [0.5, 1.0]", "width_mult: {low: 0.5, high: 1.0}")))
    assert grid_problems(space, "spaces/tiny.yaml", "experiments/x.yaml") == [
        "spaces/tiny.yaml: model.arch.width_mult: the grid sampler (sampler.name in "
        "experiments/x.yaml) needs a step on this continuous range [0.5, 1.0]; add `step:` or "
        "choose another sampler"]
    assert grid_problems(GRIDDED, "s", "e") == []  # stepped floats and int ranges are fine

    space_file = tiny_campaign.parent.parent / "search_spaces" / "tiny.yaml"
    space_file.write_text(TINY_SPACE.replace("intra_op_threads: [1]",
                                             "intra_op_threads: {low: 1.0, high: 4.0}"))
    tiny_campaign.write_text(tiny_campaign.read_text().replace("name: random", "name: grid"))
    experiment = load_experiment_files(tiny_campaign)
    with pytest.raises(SpecError) as caught:
        open_experiment_studies(experiment)
    assert caught.value.problems == [
        f"{tiny_campaign.parent / '../search_spaces/tiny.yaml'}: "
        f"deployment.backends.onnxruntime.knobs.intra_op_threads: the grid sampler (sampler.name "
        f"in {tiny_campaign}) needs a step on this continuous range [1.0, 4.0]; add `step:` or "
        f"choose another sampler"]
    assert not experiment.run_dir.exists()  # refused before any study was made


def _infeasible_picks(name: str, constrained: bool, trials: int) -> int:
    """How often the second half of a seeded search proposes the dominant, infeasible torch."""
    study = _study(name, seed=0, startup_trials=6, population_size=6)
    picks = []
    for _ in range(trials):
        trial = study.ask()
        candidate = suggest_candidate(trial, TINY, PROFILE)
        _measure(study, trial, candidate, constrained)
        picks.append(candidate.backend == "torch")
    return sum(picks[trials // 2:])


@pytest.mark.parametrize(("name", "trials"), [("tpe", 20), ("nsga2", 20), ("nsga3", 20),
                                              ("gp", 16)])
def test_constraints_steer_the_samplers_that_support_them(name: str, trials: int) -> None:
    # Same seed, same results; only whether the memory bound is recorded differs. Unconstrained,
    # the sampler closes in on torch (it dominates); constrained, it learns torch is infeasible.
    unconstrained = _infeasible_picks(name, False, trials)
    constrained = _infeasible_picks(name, True, trials)
    assert unconstrained >= trials // 4, unconstrained
    assert constrained <= unconstrained // 2, (constrained, unconstrained)
