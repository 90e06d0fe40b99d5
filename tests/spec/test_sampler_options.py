"""The experiment's sampler options against what the chosen sampler reads (its declaration's
``options``) and against the budget: an option it ignores, or one that would spend the whole
budget before the search begins, is an error naming the field and what is allowed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dse.plugins.samplers import SAMPLERS, sampler_names
from dse.spec.cross_checks import SAMPLER_OPTIONS
from tests.conftest import REPO


def _sampler(tiny_campaign: Path, sampler: str, trials: int = 4) -> Path:
    text = tiny_campaign.read_text()
    assert "sampler: {name: random, seed: 1}" in text and "budget: {trials: 4}" in text
    tiny_campaign.write_text(text.replace("sampler: {name: random, seed: 1}", f"sampler: {sampler}")
                             .replace("budget: {trials: 4}", f"budget: {{trials: {trials}}}"))
    return tiny_campaign


def test_validate_refuses_an_option_the_sampler_does_not_read(tiny_campaign: Path) -> None:
    experiment = _sampler(tiny_campaign, "{name: tpe, population_size: 16}", trials=40)
    done = subprocess.run([sys.executable, "-m", "dse.cli", "validate", str(experiment)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"{experiment}: sampler.population_size: the tpe sampler has no population_size (trials "
        f"per generation); allowed: name, seed, startup_trials"]


@pytest.mark.parametrize(("sampler", "trials", "expected"), [
    ("{name: nsga2, startup_trials: 5}", 40,
     "sampler.startup_trials: the nsga2 sampler has no startup_trials (trials before its model "
     "steers); allowed: name, seed, population_size"),
    ("{name: random, startup_trials: 5}", 40,
     "sampler.startup_trials: the random sampler has no startup_trials (trials before its model "
     "steers); allowed: name, seed"),
    ("{name: nsga2, population_size: 5000}", 10,
     "sampler.population_size: 5,000 trials per generation is more than budget.trials (10): the "
     "nsga2 sampler would spend the whole budget before its search begins; allowed: at most 10, "
     "and well under it"),
    ("{name: surrogate, startup_trials: 11}", 10,
     "sampler.startup_trials: 11 trials before its model steers is more than budget.trials (10): "
     "the surrogate sampler would spend the whole budget before its search begins; allowed: at "
     "most 10, and well under it"),
])
def test_each_impossible_option_is_one_line(tiny_campaign: Path, sampler: str, trials: int,
                                            expected: str) -> None:
    from dse import validate_files

    experiment = _sampler(tiny_campaign, sampler, trials)
    assert validate_files([experiment]) == [f"{experiment}: {expected}"]


@pytest.mark.parametrize("sampler", ["{name: nsga3, population_size: 10}",
                                     "{name: gp, startup_trials: 10}",
                                     "{name: tpe, startup_trials: 3, seed: 2}",
                                     "{name: grid}"])
def test_options_a_sampler_reads_within_the_budget_are_valid(tiny_campaign: Path,
                                                             sampler: str) -> None:
    from dse import validate_files

    assert validate_files([_sampler(tiny_campaign, sampler, trials=10)]) == []


def test_every_sampler_declares_options_the_experiment_has() -> None:
    assert {name: sorted(SAMPLERS[name].options) for name in sampler_names()} == {
        "gp": ["startup_trials"], "grid": [], "nsga2": ["population_size"],
        "nsga3": ["population_size"], "random": [], "surrogate": ["startup_trials"],
        "tpe": ["startup_trials"]}
    assert all(SAMPLERS[name].options <= set(SAMPLER_OPTIONS) for name in sampler_names())
