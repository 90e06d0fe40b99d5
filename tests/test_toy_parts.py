"""A part is one registration: a toy backend, a toy telemetry probe and a toy model family written
in this file only — declared, registered and loaded through ``$DSE_PLUGINS`` — validate in YAML,
are offered by the search space, and run in a real campaign (``dse run``: an embedded Ray, a
device worker that trains the toy family, builds, compiles and measures it under the toy probe),
with no other file of dse changed. Nothing in dse names them.

The toy backend runs the trained torch module in a copy of its own (``copies`` knob: how many
forward passes per batch, so that its knob shows in the latency), at fp32 on CPUs only. The toy
probe counts its own readings over the window (a metric the search space declares); the toy
family is a two-layer perceptron on the digits. Loaded so, the toy backend and probe also pass
dse.testing's conformance suites (``tests/toy_plugin_suites.py``, run by
``tests/test_plugin_suite.py``).
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
from dse.core.exceptions import BuildError
from dse.measure.telemetry import Probe, ProbeResult, ProbeSettings, Trace, Window, register_probe
from dse.models import ModelFamily, register_family
from tests.conftest import LOCAL_CPU, REPO, TINY_SPACE

NAME = "toy_torch"
PROBE = "toy_reads"
FAMILY = "toy_mlp"
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

        if self.module is None:
            raise RuntimeError("the toy runner is closed")
        batch = torch.from_numpy(np.array(x, dtype=np.float32))  # any dtype, layout or flags
        with torch.inference_mode():
            for _ in range(self.copies - 1):
                self.module(batch)
            out: np.ndarray = self.module(batch).numpy()
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
        threads = knobs.get("threads", 1)
        if type(threads) is not int or threads < 1:
            raise BuildError(f"knob 'threads' must be an integer >= 1, got {threads!r}")
        if knobs.get("copies", 1) not in (1, 2, 3):
            raise BuildError(f"knob 'copies' must be 1, 2 or 3, got {knobs['copies']!r}")

    def compile(self, artifact: Any, knobs: Mapping[str, Any], profile: Any,
                batch_size: int) -> Runner:
        import torch

        self.check_knob_values(knobs)
        if artifact.format != "torch" or artifact.module is None:
            raise BuildError(f"the toy backend runs a torch module, got a {artifact.format!r} "
                             "artifact")
        threads = int(knobs.get("threads", 1))
        torch.set_num_threads(threads)
        module = copy.deepcopy(artifact.module).eval()
        return ToyRunner(module, batch_size, int(knobs.get("copies", 1)), threads)


class ToyProbeSettings(ProbeSettings):
    every: int = 1  # keep every n-th reading in the count


class ToyProbe(Probe):
    """Counts its own readings over the window: a sensor that is always there."""

    name = PROBE
    provides = ("toy_probe_reads",)
    units = {"reading": "1"}  # noqa: RUF012 - the base class's ClassVar
    settings_model = ToyProbeSettings

    def __init__(self, interval_s: float = 0.01, every: int = 1) -> None:
        super().__init__(interval_s)
        self.every = every

    def available(self) -> tuple[bool, str]:
        return True, ""

    def read(self) -> dict[str, float]:
        return {"reading": 1.0}

    def summarize(self, trace: Trace, window: Window) -> ProbeResult:
        return ProbeResult(metrics={"toy_probe_reads": float(len(trace.timestamps) // self.every)})


class ToyFamily(ModelFamily):
    """Flatten the 1x8x8 digit, one hidden layer of ``hidden`` units, ReLU, ten logits."""

    name = FAMILY
    arch_params = frozenset({"hidden"})
    input_shape = (1, 8, 8)
    num_classes = 10
    dataset = "digits"

    def validate(self, arch: Mapping[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(arch) - self.arch_params)
        hidden = arch.get("hidden", 16)
        if unknown or not isinstance(hidden, int) or not 1 <= hidden <= 256:
            raise ValueError(f"the toy family takes hidden (an integer in 1..256); got {dict(arch)}")
        return {"hidden": int(hidden)}

    def build(self, arch: Mapping[str, Any]) -> Any:
        import torch

        hidden = self.validate(arch)["hidden"]
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, hidden),
                                   torch.nn.ReLU(), torch.nn.Linear(hidden, 10))


def register() -> None:
    """The plugin's entry (``DSE_PLUGINS=tests.test_toy_parts:register``): registering at import
    would put the toys into the registries of the test process itself."""
    register_backend(ToyBackend)
    register_probe(ToyProbe)
    register_family(ToyFamily)


SPACE = TINY_SPACE.replace(  # the toy in torch's place, beside onnxruntime
    "    torch:\n      knobs:\n        num_threads: [1]\n",
    f"    {NAME}:\n      knobs:\n        threads: [1]\n        copies: [1, 3]\n").replace(
    """  family: cnn
  arch:
    num_stages: [1]
    depth: [1]
    width_mult: [0.5, 1.0]
    kernel_size: [3]
    expand_ratio: [2]
