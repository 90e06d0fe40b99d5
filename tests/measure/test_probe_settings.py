"""Probe settings from device profiles: every probe declares them, a profile sets them (checked when it
loads, through `dse validate` too), and the worker builds its probes with them."""

from __future__ import annotations

import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from dse.cli import app
from dse.core.exceptions import SpecError
from dse.farm.worker import DeviceWorker
from dse.measure.telemetry import PROBES, Window, make_probes, parse_entry
from dse.measure.telemetry.cpu_thermal import ThermalZonesProbe
from dse.measure.telemetry.cuda_memory import CudaMemoryProbe
from dse.measure.telemetry.jetson_power import JetsonPowerProbe
from dse.measure.telemetry.memory import ProcessMemoryProbe
from dse.measure.telemetry.nvml import NvmlProbe
from dse.measure.telemetry.tegrastats import TegrastatsProbe
from dse.spec import HardwareProfile, load_model
from tests.conftest import REPO

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

PROFILE = """\
name: box
kind: cpu
backends: [onnxruntime]
precisions: [fp32]
telemetry:
  - process_memory: {interval_s: 10}
  - thermal_zones: {zones: [cpu-thermal, x86_pkg_temp], interval_s: 0.05}
  - nvml: {index: 1}
  - cpufreq
  - rapl:
"""

runner = CliRunner()


def _profile_file(tmp_path: Path, text: str = PROFILE) -> Path:
    path = tmp_path / "hw.yaml"
    path.write_text(text)
    return path


# --- the registry ----------------------------------------------------------------------------------
# (What every probe declares, its settings among it, is dse.testing's probe suite:
# tests/measure/test_probe_suite.py.)

