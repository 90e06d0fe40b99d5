"""Kept passes of the model output check (dse.models.check_verdicts): an unchanged factory is not
built again by the next `dse validate`, any change to its sources is, a problem is never kept, and
`--recheck-models` builds regardless. A factory that counts its calls in a file tells how many
builds happened."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dse.models import output_check
from dse.models.check_verdicts import cache_folder
from dse.spec import ModelSpec

FACTORY = '''\
from pathlib import Path

import torch

CALLS = Path(__file__).with_name("calls.txt")


def build(arch):
    with CALLS.open("a") as calls:
        calls.write("built\\n")
    hidden = arch["hidden"]
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, hidden),
                                torch.nn.Linear(hidden, {classes}))
    return model, (1, 8, 8)
'''


def _write_factory(folder: Path, classes: int = 10, comment: str = "") -> None:
    (folder / "counted_factory.py").write_text(FACTORY.format(classes=classes) + comment)


def _builds(folder: Path) -> int:
    calls = folder / "calls.txt"
    return len(calls.read_text().splitlines()) if calls.exists() else 0


@pytest.fixture
def factory_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A factory module of its own on sys.path, and a dse cache of this test's own."""
    monkeypatch.setenv("DSE_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(output_check, "_CHECKED", {})  # a fresh process's memory
    yield tmp_path
    sys.modules.pop("counted_factory", None)


def _check(folder: Path, recheck: bool = False) -> list[str]:
    """One check as a new process makes it: nothing remembered in memory, the module re-read."""
    output_check._CHECKED.clear()
    sys.modules.pop("counted_factory", None)
    spec = ModelSpec.model_validate({"factory": "counted_factory:build", "dataset": "digits",
                                     "arch": {"hidden": [16]}})
    return output_check.model_output_problems(folder / "space.yaml", spec, recheck=recheck)


def test_a_pass_is_kept_until_a_source_changes(factory_folder: Path) -> None:
    _write_factory(factory_folder)
    assert _check(factory_folder) == [] and _builds(factory_folder) == 1
    assert len(list(cache_folder().glob("*.json"))) == 1
    assert _check(factory_folder) == [] and _builds(factory_folder) == 1  # kept: not built
    _write_factory(factory_folder, comment="# edited\n")  # any byte of the factory's source
    assert _check(factory_folder) == [] and _builds(factory_folder) == 2
    assert _check(factory_folder, recheck=True) == [] and _builds(factory_folder) == 3


def test_a_problem_is_never_kept(factory_folder: Path) -> None:
    _write_factory(factory_folder, classes=5)
    for builds in (1, 2):
        [problem] = _check(factory_folder)
        assert "not (batch, 10)" in problem and _builds(factory_folder) == builds
    assert not list(cache_folder().glob("*.json"))


def test_a_changed_library_version_drops_the_pass(factory_folder: Path) -> None:
    import json

    _write_factory(factory_folder)
    assert _check(factory_folder) == []
    [record_file] = cache_folder().glob("*.json")
    record = json.loads(record_file.read_text())
    assert "torch" in record["distributions"], record["distributions"]
    record["distributions"]["torch"] = "0.0.1"  # as if torch had been upgraded since
    record_file.write_text(json.dumps(record))
    assert _check(factory_folder) == [] and _builds(factory_folder) == 2


def test_dse_validate_recheck_models_builds_again(tmp_path: Path) -> None:
    _write_factory(tmp_path)
    space = tmp_path / "space.yaml"
    space.write_text("name: counted\nmodel:\n  factory: counted_factory:build\n  dataset: digits\n"
                     "  arch:\n    hidden: [16]\ndeployment:\n  backends:\n    onnxruntime: {}\n"
                     "  precisions: [fp32]\n  batch_sizes: [1]\nobjectives:\n"
                     "  - metric: accuracy\n  - metric: latency_p50_ms\n")
    env = {**os.environ, "DSE_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(tmp_path)}

    def validate(*options: str) -> None:
        done = subprocess.run([sys.executable, "-m", "dse.cli", "validate", str(space), *options],
                              capture_output=True, text=True, env=env, timeout=120)
        assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr
        assert done.stderr == ""  # libraries' warnings while building are kept off the terminal

    validate()
    validate()
    assert _builds(tmp_path) == 1
    validate("--recheck-models")
    assert _builds(tmp_path) == 2
