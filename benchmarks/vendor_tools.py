"""The runtimes' own benchmark tools, as ``vendor_harness.py`` runs them: each tool's command line
for one artifact with dse's settings (one thread, one stream, synchronous, fp32), and the parser
of its real output (fixtures in ``tests/fixtures/vendor_tools/``).

What each tool times, per iteration, and prints:

- OpenVINO's ``benchmark_app`` (the Python edition that ``pip install openvino`` ships): calls
  ``InferRequest.infer()`` on a request whose input tensors were set once, and keeps
  ``InferRequest.latency`` — the time OpenVINO's C++ side measured inside the call, without the
  call from Python. It prints the median of those (``Median:``) in microseconds with two
  decimals while the average is under 1 ms, else in milliseconds with two decimals.
- LiteRT's ``benchmark_litert_model`` (``ai_edge_litert.tools``, the ``litert-benchmark``
  command): runs a ``CompiledModel`` on the CPU accelerator (XNNPACK) on input and output buffers
  made once, timing each ``run_by_name`` call from Python (``time.perf_counter``); it prints the
  median (``Inference (median):``) in milliseconds with two decimals, whatever its size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


class ToolOutputError(ValueError):
    """A tool's output without the line the parser reads (the tool failed, or changed format)."""


@dataclass(frozen=True)
class ToolMedian:
    """A tool's median latency and the step it was printed in (both ms): the true median lies
    within half a step of the printed one."""

    median_ms: float
    step_ms: float


# "[ INFO ]    Median:        42.16 us" (benchmark_app; "ms" once its average reaches 1 ms).
_OPENVINO_MEDIAN = re.compile(r"^\[ INFO \]\s+Median:\s+([0-9.]+) (us|ms)\s*$", re.MULTILINE)
# "Inference (median):    0.02 ms" (benchmark_litert_model).
_LITERT_MEDIAN = re.compile(r"^Inference \(median\):\s+([0-9.]+) ms\s*$", re.MULTILINE)


def benchmark_app_command(tool: Path, model: Path, shape: tuple[int, ...],
                          iterations: int) -> list[str]:
    """``benchmark_app`` on ``model`` (ONNX) at the static ``shape``, with dse's OpenVINO runner
    settings: f32 inference precision, one thread, one stream, one synchronous request."""
    return [str(tool), "-m", str(model), "-d", "CPU", "-hint", "none", "-nstreams", "1",
            "-nthreads", "1", "-nireq", "1", "-api", "sync", "-infer_precision", "f32",
            "-shape", "[" + ",".join(str(size) for size in shape) + "]",
            "-niter", str(iterations)]


def litert_benchmark_command(tool: Path, model: Path, iterations: int,
                             warmup: int) -> list[str]:
    """``litert-benchmark`` on ``model`` (.tflite, its shapes fixed in the file), one thread on
    the CPU accelerator (XNNPACK)."""
    return [str(tool), "--model", str(model), "--num_threads", "1",
            "--num_runs", str(iterations), "--warmup_runs", str(warmup)]


def parse_benchmark_app(output: str) -> ToolMedian:
    """The median ``benchmark_app`` printed; ToolOutputError when there is none."""
    found = _OPENVINO_MEDIAN.search(output)
    if found is None:
        raise ToolOutputError(f"benchmark_app printed no 'Median:' latency line; its output "
                              f"ends: {_tail(output)}")
    value, unit = float(found.group(1)), found.group(2)
    return ToolMedian(value / 1000, 0.00001) if unit == "us" else ToolMedian(value, 0.01)


def parse_litert_benchmark(output: str) -> ToolMedian:
    """The median ``litert-benchmark`` printed; ToolOutputError when there is none."""
    found = _LITERT_MEDIAN.search(output)
    if found is None:
        raise ToolOutputError(f"litert-benchmark printed no 'Inference (median):' line; its "
                              f"output ends: {_tail(output)}")
    return ToolMedian(float(found.group(1)), 0.01)


def _tail(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return " | ".join(lines[-3:]) if lines else "(nothing)"
