"""A sampler defined in this file only, with a settings model of its own, loaded through
``$DSE_PLUGINS``: its settings are written as further keys of an experiment's ``sampler:`` block,
validated by its model (one line naming the field when refused, none when accepted), reach its
build function as an instance of that model, and show in ``dse list samplers`` and the schema. No
file of dse names it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from dse.plugins import SamplerDeclaration, register_sampler
from tests.conftest import REPO

NAME = "toy_anneal"
PLUGIN = f"{__name__}:register"
# What the build function was given, for the process that built it to print.
BUILT: list[dict[str, Any]] = []


class AnnealSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    warmup: int = Field(default=2, ge=1, title="random trials",
                        description="Random trials before the annealing starts.")
    schedule: Literal["linear", "geometric"] = Field(default="geometric",
                                                     description="How the temperature falls.")


def _build(settings: Any, seed: int) -> Any:
    import optuna

    BUILT.append({"seed": seed, "type": type(settings.options).__name__,
                  "options": settings.options.model_dump()})
    return optuna.samplers.RandomSampler(seed=seed)


def register() -> None:
    """The plugin's entry (``DSE_PLUGINS=tests.spec.test_plugin_sampler_settings:register``):
    registering at import would put the toy into the sampler registry of the test process."""
    register_sampler(SamplerDeclaration(NAME, _build, "a toy annealer, defined in a test",
                                        settings_model=AnnealSettings,
                                        counts_trials=frozenset({"warmup"})))


def _run(*args: str, plugins: str | None = PLUGIN) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "DSE_PLUGINS"}
    env["PYTHONPATH"] = str(REPO)
    if plugins is not None:
        env["DSE_PLUGINS"] = plugins
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env=env)


def _sampler(tiny_campaign: Path, sampler: str) -> Path:
    text = tiny_campaign.read_text()
    assert "sampler: {name: random, seed: 1}" in text and "budget: {trials: 4}" in text
    tiny_campaign.write_text(text.replace("sampler: {name: random, seed: 1}", f"sampler: {sampler}"))
    return tiny_campaign


# Run in a process with the plugin loaded: validate the experiment, build its sampler as a study
# would, and say what the build function got, the table row and the schema's sampler keys.
_LOAD_AND_BUILD = """
import json, sys
import dse
from dse.app.catalog import list_parts
from dse.search.samplers.registered import make_sampler
from dse.spec import ExperimentSpec
from tests.spec.test_plugin_sampler_settings import BUILT, NAME

problems = dse.validate_files([sys.argv[1]])
make_sampler(dse.load_experiment(sys.argv[1]).spec.sampler, 3)
row = next(row for row in list_parts("samplers") if row["sampler"] == NAME)
schema = ExperimentSpec.model_json_schema()["$defs"]["SamplerSpec"]["properties"]
print(json.dumps({"problems": problems, "built": BUILT, "row": row,
                  "schema": {key: schema[key].get("description") for key in schema}}))
"""


def test_the_plugin_s_own_settings_are_validated_and_reach_its_build(tiny_campaign: Path) -> None:
    experiment = _sampler(tiny_campaign, f"{{name: {NAME}, seed: 1, warmup: 3, schedule: linear}}")
    done = _run("-c", _LOAD_AND_BUILD, str(experiment))
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    assert found["problems"] == []
    # The seed is offset by the 3 trials "already run", as a resumed study's.
    assert found["built"] == [{"seed": 4, "type": "AnnealSettings",
                               "options": {"warmup": 3, "schedule": "linear"}}]
    assert found["row"]["settings (type, default)"] == (
        "`warmup` (int, default 2), `schedule` (linear or geometric, default geometric)")
    assert found["schema"]["warmup"] == ("Random trials before the annealing starts. Taken by: "
                                         f"{NAME}.")
    assert {"name", "seed", "startup_trials", "population_size", "schedule"} <= set(found["schema"])


def test_the_plugin_s_defaults_reach_its_build_when_nothing_is_set(tiny_campaign: Path) -> None:
    experiment = _sampler(tiny_campaign, f"{{name: {NAME}}}")
    done = _run("-c", _LOAD_AND_BUILD, str(experiment))
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["built"] == [
        {"seed": 3, "type": "AnnealSettings", "options": {"warmup": 2, "schedule": "geometric"}}]


@pytest.mark.parametrize(("sampler", "expected"), [
    (f"{{name: {NAME}, warmup: 0}}",
     "sampler.warmup: Input should be greater than or equal to 1; found 0; the toy_anneal "
     "sampler's settings: warmup (int, default 2), schedule (linear or geometric, "
     "default geometric)"),
    (f"{{name: {NAME}, schedule: cubic}}",
     "sampler.schedule: Input should be 'linear' or 'geometric'; found 'cubic'; the toy_anneal "
     "sampler's settings: warmup (int, default 2), schedule (linear or geometric, "
     "default geometric)"),
    (f"{{name: {NAME}, warmpu: 3}}",
     "sampler.warmpu: the toy_anneal sampler has no warmpu (did you mean 'warmup'?); allowed: "
     "name, seed, warmup, schedule"),
    (f"{{name: {NAME}, startup_trials: 3}}",
     "sampler.startup_trials: the toy_anneal sampler has no startup_trials (trials before its "
     "model steers: a setting of gp, surrogate, tpe); allowed: name, seed, warmup, schedule"),
    (f"{{name: {NAME}, warmup: 50}}",
     "sampler.warmup: 50 random trials is more than budget.trials (4): the toy_anneal sampler "
     "would spend the whole budget before its search begins; allowed: at most 4, and well under "
     "it"),
    ("{name: tpe, warmup: 3}",
     f"sampler.warmup: the tpe sampler has no warmup (random trials: a setting of {NAME}); "
     f"allowed: name, seed, startup_trials"),
])
def test_a_bad_setting_of_the_plugin_is_one_line_at_validate(tiny_campaign: Path, sampler: str,
                                                             expected: str) -> None:
    experiment = _sampler(tiny_campaign, sampler)
    done = _run("-m", "dse.cli", "validate", str(experiment))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [f"{experiment}: {expected}"]


def test_without_the_plugin_its_sampler_is_unknown(tiny_campaign: Path) -> None:
    experiment = _sampler(tiny_campaign, f"{{name: {NAME}, warmup: 3}}")
    done = _run("-m", "dse.cli", "validate", str(experiment), plugins=None)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"{experiment}: sampler.name: found '{NAME}'; allowed: " in done.stderr


class _Named(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = Field(default=0, description="A second seed.")


def test_a_declaration_that_cannot_work_is_refused_when_made() -> None:
    with pytest.raises(ValueError, match="declares seed, which every sampler's block already has"):
        SamplerDeclaration("x", _build, "x", settings_model=_Named)
    with pytest.raises(ValueError, match="counts_trials names warm, which its settings_model"):
        SamplerDeclaration("x", _build, "x", settings_model=AnnealSettings,
                           counts_trials=frozenset({"warm"}))
    with pytest.raises(ValueError, match="counts_trials names warmup"):
        SamplerDeclaration("x", _build, "x", counts_trials=frozenset({"warmup"}))
    with pytest.raises(TypeError, match="settings_model must be a pydantic model class"):
        SamplerDeclaration("x", _build, "x", settings_model=dict)
