"""The vendor benchmark tools that ``benchmarks/vendor_harness.py`` compares dse with: their output
parsed from fixtures of their real output, each installed tool run once on a real artifact with
the harness's command line, and the harness's rules for a deviation and a tool's resolution."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from tests.backends.conftest import POOL_BATCH, ArtifactFor
from tests.benchmark_scripts import load_benchmark

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "vendor_tools"
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def tools() -> ModuleType:
    return load_benchmark("vendor_tools")


def test_benchmark_app_median_in_microseconds(tools: ModuleType) -> None:
    found = tools.parse_benchmark_app((FIXTURES / "benchmark_app_sync_us.txt").read_text())
    assert found.median_ms == pytest.approx(0.04216)
    assert found.step_ms == pytest.approx(0.00001)


def test_benchmark_app_median_in_milliseconds(tools: ModuleType) -> None:
    # benchmark_app switches to ms (two decimals) once the average reaches 1 ms: here one
    # 437 ms stall among 500 calls of a 0.3 ms model did it.
    found = tools.parse_benchmark_app((FIXTURES / "benchmark_app_sync_ms.txt").read_text())
    assert found.median_ms == pytest.approx(0.32)
    assert found.step_ms == pytest.approx(0.01)


def test_litert_benchmark_median(tools: ModuleType) -> None:
    found = tools.parse_litert_benchmark((FIXTURES / "litert_benchmark.txt").read_text())
    assert found.median_ms == pytest.approx(0.02)
    assert found.step_ms == pytest.approx(0.01)


@pytest.mark.parametrize(("parser", "line"), [("parse_benchmark_app", "'Median:'"),
                                              ("parse_litert_benchmark",
                                               "'Inference (median):'")])
def test_output_without_a_median_is_a_one_line_error(tools: ModuleType, parser: str,
                                                     line: str) -> None:
    # The end of a failed run, as the tool leaves it: the error names the line it lacks and
    # quotes the output's last lines.
    with pytest.raises(tools.ToolOutputError,
                       match=rf"no {re.escape(line)}.*ends: .*Model file not") as err:
        getattr(tools, parser)("[Step 1/11] Parsing\nERROR Model file not found: x.onnx\n")
    assert "\n" not in str(err.value)


def _run(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout + done.stderr


@pytest.mark.parametrize("backend", ["openvino", "litert"])
def test_each_installed_tool_runs_the_harness_command_line(
        tools: ModuleType, backend: str, artifact_for: ArtifactFor) -> None:
    # The installed tool itself, on the test cnn's artifact as dse built it: the command line is
    # one it accepts and its output is one the parser reads.
    tool = VENV_BIN / {"openvino": "benchmark_app", "litert": "litert-benchmark"}[backend]
    if not tool.exists():
        pytest.skip(f"{tool.name} is not installed")
    artifact = artifact_for(backend, "fp32")
    assert artifact.path is not None
    commands: dict[str, Callable[[], list[str]]] = {
        "openvino": lambda: tools.benchmark_app_command(
            tool, artifact.path, (POOL_BATCH, *artifact.input_shape), 20),
        "litert": lambda: tools.litert_benchmark_command(tool, artifact.path, 20, 2)}
    command = commands[backend]()
    output = _run(command)
    if backend == "openvino":
        # The settings dse's runner is compiled with, as the tool reports them in effect.
        for setting in ("NUM_STREAMS: 1", "INFERENCE_NUM_THREADS: 1",
                        "INFERENCE_PRECISION_HINT: <Type: 'float32'>", "Count:            20"):
            assert setting in output
        found = tools.parse_benchmark_app(output)
    else:
        assert "Inference (avg):" in output and "(20 runs)" in output
        found = tools.parse_litert_benchmark(output)
    assert found.median_ms > 0


def test_deviation_and_the_tools_resolution() -> None:
    harness = load_benchmark("vendor_harness")
    tools = load_benchmark("vendor_tools")
    assert harness.deviation(1.05, 1.0) == pytest.approx(0.05)
    assert harness.deviation(0.9, 1.0) == pytest.approx(0.1)
    fine = [tools.ToolMedian(0.04216, 0.00001), tools.ToolMedian(0.0431, 0.00001)]
    assert harness.resolved(fine)
    # 0.02 ms printed in 0.01 ms steps: the true median is anywhere in 0.015-0.025 ms.
    assert not harness.resolved([tools.ToolMedian(0.02, 0.01), tools.ToolMedian(0.02, 0.01)])
    # A 0.48 ms median in 0.01 ms steps is known within 1%: resolved.
    assert harness.resolved([tools.ToolMedian(0.48, 0.01), tools.ToolMedian(0.47, 0.01)])
