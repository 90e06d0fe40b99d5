"""The device profiles shipped in hw_profiles/: each loads, agrees with the capability table, and
carries sourced peak figures wherever dse draws a roofline for a GPU."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dse.backends.capabilities import CAPABILITIES, supports_device
from dse.cli import app
from dse.spec import HardwareProfile, load_model
from tests.conftest import REPO

PROFILE_DIR = REPO / "hw_profiles"
PROFILE_PATHS = sorted(PROFILE_DIR.glob("*.yaml"))
EXPECTED = {"local-cpu", "local-cpu-compilers", "local-cpu-edge", "x86-server", "aarch64-server",
            "h100-sxm", "h200", "a100", "l4", "jetson-agx-orin", "jetson-orin-nx", "jetson-orin-nano",
            "jetson-xavier-nx"}

# Compute capability of the GPU each GPU/Jetson profile describes (NVIDIA's CUDA GPU list). A
# profile has no field for it, so the table's floors (bf16 >= 8.0, fp8 >= 8.9, torch_compile
# >= 7.0) are checked here against the precisions the profile lists.
COMPUTE_CAPABILITY = {"h100-sxm": 9.0, "h200": 9.0, "a100": 8.0, "l4": 8.9,
                      "jetson-agx-orin": 8.7, "jetson-orin-nx": 8.7, "jetson-orin-nano": 8.7,
                      "jetson-xavier-nx": 7.2}
GPU_PROBES = {"nvml", "cuda_memory", "jetson_power", "jetson_clocks", "tegrastats"}

runner = CliRunner()


@cache
def _profile(path: Path) -> HardwareProfile:
    return load_model(path, HardwareProfile)


def _runs(backend: str, precision: str, profile: HardwareProfile) -> bool:
    """Whether the table lets ``backend`` run ``precision`` on this profile's device, floors
    included where the profile's compute capability is known."""
    entry = CAPABILITIES[(backend, precision, profile.kind)]
    if not entry.supported:
        return False
    floor = entry.min_compute_capability
    return floor is None or floor <= COMPUTE_CAPABILITY[profile.name]


def _by_kind(*kinds: str) -> list[Path]:
    return [path for path in PROFILE_PATHS if _profile(path).kind in kinds]


paths = pytest.mark.parametrize("path", PROFILE_PATHS, ids=lambda path: path.stem)


def test_the_expected_profiles_ship() -> None:
    assert {path.stem for path in PROFILE_PATHS} == EXPECTED


@paths
def test_profile_loads_and_is_named_after_its_file(path: Path) -> None:
    assert _profile(path).name == path.stem


def test_profile_names_are_unique() -> None:
    names = [_profile(path).name for path in PROFILE_PATHS]
    assert len(set(names)) == len(names)


@paths
def test_every_listed_precision_runs_on_a_listed_backend(path: Path) -> None:
    profile = _profile(path)
    orphans = [precision for precision in profile.precisions
               if not any(CAPABILITIES[(backend, precision, profile.kind)].supported
                          for backend in profile.backends)]
    assert orphans == [], f"no listed backend runs {orphans} on a {profile.kind} device"


@paths
def test_every_listed_backend_runs_a_listed_precision(path: Path) -> None:
    profile = _profile(path)
    # A model's entries or a language model's (a backend of language models only has no other).
    idle = [backend for backend in profile.backends
            if not any(CAPABILITIES[(backend, precision, profile.kind)].supported
                       or supports_device(backend, precision, profile.kind, None,
                                          generative=True)[0]
                       for precision in profile.precisions)]
    assert idle == [], f"{idle} run none of {profile.precisions} on a {profile.kind} device"


@pytest.mark.parametrize("path", _by_kind("cuda", "jetson"), ids=lambda path: path.stem)
def test_gpu_precisions_are_exactly_what_its_compute_capability_allows(path: Path) -> None:
    """No precision below its floor (fp8 on an A100, bf16 on Xavier), none the GPU could run left
    out, and every backend useful at that compute capability."""
    profile = _profile(path)
    allowed = [precision for precision in ("fp32", "fp16", "bf16", "int8", "fp8")
               if any(_runs(backend, precision, profile) for backend in profile.backends)]
    assert profile.precisions == allowed
    idle = [backend for backend in profile.backends
            if not any(_runs(backend, precision, profile) for precision in profile.precisions)]
    assert idle == []


@paths
def test_power_mode_is_one_of_the_power_modes(path: Path) -> None:
    profile = _profile(path)
    if profile.kind != "cpu":
        assert profile.power_mode is not None, "a GPU profile names the mode it is measured in"
    if profile.power_mode is not None:
        assert profile.power_mode in profile.power_modes
    assert len(set(profile.power_modes)) == len(profile.power_modes)


@paths
def test_telemetry_matches_the_device_kind(path: Path) -> None:
    profile = _profile(path)
    probes = set(profile.telemetry)
    assert "process_memory" in probes
    if profile.kind == "cuda":
        assert "nvml" in probes
    elif profile.kind == "jetson":
        assert "jetson_power" in probes
        assert "nvml" not in probes, "Jetson GPUs are not NVML devices"
    else:
        assert not probes & GPU_PROBES


@paths
def test_peak_figures_are_present_and_sourced(path: Path) -> None:
    profile = _profile(path)
    if profile.kind != "cpu":
        assert profile.peak_gflops is not None
        assert profile.peak_bandwidth_gbs is not None
    if profile.peak_gflops or profile.peak_bandwidth_gbs or profile.peak_gflops_by_precision:
        assert profile.peak_source.strip(), "peak figures need a peak_source"
    by_precision = profile.peak_gflops_by_precision
    assert "fp32" not in by_precision, "the fp32 figure is peak_gflops"
    assert set(by_precision) <= set(profile.precisions)
    if profile.peak_gflops is not None:
        # A figure typed in TFLOPS instead of GFLOP/s would fall below the fp32 one.
        low = {p: value for p, value in by_precision.items() if value < profile.peak_gflops}
        assert low == {}


@pytest.mark.parametrize("path", [p for p in PROFILE_PATHS
                                  if not p.stem.startswith("local-cpu")],
                         ids=lambda path: path.stem)
def test_header_says_what_it_is_and_how_to_join_it(path: Path) -> None:
    header = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    assert len(header) >= 2, "a header comment says what the device is"
    assert f"dse worker --profile hw_profiles/{path.name} --address" in "\n".join(header)


def test_dse_validate_accepts_every_profile() -> None:
    result = runner.invoke(app, ["validate", *map(str, PROFILE_PATHS)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "ok"
