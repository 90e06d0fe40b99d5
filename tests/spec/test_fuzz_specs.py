"""Fuzzed spec files: every malformed one is rejected by `dse validate` with exit code 2, a message
naming the file (and the field it broke), and never a Python traceback. See tests/spec/malformed.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from dse.cli import app
from dse.spec.loading import read_yaml
from tests.spec.malformed import FuzzCase, fuzz_cases, run_case

CASES = list(fuzz_cases(60, 0))


def test_generation_is_reproducible_and_covers_every_kind() -> None:
    # Both drawn here, not against CASES (drawn at collection): Hypothesis also draws constants
    # from the modules loaded so far, and the tests run in between load more (jax, tvm).
    first, again = list(fuzz_cases(60, 0)), list(fuzz_cases(60, 0))
    assert [c.data for c in again] == [c.data for c in first]
    assert {c.kind for c in CASES} == {"search_space", "hw_profile", "experiment"}


def test_fuzzed_specs_are_rejected_cleanly(tmp_path: Path) -> None:
    failures, valid = [], 0
    for case in CASES:
        result = run_case(case, tmp_path)
        if result.valid:  # a mutation that happens to leave a valid file (an optional key deleted)
            valid += 1
            continue
        if not (result.rejected_cleanly and result.names_field):
            failures.append(f"{case.name} ({case.mutation}): exit {result.exit_code}, traceback "
                            f"{result.traceback}, names file {result.names_file}, names field "
                            f"{result.names_field}\n{result.output[-800:]}")
    assert not failures, "\n\n".join(failures)
    assert valid < len(CASES) // 2, "most mutations should break the file"


def _validate(tmp_path: Path, kind: str, text: str) -> tuple[int, str]:
    case = FuzzCase(kind=kind, name="regression.yaml", data=text.encode())
    result = run_case(case, tmp_path)
    assert not result.traceback, result.output
    return result.exit_code, result.output


def test_deep_nesting_is_a_spec_error_not_a_recursion_error(tmp_path: Path) -> None:
    # Regression: PyYAML's recursive parser raised RecursionError through `dse validate`.
    code, output = _validate(tmp_path, "search_space", "name: x\nmodel: " + "[" * 5000 + "]" * 5000)
    assert code == 2
    assert "regression.yaml" in output and "nested too deeply" in output


def test_missing_search_space_names_the_experiment_and_field(tmp_path: Path) -> None:
    # Regression: only the missing file was named, not the experiment or its search_space field.
    code, output = _validate(tmp_path, "experiment", "name: e\nsearch_space: ../nope.yaml\n"
                             "devices: [../hw_profiles/local-cpu.yaml]\nbudget: {trials: 2}\n")
    assert code == 2
    assert "nope.yaml: file not found" in output
    assert "regression.yaml: search_space:" in output


def test_a_key_written_twice_is_rejected(tmp_path: Path) -> None:
    # Regression: PyYAML kept the last of two equal keys silently.
    code, output = _validate(tmp_path, "hw_profile", "name: a\nkind: cpu\nname: b\n"
                             "backends: [onnxruntime]\nprecisions: [fp32]\n")
    assert code == 2
    assert "regression.yaml: line 3" in output and "'name' appears twice" in output


def test_merge_keys_may_override(tmp_path: Path) -> None:
    # YAML merge keys (`<<: *base`) legitimately override a merged key: not a duplicate.
    path = tmp_path / "merge.yaml"
    path.write_text("base: &b {a: 1, b: 2}\nchild:\n  <<: *b\n  b: 3\n")
    assert read_yaml(path)["child"] == {"a": 1, "b": 3}


@pytest.mark.parametrize("kind", ["search_space", "hw_profile", "experiment"])
def test_binary_junk_exits_2(tmp_path: Path, kind: str) -> None:
    path = tmp_path / f"{kind}.yaml"
    path.write_bytes(b"\xff\xfe\x00junk\x80")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    assert str(path) in result.output and "Traceback" not in result.output
