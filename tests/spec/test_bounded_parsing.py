"""Bounded spec parsing (issue 16): no spec file makes `dse validate` grow without limit, hang or print
a traceback. Alias bombs, huge scalars, oversize and special files are refused with one line
``FILE: FIELD: found ...; allowed: ...``, and so are experiments whose output folders cannot be
folders dse writes to; `dse run` refuses those before it starts anything.

The process tests run `dse validate` as a user meets it (tests/spec/hostile.py: a child process
under a timeout and a 2 GiB address-space limit, so a regression fails instead of taking the
machine); the others check the limits and the messages in-process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, Field, ValidationError

from dse.core.exceptions import SpecError
from dse.spec.loading import read_yaml
from tests.conftest import REPO
from tests.spec.hostile import hostile_cases, laughs, make_socket, run_validate
from tests.spec.malformed import prepare_folder

# A process that outlives this is hung; a test never waits on it to finish sooner.
HANG_S = 120.0


def _refusal(path: Path, text: str | bytes) -> str:
    """The one line read_yaml refuses ``text`` with."""
    if isinstance(text, str):
        text = text.encode()
    path.write_bytes(text)
    with pytest.raises(SpecError) as refused:
        read_yaml(path)
    assert len(refused.value.problems) == 1, refused.value.problems
    return refused.value.problems[0]


# --- the YAML limits, in-process ------------------------------------------------------------------

def test_an_alias_bomb_in_a_typed_field_is_refused_where_it_grows(tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    assert _refusal(path, "description: x\n" + laughs(9, where="name")) == (
        f"{path}: name[3]: found a value of 11,111 values with its aliases expanded on line 2; "
        f"allowed: at most 10,000 values in one file, an alias counting its value at each use")


def test_an_alias_inside_its_own_value_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    line = _refusal(path, "name: x\nobjectives: &a [1, *a]\n")
    assert line.startswith(f"{path}: objectives[1]: found an alias inside the value it names on "
                           f"line 2; allowed: ")


def test_aliases_count_toward_the_nesting_depth(tmp_path: Path) -> None:
    # Each anchor is 20 levels deep as written, 40 once the alias in it is expanded.
    path = tmp_path / "space.yaml"
    line = _refusal(path, f"x: &d0 {'[' * 20}1{']' * 20}\nname: {'[' * 20}*d0{']' * 20}\n")
    assert line.startswith(f"{path}: name[0][0]")
    assert line.endswith("found collections nested more than 32 levels deep (nested too deeply) "
                         "on line 2; allowed: at most 32 levels; a spec needs only a few")


def test_a_text_repeated_by_aliases_counts_its_characters(tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    line = _refusal(path, f"t: &t {'x' * 9_000}\ndescription: [{', '.join(['*t'] * 200)}]\n")
    assert line.startswith(f"{path}: description: found a value of 1,800,000 characters with its "
                           f"aliases expanded on line 2; allowed: at most 1,048,576 characters")


def test_an_integer_past_pythons_digit_limit_is_one_line_naming_field_and_line(
        tmp_path: Path) -> None:
    # Regression: int() raised ValueError (more than 4,300 digits) through `dse validate`.
    path = tmp_path / "space.yaml"
    assert _refusal(path, f"name: x\ntraining:\n  epochs: {'9' * 5000}\n") == (
        f"{path}: training.epochs: found a number of 5,000 characters on line 3; allowed: numbers "
        f"of at most 100 characters")


def test_composing_stops_at_the_value_limit(tmp_path: Path) -> None:
    # 400,000 values: refused on reaching the 10,001st, not after composing them all.
    path = tmp_path / "space.yaml"
    line = _refusal(path, "name: [" + "1," * 400_000 + "1]\n")
    assert line.startswith(f"{path}: name[9997]: found more than 10,000 values on line 1; "
                           f"allowed: at most 10,000 values in one file")


@pytest.mark.parametrize(("at_limit", "past_limit", "found"), [
    # The root mapping is the first of the 32 levels.
    (f"name: {'[' * 31}1{']' * 31}", f"name: {'[' * 32}1{']' * 32}", "nested more than 32"),
    (f"name: {'1' * 100}", f"name: {'1' * 101}", "a number of 101 characters"),
    (f"name: {'x' * 10_000}", f"name: {'x' * 10_001}", "a text of 10,001 characters"),
    # The root, the key and the list are 3 of the 10,000 values.
    ("name: [" + "1, " * 9_996 + "1]", "name: [" + "1, " * 9_997 + "1]", "more than 10,000 values"),
])
def test_each_limit_admits_its_bound_and_refuses_one_more(tmp_path: Path, at_limit: str,
                                                          past_limit: str, found: str) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(at_limit)
    assert "name" in read_yaml(path)
    assert found in _refusal(path, past_limit)


def test_a_file_over_one_mebibyte_is_refused_unparsed(tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    head = b"name: x\n#"
    path.write_bytes(head + b"#" * ((1 << 20) - len(head)))
    assert read_yaml(path) == {"name": "x"}
    assert _refusal(path, head + b"#" * (1 << 20)) == (
        f"{path}: (file): found a file of 1,048,585 bytes; allowed: at most 1,048,576 bytes")


def test_a_socket_or_a_directory_is_refused_by_its_type(tmp_path: Path) -> None:
    sock, folder = make_socket(tmp_path / "s.yaml"), tmp_path / "d.yaml"
    folder.mkdir()
    for path, kind in [(sock, "a socket"), (folder, "a directory")]:
        with pytest.raises(SpecError) as refused:
            read_yaml(path)
        assert refused.value.problems == [
            f"{path}: (file): found {kind}; allowed: a regular YAML file"]


# --- error text never formats a whole value --------------------------------------------------------

class _Bounded(BaseModel):
    n: int = Field(le=10)
    names: list[str] = []


def test_an_error_about_a_huge_integer_shows_its_size_not_its_digits(tmp_path: Path) -> None:
    # Regression: the error text was built with repr(), which refuses more than 4,300 digits.
    from dse.spec.errors import describe_validation_error

    with pytest.raises(ValidationError) as error:
        _Bounded.model_validate({"n": 10**5000})
    [line] = describe_validation_error(tmp_path / "f.yaml", _Bounded, error.value)
    assert line.endswith("found <an integer of about 5,001 digits>")


def test_a_shared_structure_is_shown_without_expanding_it() -> None:
    from dse.spec.errors import short_repr

    value: list[object] = ["lol"]
    for _ in range(40):  # 2**40 leaves once expanded; a handful of objects in memory
        value = [value, value]
    shown = short_repr(value)
    assert shown.startswith("[[[[...], [...]], ") and len(shown) <= 60


def test_a_file_gets_at_most_twenty_lines_and_a_count_of_the_rest(tmp_path: Path) -> None:
    from dse.spec.errors import describe_validation_error

    with pytest.raises(ValidationError) as error:
        _Bounded.model_validate({"n": 1, "names": list(range(50))})
    lines = describe_validation_error(tmp_path / "f.yaml", _Bounded, error.value)
    assert len(lines) == 21
    assert lines[-1] == f"{tmp_path / 'f.yaml'}: (file): 30 more problems not shown; fix the ones " \
                        f"above first"


def test_a_long_unknown_key_is_cut_in_the_field_and_the_message(tmp_path: Path) -> None:
    path = tmp_path / "hw_profiles" / "p.yaml"
    path.parent.mkdir()
    path.write_text(f"name: p\nkind: cpu\nbackends: [torch]\nprecisions: [fp32]\n? {'k' * 9_000}\n: 1\n")
    from dse.spec.loading import load_profile

    with pytest.raises(SpecError) as refused:
        load_profile(path)
    [line] = refused.value.problems
    assert "unknown key 'kkkk" in line and len(line) < 600


# --- output folders -------------------------------------------------------------------------------

@pytest.mark.parametrize(("where", "problem"), [
    ("{file}", "{file} is a regular file, not a folder"),
    ("{file}/sub", "{file}/sub cannot be created: {file} is a regular file, not a folder"),
    ("/dev/null", "/dev/null is a character device, not a folder"),
    ("{fifo}/sub/deeper", "{fifo}/sub/deeper cannot be created: {fifo} is a FIFO (named pipe), "
                          "not a folder"),
])
def test_a_folder_that_cannot_be_made_is_a_problem(tmp_path: Path, where: str,
                                                   problem: str) -> None:
    from dse.spec.filesystem import folder_problem

    blocker, fifo = tmp_path / "file", tmp_path / "fifo"
    blocker.write_text("x")
    os.mkfifo(fifo)
    folder = Path(where.format(file=blocker, fifo=fifo))
    assert folder_problem(folder) == problem.format(file=blocker, fifo=fifo)
    assert folder_problem(tmp_path / "new" / "deeper") is None
    assert folder_problem(tmp_path) is None


def test_a_folder_this_user_cannot_write_to_is_a_problem(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests run as root here, and root may write anywhere: os.access says what a user would get.
    from dse.spec.filesystem import folder_problem

    monkeypatch.setattr(os, "access", lambda *_args, **_kwargs: False)
    assert folder_problem(tmp_path / "runs") == (
        f"{tmp_path / 'runs'} cannot be created: {tmp_path} is not writable by this user")


@pytest.mark.parametrize("field", ["runs_dir", "dashboards_dir", "cache_dir"])
def test_load_experiment_names_the_folder_field(tiny_campaign: Path, field: str) -> None:
    from dse.app.api import load_experiment

    blocker = tiny_campaign.parent / "blocker"
    blocker.write_text("x")
    with tiny_campaign.open("a") as spec:
        spec.write(f"{field}: blocker\n")
    with pytest.raises(SpecError) as refused:
        load_experiment(tiny_campaign)
    [line] = refused.value.problems
    folder = blocker / "tiny-campaign" if field == "runs_dir" else blocker
    assert line.startswith(f"{tiny_campaign}: {field}: {folder}")
    assert line.endswith("; allowed: a folder this user can write to, or a path where one can be "
                         "created")


# --- a real `dse validate` / `dse run` process ------------------------------------------------------

def _lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip()]


def test_validate_refuses_bombs_huge_scalars_and_big_files_one_line_each(tmp_path: Path) -> None:
    folder = tmp_path / "search_spaces"
    folder.mkdir()
    files = {"bomb.yaml": laughs(9, where="name"),
             "int.yaml": f"name: x\ntraining: {{epochs: {'1' * 5000}}}\n",
             "big.yaml": "name: x\n#" + "#" * 50_000_000}
    for name, text in files.items():
        (folder / name).write_text(text)
    result = run_validate([folder / name for name in files], timeout_s=HANG_S)
    assert not result.traceback, result.output[-3000:]
    assert result.exit_code == 2
    lines = _lines(result.output)
    assert [line.split(": ")[0:2] for line in lines] == [
        [str(folder / "bomb.yaml"), "name[3]"], [str(folder / "int.yaml"), "training.epochs"],
        [str(folder / "big.yaml"), "(file)"]]
    assert all("; allowed: " in line for line in lines)


def test_validate_refuses_special_files_without_reading_them(tmp_path: Path) -> None:
    # Regression: a FIFO blocked `dse validate` for ever, and /dev/zero filled the memory.
    prepare_folder(tmp_path)
    fifo = tmp_path / "search_spaces" / "fifo.yaml"
    os.mkfifo(fifo)
    quickstart = (tmp_path / "experiments" / "quickstart.yaml").read_text()
    experiment = tmp_path / "experiments" / "zero.yaml"
    experiment.write_text(quickstart.replace("../search_spaces/cnn-digits.yaml", "/dev/zero"))
    result = run_validate([fifo, experiment], timeout_s=HANG_S)
    assert not result.traceback, result.output[-3000:]
    assert result.exit_code == 2
    assert _lines(result.output) == [
        f"{fifo}: (file): found a FIFO (named pipe); allowed: a regular YAML file",
        "/dev/zero: (file): found a character device; allowed: a regular YAML file",
        f"{experiment}: search_space: the search space above is invalid"]


def test_validate_reports_output_folders_that_are_files_or_devices(tmp_path: Path) -> None:
    # Regression: validate said ok, and `dse run` died of FileExistsError / NotADirectoryError.
    prepare_folder(tmp_path)
    quickstart = (tmp_path / "experiments" / "quickstart.yaml").read_text()
    (tmp_path / "taken").write_text("a file\n")
    fields = {"runs_dir": "/dev/null", "dashboards_dir": "../taken", "cache_dir": "../taken/cache"}
    files = []
    for field, value in fields.items():
        files.append(tmp_path / "experiments" / f"{field}.yaml")
        files[-1].write_text(f"{quickstart}{field}: {value}\n")
    result = run_validate(files, timeout_s=HANG_S)
    assert not result.traceback, result.output[-3000:]
    assert result.exit_code == 2
    lines = _lines(result.output)
    assert [line.split(": ")[:2] for line in lines] == [[str(f), f.stem] for f in files]
    assert all(line.endswith("allowed: a folder this user can write to, or a path where one can "
                             "be created") for line in lines)


def test_run_refuses_a_runs_dir_that_is_a_file_before_it_starts(tmp_path: Path) -> None:
    prepare_folder(tmp_path)
    text = (tmp_path / "experiments" / "custom-evaluator.yaml").read_text()
    experiment = tmp_path / "experiments" / "folder.yaml"
    experiment.write_text(text.replace("trials: 30", "trials: 2") + "runs_dir: ../taken\n")
    (tmp_path / "taken").write_text("a file\n")
    done = subprocess.run([sys.executable, "-m", "dse.cli", "run", str(experiment)], cwd=REPO,
                          capture_output=True, text=True, timeout=HANG_S)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    assert done.returncode == 2
    assert _lines(done.stderr) == [
        f"{experiment}: runs_dir: {tmp_path / 'taken' / 'custom-evaluator'} cannot be created: "
        f"{tmp_path / 'taken'} is a regular file, not a folder; allowed: a folder this user can "
        f"write to, or a path where one can be created"]
    assert not (tmp_path / "dashboards").exists()  # nothing was started, nothing written


def test_every_hostile_case_is_refused_by_one_validate_process(tmp_path: Path) -> None:
    # The benchmark's hostile cases (benchmarks/reliability_fuzz.py runs each in its own process).
    prepare_folder(tmp_path)
    cases = hostile_cases()
    files = [case.make(case.file(tmp_path)) for case in cases]
    result = run_validate(files, timeout_s=HANG_S)
    assert not result.traceback, result.output[-3000:]
    assert result.exit_code == 2
    lines = _lines(result.output)
    misses = []
    for case, path in zip(cases, files, strict=True):
        own = [line for line in lines if line.startswith(f"{path}: ")]
        if not own or not all(any(text in line for line in own) for text in case.expect):
            misses.append(f"{case.name}: {own[:3]}")
    assert not misses, "\n".join(misses)
