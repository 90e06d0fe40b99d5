"""A backend/precision a device cannot run is never dropped silently: `dse validate` refuses a
device offered none of the space's combinations, naming each with the capability table's reason,
and says what it drops where some are left, exactly what the search then leaves out; `dse run`'s
own refusal gives the same reasons."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dse.backends.capabilities import supports
from dse.core.exceptions import SpecError
from tests.conftest import REPO, TINY_SPACE


def _campaign(tmp_path: Path, precisions: str) -> Path:
    """The tiny space with ``precisions`` on the shipped local-cpu profile."""
    for folder in ("search_spaces", "hw_profiles", "experiments"):
        (tmp_path / folder).mkdir()
    (tmp_path / "search_spaces" / "tiny.yaml").write_text(
        TINY_SPACE.replace("precisions: [fp32, int8]", f"precisions: {precisions}"))
    shutil.copy(REPO / "hw_profiles" / "local-cpu.yaml", tmp_path / "hw_profiles")
    experiment = tmp_path / "experiments" / "tiny.yaml"
    experiment.write_text("name: tiny\nsearch_space: ../search_spaces/tiny.yaml\n"
                          "devices: [../hw_profiles/local-cpu.yaml]\nbudget: {trials: 4}\n")
    return experiment


def test_fp8_on_local_cpu_is_refused_with_each_combination_and_its_reason(tmp_path: Path) -> None:
    experiment = _campaign(tmp_path, "[fp8]")
    done = subprocess.run([sys.executable, "-m", "dse.cli", "validate", str(experiment)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 2
    profile_list = "not among the profile's precisions (fp32, fp16, bf16, int8)"
    assert done.stderr.strip().splitlines() == [
        f"{experiment}: devices[0]: no backend/precision of the search space runs on 'local-cpu' "
        f"(a cpu device): onnxruntime/fp8: {profile_list}, and "
        f"{supports('onnxruntime', 'fp8', 'cpu')[1]}; torch/fp8: {profile_list}, and "
        f"{supports('torch', 'fp8', 'cpu')[1]}"]
    assert "CPUs have no fp8 arithmetic" in done.stderr


def test_fp16_on_local_cpu_drops_onnxruntime_with_a_notice(tmp_path: Path) -> None:
    from dse import validate_files

    experiment = _campaign(tmp_path, "[fp32, fp16]")
    notices: list[str] = []
    assert validate_files([experiment], on_notice=notices.append) == []
    assert notices == [f"{experiment}: local-cpu: onnxruntime/fp16 dropped: "
                       f"{supports('onnxruntime', 'fp16', 'cpu')[1]}"]


def test_the_run_path_refuses_with_the_same_reasons(tmp_path: Path) -> None:
    from dse.search.space import device_options
    from dse.spec import HardwareProfile, SearchSpace

    space = SearchSpace.model_validate(yaml.safe_load(TINY_SPACE.replace("[fp32, int8]", "[fp8]")))
    profile = HardwareProfile.model_validate(yaml.safe_load(
        (REPO / "hw_profiles" / "local-cpu.yaml").read_text()).copy()
        | {"precisions": ["fp32", "fp8"]})
    with pytest.raises(SpecError) as raised:
        device_options(space, profile)
    assert raised.value.problems == [
        f"space 'tiny': no backend/precision of the space runs on device 'local-cpu' (a cpu "
        f"device): onnxruntime/fp8: {supports('onnxruntime', 'fp8', 'cpu')[1]}; torch/fp8: "
        f"{supports('torch', 'fp8', 'cpu')[1]}"]


@pytest.mark.parametrize("name", sorted(p.stem for p in (REPO / "experiments").glob("*.yaml")))
def test_every_shipped_combination_is_offered_or_announced(name: str) -> None:
    """For each shipped experiment and device: the space's backend x precision combinations are
    exactly those the search is offered plus those a notice names."""
    from dse import load_experiment
    from dse.app.campaign_checks import dropped_combinations
    from dse.search.space import device_options

    experiment = load_experiment(REPO / "experiments" / f"{name}.yaml")
    notices = dropped_combinations(experiment)
    deployment = experiment.space.deployment
    for profile in experiment.devices:
        if deployment is None:
            continue
        evaluated = experiment.evaluator is not None or profile.kind == "replay"
        offered = device_options(experiment.space, profile, capabilities=not evaluated)
        for backend, precision in itertools.product(deployment.backends, deployment.precisions):
            announced = any(notice.startswith(f"{profile.name}: {what} dropped: ")
                            for notice in notices for what in (backend, f"{backend}/{precision}"))
            assert (precision in offered.get(backend, [])) != announced, (backend, precision)


def test_quickstart_says_what_it_drops() -> None:
    from dse import load_experiment
    from dse.app.campaign_checks import dropped_combinations

    notices = dropped_combinations(load_experiment(REPO / "experiments" / "quickstart.yaml"))
    assert [notice.split(" dropped: ")[0] for notice in notices] == [
        "local-cpu: onnxruntime/fp16", "local-cpu: onnxruntime/bf16", "local-cpu: torch/int8"]


def test_an_evaluated_device_is_not_narrowed_by_the_capability_table(tmp_path: Path) -> None:
    """A custom evaluator measures the candidates: only the profile's lists apply."""
    from dse import load_experiment
    from dse.app.campaign_checks import capability_problems, dropped_combinations

    experiment = _campaign(tmp_path, "[fp32, fp16]")
    loaded = load_experiment(experiment)
    assert dropped_combinations(loaded, evaluated=["local-cpu"]) == []
    assert capability_problems(loaded, evaluated=["local-cpu"]) == []
    assert dropped_combinations(loaded) != []
