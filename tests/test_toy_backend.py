"""A backend is one registration: a toy backend written in this file only — declared, registered
and loaded through ``$DSE_PLUGINS`` — validates in YAML, is offered by the search space, and runs
in a real campaign (``dse run``: an embedded Ray, a device worker that builds, compiles and measures
it), with no other file of dse changed. Nothing in dse names it.

The toy runs the trained torch module in a copy of its own (``copies`` knob: how many forward
passes per batch, so that its knob shows in the latency), at fp32 on CPUs only.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dse.backends import Backend, BackendDeclaration, Capability, Runner, register_backend
from dse.exceptions import BuildError
from tests.conftest import LOCAL_CPU, REPO, TINY_SPACE

NAME = "toy_torch"
PLUGIN = f"{__name__}:register"


def _capability(precision: str, kind: str) -> Capability:
    if precision == "fp32" and kind == "cpu":
        return Capability(True, "the toy runner, fp32 on the CPU", "torch")
    return Capability(False, f"the toy runner has no {precision} on a {kind} device", "torch")


class ToyRunner(Runner):
    def __init__(self, module: Any, batch_size: int, copies: int, threads: int) -> None:
        self.module, self.batch_size, self.copies, self.threads = module, batch_size, copies, threads

    def run(self, x: np.ndarray) -> np.ndarray:
        import torch

        with torch.inference_mode():
            for _ in range(self.copies - 1):
                self.module(torch.from_numpy(x))
            out: np.ndarray = self.module(torch.from_numpy(x)).numpy()
        return out

    def describe(self) -> dict[str, str]:
        return {"backend": NAME, "backend_version": "0", "device": "cpu", "precision": "fp32",
                "threads": str(self.threads), "copies": str(self.copies)}

    def close(self) -> None:
        self.module = None


class ToyBackend(Backend):
    declaration = BackendDeclaration(
        name=NAME, artifact_format="torch", capability=_capability,
        knobs=frozenset({"threads", "copies"}), thread_knob="threads", libraries=("torch",),
        summary="a toy torch runner, defined in a test")

    def check_knob_values(self, knobs: Mapping[str, Any]) -> None:
        self.check_knobs(knobs)
        if knobs.get("copies", 1) not in (1, 2, 3):
            raise BuildError(f"knob 'copies' must be 1, 2 or 3, got {knobs['copies']!r}")

    def compile(self, artifact: Any, knobs: Mapping[str, Any], profile: Any,
                batch_size: int) -> Runner:
        import torch

        self.check_knob_values(knobs)
        if artifact.module is None:
            raise BuildError("the toy backend runs a torch module")
        threads = int(knobs.get("threads", 1))
        torch.set_num_threads(threads)
        module = copy.deepcopy(artifact.module).eval()
        return ToyRunner(module, batch_size, int(knobs.get("copies", 1)), threads)


def register() -> None:
    """The plugin's entry (``DSE_PLUGINS=tests.test_toy_backend:register``): registering at
    import would put the toy into the registry of the test process itself."""
    register_backend(ToyBackend)


SPACE = TINY_SPACE.replace(  # the toy in torch's place, beside onnxruntime
    "    torch:\n      knobs:\n        num_threads: [1]\n",
    f"    {NAME}:\n      knobs:\n        threads: [1]\n        copies: [1, 3]\n").replace(
    "width_mult: [0.5, 1.0]", "width_mult: [1.0]").replace(
    "batch_sizes: [1, 4]", "batch_sizes: [1]").replace(
    # The median: the half-second measurement window holds too few calls of a torch module for a
    # p99's interval on a busy machine.
    "metric: latency_p99_ms", "metric: latency_p50_ms")

PROFILE = LOCAL_CPU.replace("name: local-cpu", "name: toy-cpu").replace(
    "backends: [onnxruntime, torch]", f"backends: [{NAME}, onnxruntime]")

EXPERIMENT = """\
name: toy
search_space: ../search_spaces/toy.yaml
devices: [../hw_profiles/toy-cpu.yaml]
sampler: {name: grid, seed: 0}
budget: {trials: 4}
measurement: {warmup_max_seconds: 0.1, min_iters: 5, min_seconds: 0.0, max_seconds: 0.5,
              target_rel_ci: 0.05, non_ok_on_front: true}
"""


def _lay_out(root: Path) -> Path:
    for folder, name, text in [("search_spaces", "toy.yaml", SPACE),
                               ("hw_profiles", "toy-cpu.yaml", PROFILE),
                               ("experiments", "toy.yaml", EXPERIMENT)]:
        (root / folder).mkdir(exist_ok=True)
        (root / folder / name).write_text(text)
    return root / "experiments" / "toy.yaml"


def _dse(*args: str, plugins: str | None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "DSE_PLUGINS"}
    env["PYTHONPATH"] = str(REPO)
    if plugins is not None:
        env["DSE_PLUGINS"] = plugins
    return subprocess.run([sys.executable, "-m", "dse.cli", *args], capture_output=True,
                          text=True, timeout=900, cwd=REPO, env=env)


def test_without_the_plugin_the_toy_backend_is_unknown(tmp_path: Path) -> None:
    done = _dse("validate", str(_lay_out(tmp_path)), plugins=None)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"deployment.backends.{NAME}: found '{NAME}'; allowed: onnxruntime," in done.stderr


def test_a_bad_knob_value_of_the_toy_is_refused_at_validate(tmp_path: Path) -> None:
    experiment = _lay_out(tmp_path)
    space = tmp_path / "search_spaces" / "toy.yaml"
    space.write_text(SPACE.replace("copies: [1, 3]", "copies: [1, 7]"))
    done = _dse("validate", str(experiment), plugins=PLUGIN)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "knob 'copies' must be 1, 2 or 3, got 7" in done.stderr, done.stderr


def test_a_backend_defined_only_here_runs_in_a_real_campaign(tmp_path: Path) -> None:
    experiment = _lay_out(tmp_path)
    done = _dse("run", str(experiment), plugins=PLUGIN)  # validates first, as dse validate does
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    trials = pd.read_parquet(tmp_path / "experiments" / "runs" / "toy" / "trials.parquet")
    toy = trials[trials["param.backend"] == NAME]
    # The grid of 4: the toy at both knob values (fp32: its capability refuses int8, so the
    # space never offers it) and onnxruntime at fp32 and int8.
    measured = toy[toy["status"] == "ok"]
    shown = trials[["param.backend", "param.precision", "param.knob.copies", "status", "reason"]]
    assert set(measured["param.knob.copies"]) == {1, 3}, shown.to_string()
    assert set(measured["param.precision"]) == {"fp32"}
    assert measured["latency_p50_ms [ms]"].notna().all()
    assert set(trials["param.backend"]) == {NAME, "onnxruntime"}


def test_a_plugin_that_cannot_load_is_one_line(tmp_path: Path) -> None:
    done = _dse("validate", str(_lay_out(tmp_path)), plugins="tests.no_such_plugin")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [
        "DSE_PLUGINS: cannot load plugin 'tests.no_such_plugin': ModuleNotFoundError: No module "
        "named 'tests.no_such_plugin'"], done.stderr


def test_a_name_is_registered_once() -> None:
    from dse.parts.registry import Registry

    things: Registry[int] = Registry("thing", lambda item: f"item {item}")
    things.register("a", 1)
    with pytest.raises(ValueError, match="thing 'a' is already registered "
                                         r"\(by item 1\); a name is given once"):
        things.register("a", 2)
    assert things["a"] == 1
    with pytest.raises(KeyError, match="unknown thing 'b'; known: a"):
        things["b"]