def test_profile_probe_names_are_the_registered_probes() -> None:
    # A fresh process that imports no probe module: reading the registry fills it.
    code = ("import sys\nfrom dse.plugins.probes import probe_names\n"
            "assert 'dse.measure.telemetry' not in sys.modules\nprint(' '.join(probe_names()))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == sorted(PROBES) and "nvml" in PROBES and len(PROBES) >= 12


def test_settings_reach_the_probes() -> None:
    memory, thermal, nvml, cuda, power, tegra = make_probes([
        {"process_memory": {"interval_s": 2}},
        {"thermal_zones": {"zones": ["cpu-thermal", "acpi.*"]}},
        {"nvml": {"index": 1, "interval_s": 0.1}},
        {"cuda_memory": {"device": 0}},
        {"jetson_power": {"rails": ["VDD_GPU_SOC"]}},
        {"tegrastats": {"executable": "/opt/bin/tegrastats"}},
    ])
    assert memory.interval_s == 2.0
    assert isinstance(thermal, ThermalZonesProbe)
    assert thermal.zones == ["cpu-thermal", "acpi.*"] and thermal.interval_s == 0.5
    assert isinstance(nvml, NvmlProbe) and (nvml.index, nvml.interval_s) == (1, 0.1)
    assert isinstance(cuda, CudaMemoryProbe) and cuda.device == 0
    assert isinstance(power, JetsonPowerProbe)
    assert power.total_source == "rail VDD_GPU_SOC (set in the profile)"
    assert isinstance(tegra, TegrastatsProbe) and tegra.executable == Path("/opt/bin/tegrastats")


@pytest.mark.parametrize(("entry", "message"), [
    ({"thermal_zones": {"zone": ["x"]}},
     "thermal_zones.zone: unknown setting (did you mean 'zones'?); allowed settings: interval_s "
     "(float, default 0.5), "
     "zones (list[str] or null, default null)"),
    ({"nvml": {"index": "first"}},
     "nvml.index: Input should be a valid integer, unable to parse string as an integer, found "
     "'first'; allowed settings: interval_s (float, default 0.02), index (int or null, default null)"),
    ({"rapl": {"interval_s": 0}}, "rapl.interval_s: Input should be greater than 0, found 0"),
    ({"jetson_power": {"rails": "VDD_IN"}}, "jetson_power.rails: Input should be a valid list"),
    ({"thermal_zones": {"zones": ["("]}},
     "thermal_zones.zones: zones[0] must be a zone type or a regular expression, got '('"),
    ({"rapl": 1}, "rapl: settings must be a mapping {setting: value}, found 1; allowed settings: "
                  "interval_s (float, default 1.0)"),
    ({"rapl": {}, "nvml": {}}, "expected a probe name or a one-key mapping {probe: {setting: value, "
                               "...}}; found a mapping with 2 keys ['rapl', 'nvml']"),
    ("nvmlx", "unknown probe 'nvmlx'; did you mean 'nvml'?"),
    ("sensors", "unknown probe 'sensors'; allowed: cpu_interference, cpu_throttle, cpufreq, "
                "cuda_memory, gpu_interference, jetson_clocks, jetson_power, nvml, process_memory, "
                "rapl, speed_canary, tegrastats, thermal_zones"),
    (3, "expected a probe name or a one-key mapping"),
])
def test_bad_entries_say_what_is_allowed(entry: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_entry(entry)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


# --- the Jetson rails setting -----------------------------------------------------------------------

def test_jetson_power_sums_the_rails_the_profile_names(tmp_path: Path) -> None:
    root = Path(shutil.copytree(FIXTURES / "jetson/orin-jp6", tmp_path / "orin"))
    default = JetsonPowerProbe(root)
    chosen = JetsonPowerProbe(root, rails=["VDD_CPU_GPU_CV", "VDD_SOC"])
    assert default.total_source == "rail VDD_IN (module input)"
    assert chosen.total_source == "sum of rails VDD_CPU_GPU_CV, VDD_SOC (set in the profile)"
    reading = chosen.read()
    assert reading["power.total"] == pytest.approx(reading["power.VDD_CPU_GPU_CV"]
                                                   + reading["power.VDD_SOC"])
    assert default.read()["power.total"] == pytest.approx(reading["power.VDD_IN"])


def test_jetson_power_rail_the_board_lacks_is_a_missing_metric(tmp_path: Path) -> None:
    root = Path(shutil.copytree(FIXTURES / "jetson/orin-jp6", tmp_path / "orin"))
    probe = JetsonPowerProbe(root, rails=["VDD_GPU_SOC"], interval_s=3600)
    assert probe.available() == (True, "")  # the rails still read, for the trace
    probe.start()
    trace = probe.stop()
    assert "power.total" not in trace.channels
    why = ("rail(s) VDD_GPU_SOC named in the profile not found; this board has: VDD_IN, "
           "VDD_CPU_GPU_CV, VDD_SOC")
    result = probe.summarize(trace, Window(0.0, 1.0, 1))
    assert result.missing == {"power_mean_w": why, "energy_per_inference_mj": why}


# --- profiles -----------------------------------------------------------------------------------------

def test_a_profile_keeps_its_entries_as_plain_data(tmp_path: Path) -> None:
    profile = load_model(_profile_file(tmp_path), HardwareProfile)
    assert profile.telemetry == [
        {"process_memory": {"interval_s": 10.0}},
        {"thermal_zones": {"zones": ["cpu-thermal", "x86_pkg_temp"], "interval_s": 0.05}},
        {"nvml": {"index": 1}},
        "cpufreq",
        {"rapl": {}},
    ]
    assert HardwareProfile.model_validate(profile.model_dump()) == profile
    assert pickle.loads(pickle.dumps(profile)) == profile  # it travels to Ray workers


def test_a_profile_lists_each_probe_once(tmp_path: Path) -> None:
    path = _profile_file(tmp_path, PROFILE + "  - thermal_zones: {zones: [acpitz]}\n")
    with pytest.raises(SpecError) as info:
        load_model(path, HardwareProfile)
    assert info.value.problems == [
        f"{path}: telemetry: probe(s) thermal_zones listed more than once; list each probe once, "
        "with all its settings in one entry"]


def test_validate_accepts_settings_and_names_the_bad_ones(tmp_path: Path) -> None:
    good = _profile_file(tmp_path)
    result = runner.invoke(app, ["validate", str(good)])
    assert result.exit_code == 0, result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(PROFILE.replace("{index: 1}", "{index: 1, device: 0}")
                   .replace("interval_s: 0.05", "interval_s: -1"))
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    # rich may wrap a long line; the check is on the words, joined back.
    text = " ".join(" ".join(lines).split())
    assert (f"{bad}: telemetry[1]: thermal_zones.interval_s: Input should be greater than 0, found "
            "-1; allowed settings: interval_s (float, default 0.5), zones (list[str] or null, "
            "default null)") in text
    assert (f"{bad}: telemetry[2]: nvml.device: unknown setting; allowed settings: interval_s "
            "(float, default 0.02), index (int or null, default null)") in text


def test_json_schema_describes_each_probes_settings() -> None:
    schema = HardwareProfile.model_json_schema()
    profile = yaml.safe_load(PROFILE)
    jsonschema.validate(profile, schema)
    profile["telemetry"][2] = {"nvml": {"index": 1, "device": 0}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(profile, schema)
    profile["telemetry"][2] = "nvmlx"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(profile, schema)


def test_shipped_profiles_still_validate() -> None:
    profiles = sorted((Path(__file__).resolve().parents[2] / "hw_profiles").glob("*.yaml"))
    result = runner.invoke(app, ["validate", *map(str, profiles)])
    assert result.exit_code == 0, result.output


# --- the worker ---------------------------------------------------------------------------------------

def test_the_worker_builds_its_probes_with_the_profile_settings(tmp_path: Path) -> None:
    profile = load_model(_profile_file(tmp_path), HardwareProfile)
    worker = DeviceWorker(profile, str(tmp_path / "cache"))
    # The profile's probes in its order; the interference check joins every worker's list, and
    # a CPU device's the machine's speed.
    assert [probe.name for probe in worker.probes] == [
        "process_memory", "thermal_zones", "nvml", "cpufreq", "rapl", "cpu_interference",
        "speed_canary"]
    memory, thermal = worker.probes[:2]
    assert isinstance(thermal, ThermalZonesProbe)
    assert thermal.zones == ["cpu-thermal", "x86_pkg_temp"] and thermal.interval_s == 0.05
    # The setting governs sampling: at one reading per 10 s, a short window holds only the
    # readings start() and stop() take.
    assert isinstance(memory, ProcessMemoryProbe) and memory.interval_s == 10.0
    memory.start()
    time.sleep(0.05)
    assert len(memory.stop().timestamps) == 2
