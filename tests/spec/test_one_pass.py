"""`dse validate` and `load_experiment` report every problem in one pass: a structural error of the
search space does not hide its misspelt knob, nor a missing device file, nor the capability and
sampler checks that need the loaded experiment; an invalid experiment's own files are still read.
At most MAX_PROBLEMS lines a file, however many checks add to it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dse.core.exceptions import SpecError
from dse.spec.errors import MAX_PROBLEMS
from tests.conftest import REPO, TINY_SPACE

STRUCTURAL = ("epochs: 2", "epochs: two")
MISSPELT_KNOB = ("intra_op_threads: [1]", "intra_threads: [1]")


def _write(tiny_campaign: Path, space: str | None = None, experiment: str | None = None) -> Path:
    root = tiny_campaign.parent.parent
    if space is not None:
        (root / "search_spaces" / "tiny.yaml").write_text(space)
    if experiment is not None:
        tiny_campaign.write_text(experiment)
    return tiny_campaign.parent / "../search_spaces/tiny.yaml"  # as the experiment names it


def _edit(text: str, *edits: tuple[str, str]) -> str:
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    return text


def test_three_problems_of_three_kinds_in_one_run(tiny_campaign: Path) -> None:
    space = _write(tiny_campaign, space=_edit(TINY_SPACE, STRUCTURAL, MISSPELT_KNOB),
                   experiment=_edit(tiny_campaign.read_text(),
                                    ("local-cpu.yaml", "no-such-device.yaml")))
    done = subprocess.run([sys.executable, "-m", "dse.cli", "validate", str(tiny_campaign)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    missing = tiny_campaign.parent / "../hw_profiles/no-such-device.yaml"
    assert lines == [
        f"{space}: training.epochs: Input should be a valid integer, unable to parse string as an "
        f"integer; found 'two'",
        f"{space}: deployment.backends.onnxruntime.knobs.intra_threads: unknown knob of "
        f"onnxruntime; did you mean 'intra_op_threads' or 'inter_op_threads'?",
        f"{tiny_campaign}: search_space: the search space above is invalid",
        f"{missing}: file not found",
        f"{tiny_campaign}: devices[0]: the profile above is invalid"]


def test_checks_of_the_loaded_experiment_run_beside_the_space_registry_checks(
        tiny_campaign: Path) -> None:
    """A misspelt knob (the registries), a precision no device runs (the capability table) and a
    sampler option the sampler lacks: three later checks, each reported in the same pass."""
    from dse import load_experiment

    space = _write(tiny_campaign, space=_edit(TINY_SPACE, MISSPELT_KNOB, ("[fp32, int8]", "[fp8]")),
                   experiment=_edit(tiny_campaign.read_text(),
                                    ("{name: random, seed: 1}", "{name: tpe, population_size: 4}")))
    with pytest.raises(SpecError) as raised:
        load_experiment(tiny_campaign)
    problems = raised.value.problems
    assert [line.split(": ")[:2] for line in problems] == [
        [str(space), "deployment.backends.onnxruntime.knobs.intra_threads"],
        [str(tiny_campaign), "search_space"],
        [str(tiny_campaign), "sampler.population_size"],
        [str(tiny_campaign), "devices[0]"]]
    assert "onnxruntime/fp8: not among the profile's precisions (fp32, int8), and CPUs have no " \
           "fp8 arithmetic" in problems[3]


def test_an_invalid_experiment_still_has_its_files_read(tiny_campaign: Path) -> None:
    from dse.spec.loading import read_experiment_files

    space = _write(tiny_campaign, space=_edit(TINY_SPACE, STRUCTURAL),
                   experiment=_edit(tiny_campaign.read_text(), ("budget: {trials: 4}", "budget: 4")))
    found = read_experiment_files(tiny_campaign)
    assert found.experiment is None
    assert [line.split(": ")[:2] for line in found.problems] == [
        [str(tiny_campaign), "budget"], [str(space), "training.epochs"],
        [str(tiny_campaign), "search_space"]]
    assert found.problems[0].startswith(f"{tiny_campaign}: budget: expected a mapping of keys (")
    assert found.problems[0].endswith("trials); found 4")


def test_the_sections_of_an_invalid_space_that_are_valid_are_still_checked(tmp_path: Path) -> None:
    """`dse validate SPACE`: the model's arch checks and the knob checks run beside a broken
    objective."""
    from dse import validate_files

    folder = tmp_path / "search_spaces"
    folder.mkdir()
    path = folder / "space.yaml"
    path.write_text(_edit(TINY_SPACE, MISSPELT_KNOB, ("kernel_size: [3]", "kernel_size: [4]"),
                          ("- metric: accuracy", "- metric: 7")))
    problems = validate_files([path])
    assert [line.split(": ")[1] for line in problems] == [
        "objectives[0].metric", "model.arch.kernel_size",
        "deployment.backends.onnxruntime.knobs.intra_threads"]


def test_at_most_max_problems_lines_a_file_whatever_adds_them(tmp_path: Path) -> None:
    """Pydantic's lines are capped per file, and so is the sum with the registry checks."""
    from dse import validate_files

    folder = tmp_path / "search_spaces"
    folder.mkdir()
    path = folder / "space.yaml"
    knobs = "".join(f"        knob_{index}: [1]\n" for index in range(15))
    path.write_text(_edit(TINY_SPACE, ("        intra_op_threads: [1]\n", knobs),
                          ("- metric: accuracy", "- metric: 7")) + "".join(
        f"extra_{index}: 1\n" for index in range(15)))
    problems = validate_files([path])
    assert len(problems) == MAX_PROBLEMS + 1
    assert sum("unknown key 'extra_" in line for line in problems) == 15
    assert problems[-1] == (f"{path}: (file): 11 more problems not shown; fix the ones above "
                            f"first")