""", f"""  family: {FAMILY}
  arch:
    hidden: [16]
""").replace(
    "batch_sizes: [1, 4]", "batch_sizes: [1]").replace(
    "constraints:\n", """metrics:
  - {name: toy_probe_reads, unit: '1', direction: maximize, description: the toy probe's readings}
constraints:
  - toy_probe_reads >= 2
""").replace(
    # The median: the half-second measurement window holds too few calls of a torch module for a
    # p99's interval on a busy machine.
    "metric: latency_p99_ms", "metric: latency_p50_ms")

PROFILE = LOCAL_CPU.replace("name: local-cpu", "name: toy-cpu").replace(
    "backends: [onnxruntime, torch]", f"backends: [{NAME}, onnxruntime]").replace(
    "telemetry: [process_memory,", f"telemetry: [{{{PROBE}: {{every: 1}}}}, process_memory,")

# A disturbed window is re-measured after 0.1 s, not the default 1 s: this campaign is not about
# the interference policy (tests/measure/test_cpu_interference.py is), and the wait is idle time.
EXPERIMENT = """\
name: toy
search_space: ../search_spaces/toy.yaml
devices: [../hw_profiles/toy-cpu.yaml]
sampler: {name: grid, seed: 0}
budget: {trials: 4}
measurement: {warmup_max_seconds: 0.1, min_iters: 5, min_seconds: 0.0, max_seconds: 0.5,
              target_rel_ci: 0.05, precision: {p50: 50, p99: 50}, interference: {wait_s: 0.1},
              non_ok_on_front: true, second_looks: 0}
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


def test_without_the_plugin_the_toy_parts_are_unknown(tmp_path: Path) -> None:
    experiment = _lay_out(tmp_path)
    done = _dse("validate", str(experiment), plugins=None)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"deployment.backends.{NAME}: found '{NAME}'; did you mean 'torch'?" in done.stderr
    assert f"model.family: found '{FAMILY}'; allowed: cnn, transformer" in done.stderr
    profile = tmp_path / "hw_profiles" / "toy-cpu.yaml"
    profile.write_text(PROFILE.replace(f"backends: [{NAME}, onnxruntime]", "backends: [onnxruntime]"))
    done = _dse("validate", str(profile), plugins=None)
    assert done.returncode == 2 and f"unknown probe '{PROBE}'" in done.stderr, done.stderr


def test_bad_settings_of_the_toy_probe_and_family_are_refused_at_validate(tmp_path: Path) -> None:
    experiment = _lay_out(tmp_path)
    (tmp_path / "hw_profiles" / "toy-cpu.yaml").write_text(
        PROFILE.replace("{every: 1}", "{often: 2}"))
    done = _dse("validate", str(experiment), plugins=PLUGIN)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{PROBE}.often: unknown setting; allowed settings: interval_s (float, default 0.01), " \
           "every (int, default 1)" in done.stderr, done.stderr
    _lay_out(tmp_path)
    (tmp_path / "search_spaces" / "toy.yaml").write_text(SPACE.replace("hidden: [16]",
                                                                       "hidden: [16, 999]"))
    done = _dse("validate", str(experiment), plugins=PLUGIN)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "the toy family takes hidden (an integer in 1..256)" in done.stderr, done.stderr


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
    # The toy family was trained (an accuracy on the digits) and the toy probe read every window.
    ok = trials[trials["status"] == "ok"]
    assert len(ok) == 4 and set(ok["param.arch.hidden"]) == {16}, shown.to_string()
    assert (ok["accuracy [fraction]"] > 0.3).all(), ok["accuracy [fraction]"].to_string()
    assert (ok["toy_probe_reads [1]"] >= 2).all(), ok["toy_probe_reads [1]"].to_string()


def test_a_plugin_that_cannot_load_is_one_line(tmp_path: Path) -> None:
    done = _dse("validate", str(_lay_out(tmp_path)), plugins="tests.no_such_plugin")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [
        "DSE_PLUGINS: cannot load plugin 'tests.no_such_plugin': ModuleNotFoundError: No module "
        "named 'tests.no_such_plugin'"], done.stderr


def test_a_name_is_registered_once() -> None:
    from dse.plugins.registry import Registry

    things: Registry[int] = Registry("thing", (), lambda item: f"item {item}")
    things.register("a", 1)
    with pytest.raises(ValueError, match="thing 'a' is already registered "
                                         r"\(by item 1\); a name is given once"):
        things.register("a", 2)
    assert things["a"] == 1
    with pytest.raises(KeyError, match="unknown thing 'b'; known: a"):
        things["b"]
