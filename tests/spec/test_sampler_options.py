"""The experiment's sampler settings against what the chosen sampler takes (its declaration's
``settings_model``) and against the budget (its ``counts_trials``): a key it does not take, a value
its model refuses, or one that would spend the whole budget before the search begins, is an error
naming the field and what is allowed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from dse.core.exceptions import SpecError
from dse.plugins import SAMPLERS, sampler_names
from dse.spec import ExperimentSpec, SamplerSpec
from tests.conftest import REPO


def _sampler(tiny_campaign: Path, sampler: str, trials: int = 4) -> Path:
    text = tiny_campaign.read_text()
    assert "sampler: {name: random, seed: 1}" in text and "budget: {trials: 4}" in text
    tiny_campaign.write_text(text.replace("sampler: {name: random, seed: 1}", f"sampler: {sampler}")
                             .replace("budget: {trials: 4}", f"budget: {{trials: {trials}}}"))
    return tiny_campaign


def test_validate_refuses_a_setting_the_sampler_does_not_take(tiny_campaign: Path) -> None:
    experiment = _sampler(tiny_campaign, "{name: tpe, population_size: 16}", trials=40)
    done = subprocess.run([sys.executable, "-m", "dse.cli", "validate", str(experiment)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"{experiment}: sampler.population_size: the tpe sampler has no population_size (trials "
        f"per generation: a setting of nsga2, nsga3); allowed: name, seed, startup_trials"]


def test_validate_prints_one_line_per_sampler_problem(tiny_campaign: Path) -> None:
    experiment = _sampler(tiny_campaign, "{name: nsga2, population_size: one, generations: 3}")
    done = subprocess.run([sys.executable, "-m", "dse.cli", "validate", str(experiment)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"{experiment}: sampler.generations: the nsga2 sampler has no generations; allowed: name, "
        f"seed, population_size",
        f"{experiment}: sampler.population_size: Input should be a valid integer, unable to parse "
        f"string as an integer; found 'one'; the nsga2 sampler's settings: population_size (int or "
        f"null, default null)"]


@pytest.mark.parametrize(("sampler", "trials", "expected"), [
    ("{name: nsga2, startup_trials: 5}", 40,
     "sampler.startup_trials: the nsga2 sampler has no startup_trials (trials before its model "
     "steers: a setting of gp, surrogate, tpe); allowed: name, seed, population_size"),
    ("{name: random, startup_trials: 5}", 40,
     "sampler.startup_trials: the random sampler has no startup_trials (trials before its model "
     "steers: a setting of gp, surrogate, tpe); allowed: name, seed"),
    ("{name: tpe, startup_trial: 5}", 40,
     "sampler.startup_trial: the tpe sampler has no startup_trial (did you mean "
     "'startup_trials'?); allowed: name, seed, startup_trials"),
    ("{name: gp, startup_trials: 0}", 40,
     "sampler.startup_trials: Input should be greater than or equal to 1; found 0; the gp "
     "sampler's settings: startup_trials (int or null, default null)"),
    ("{name: nsga3, population_size: 1}", 40,
     "sampler.population_size: Input should be greater than or equal to 2; found 1; the nsga3 "
     "sampler's settings: population_size (int or null, default null)"),
    ("{name: nsga2, population_size: 5000}", 10,
     "sampler.population_size: 5,000 trials per generation is more than budget.trials (10): the "
     "nsga2 sampler would spend the whole budget before its search begins; allowed: at most 10, "
     "and well under it"),
    ("{name: surrogate, startup_trials: 11}", 10,
     "sampler.startup_trials: 11 trials before its model steers is more than budget.trials (10): "
     "the surrogate sampler would spend the whole budget before its search begins; allowed: at "
     "most 10, and well under it"),
])
def test_each_impossible_setting_is_one_line(tiny_campaign: Path, sampler: str, trials: int,
                                             expected: str) -> None:
    from dse import validate_files

    experiment = _sampler(tiny_campaign, sampler, trials)
    assert validate_files([experiment]) == [f"{experiment}: {expected}"]


def test_a_key_the_sampler_lacks_and_a_start_above_the_budget_are_both_reported(
        tiny_campaign: Path) -> None:
    from dse import validate_files

    experiment = _sampler(tiny_campaign, "{name: tpe, startup_trials: 9, population_size: 4}")
    assert [line.split(": ")[1] for line in validate_files([experiment])] == [
        "sampler.population_size", "sampler.startup_trials"]


@pytest.mark.parametrize("sampler", ["{name: nsga3, population_size: 10}",
                                     "{name: gp, startup_trials: 10}",
                                     "{name: tpe, startup_trials: 3, seed: 2}",
                                     "{name: surrogate, startup_trials: null}",
                                     "{name: grid}"])
def test_settings_a_sampler_takes_within_the_budget_are_valid(tiny_campaign: Path,
                                                              sampler: str) -> None:
    from dse import validate_files

    assert validate_files([_sampler(tiny_campaign, sampler, trials=10)]) == []


def test_every_sampler_declares_its_settings() -> None:
    assert {name: list(SAMPLERS[name].setting_names()) for name in sampler_names()} == {
        "gp": ["startup_trials"], "grid": [], "nsga2": ["population_size"],
        "nsga3": ["population_size"], "random": [], "surrogate": ["startup_trials"],
        "tpe": ["startup_trials"]}
    for name in sampler_names():
        declared = SAMPLERS[name]
        assert declared.counts_trials == set(declared.setting_names())
        if declared.settings_model is not None:
            assert declared.settings_model.model_config.get("extra") == "forbid"
            assert declared.settings_model.model_config.get("frozen") is True
            assert all(field.description for field in
                       declared.settings_model.model_fields.values())


def test_the_options_are_the_sampler_s_settings_validated() -> None:
    spec = SamplerSpec.model_validate({"name": "tpe", "seed": 1, "startup_trials": "5"})
    assert spec.settings == {"startup_trials": "5"}  # as written
    assert spec.options is not None and spec.options.model_dump() == {"startup_trials": 5}
    assert SamplerSpec(name="nsga2").options.model_dump() == {"population_size": None}
    assert SamplerSpec(name="random").options is None
    # The constructor takes the settings as keywords, as the YAML block holds them.
    assert SamplerSpec(seed=2, startup_trials=4).options.model_dump() == {"startup_trials": 4}
    # A dump is the block as written, and validates back to the same spec.
    assert spec.model_dump() == {"name": "tpe", "seed": 1, "startup_trials": "5"}
    assert SamplerSpec.model_validate(spec.model_dump()) == spec
    assert spec != SamplerSpec(name="tpe", seed=1)
    with pytest.raises(SpecError, match=r"sampler\.population_size: the tpe sampler has no "):
        SamplerSpec(name="tpe", population_size=4).options  # noqa: B018 - the property raises


def test_the_schema_offers_every_sampler_s_settings() -> None:
    schema = ExperimentSpec.model_json_schema()
    sampler = schema["$defs"]["SamplerSpec"]
    assert list(sampler["properties"]) == ["name", "seed", "startup_trials", "population_size"]
    assert sampler["additionalProperties"] is False
    assert "dse list samplers" in sampler["properties"]["name"]["description"]
    assert sampler["properties"]["startup_trials"]["description"].endswith(
        "Taken by: gp, surrogate, tpe.")
    assert sampler["properties"]["population_size"]["description"].endswith(
        "Taken by: nsga2, nsga3.")
    experiment = yaml.safe_load((REPO / "experiments" / "quickstart.yaml").read_text())
    jsonschema.validate(experiment, schema)
    experiment["sampler"] = {"name": "nsga2", "population_size": 16}
    jsonschema.validate(experiment, schema)
    for wrong in ({"name": "nsga2", "population_size": 1}, {"name": "tpe", "generations": 3}):
        experiment["sampler"] = wrong
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(experiment, schema)
