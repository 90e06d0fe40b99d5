"""Does dse time what each runtime's own benchmark tool times, on the same artifact and settings?

For every backend whose vendor tool is installed here (``vendor_tools.py``: OpenVINO's
``benchmark_app``, LiteRT's ``litert-benchmark``), two models go through dse's own build path
(``dse.artifacts.build_artifact``: the ONNX export, the LiteRT conversion) — the quickstart CNN (the
``cnn`` family's default arch, 1x8x8 input: overhead-dominated) and a ResNet-like 3x32x32 network
built with torch (compute-dominated) — at batch 1 and a larger batch. Both sides run fp32 on one
thread, one stream, synchronously. dse's figure is the p50 of ``dse.measure_latency`` over the
runner's timed call (the real backend's ``compile``, then ``Runner.bound_call``) on the clock the
tool reports, the tool's the median it prints. They run interleaved, ROUNDS rounds of dse then the
tool for every case. ``dev`` is |r - 1| for r the median over rounds of the round's dse / tool
ratio: the two sides of a round run seconds apart, and this VM's speed moves by up to a third
between rounds (both sides' figures move with it), which pairing cancels and separate medians do
not. Each side's median over the rounds is printed too.

What the comparison can and cannot show (see ``vendor_tools.py`` for what each tool times):

- ``benchmark_app`` reports OpenVINO's own latency of each ``infer()`` (``InferRequest.latency``),
  measured on its C++ side: the call from Python into OpenVINO is not in it. dse reads the same
  clock after each of its timed calls (``Runner.runtime_clock``: ``runtime_clock_p50_ms`` in a
  trial's provenance), and that p50 is what is compared; dse's own figure, on the host clock,
  holds the call from Python too (``call_us``: the median of host less runtime clock, per call),
  and its deviation from the tool is ``dev_caller``.
- ``litert-benchmark`` prints milliseconds with two decimals: a median of 0.02 ms is anything from
  0.015 to 0.025 ms. A case whose tool step is wider than 5% of its median is printed but left out
  of the maximum (``n/r``, not resolved).
- Not compared, as no benchmark tool of theirs installs here: ONNX Runtime's
  ``onnxruntime_perf_test`` and ExecuTorch's ``executor_runner`` are built from their source
  trees; neither the PyPI wheels (onnxruntime, executorch) nor Debian 12's archive (which has
  no ONNX Runtime, ExecuTorch or OpenVINO package) ship them. Nor does a command-line benchmark
  tool of TVM, XLA or torch install with their wheels.

The machine's busy share over the run is read from /proc/stat, with this benchmark's own CPU
(itself and the tools it ran) told apart from other processes'.

Run it holding the machine's benchmark lock:
``flock /tmp/dse-bench.lock .venv/bin/python benchmarks/vendor_harness.py [--quick] [--rounds N]``
(``--quick``: the quickstart CNN at batch 1 only, QUICK_ROUNDS round of shorter windows). Ends
with ``BENCH vendor_harness_max_dev`` (the largest ``dev`` over the resolved cases; target <=
0.05) and ``BENCH vendor_harness_max_dev_caller`` (the same on dse's host clock, the call from
Python included).
``vendor_part(quick)`` runs the same from another benchmark and returns the first.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# benchmarks/ is scripts, not a package: the tools' module is found beside this file however it
# was loaded.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from vendor_tools import (
    ToolMedian,
    benchmark_app_command,
    litert_benchmark_command,
    parse_benchmark_app,
    parse_litert_benchmark,
)

VENV_BIN = Path(sys.executable).parent
TOOLS = {"openvino": VENV_BIN / "benchmark_app", "litert": VENV_BIN / "litert-benchmark"}
ROUNDS, QUICK_ROUNDS = 9, 1
BATCHES = (1, 32)
BENCH_NAMES = ("vendor_harness_max_dev", "vendor_harness_max_dev_caller")
# Seconds each side times per case and round (the tool's iterations are sized from dse's p50).
WINDOW_S, QUICK_WINDOW_S = 1.0, 0.3
TARGET = 0.05
# A tool median printed in steps wider than this share of it cannot show a 5% deviation.
RESOLVED_HALF_STEP = TARGET / 2
KNOBS = {"openvino": {"num_threads": 1, "performance_hint": "latency", "num_streams": 1},
         "litert": {"num_threads": 1, "xnnpack": True}}


@dataclass
class Case:
    """One backend x model x batch, and its figures by round (ms)."""

    backend: str
    model: str
    batch: int
    runner: Any = None
    example: Any = None
    tool_model: Path | None = None
    dse_ms: list[float] = field(default_factory=list)  # the host clock
    runtime_ms: list[float] = field(default_factory=list)  # the runtime's clock, where it has one
    tool: list[ToolMedian] = field(default_factory=list)
    call_ms: list[float] = field(default_factory=list)  # host less runtime clock, per call

    @property
    def label(self) -> str:
        return f"{self.backend} {self.model} b{self.batch}"


def deviation(dse_ms: float, tool_ms: float) -> float:
    """|dse / tool - 1|."""
    return abs(dse_ms / tool_ms - 1)


def resolved(medians: list[ToolMedian]) -> bool:
    """Whether the tool printed its median finely enough to show a deviation of TARGET."""
    median = statistics.median(m.median_ms for m in medians)
    return max(m.step_ms for m in medians) / 2 <= RESOLVED_HALF_STEP * median


# ------------------------------------------------------------------------------------- the models
def _resnet() -> Any:
    """A ResNet-like network for 3x32x32 images: a 16-channel stem, three stages of one basic
    block each (16, 32, 64 channels; the last two halve the resolution), pooling and a linear."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
            self.skip = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.body(x) + self.skip(x))

    return nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                         Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def _models() -> dict[str, tuple[Any, tuple[int, ...]]]:
    """Model name -> (an eval-mode module with seeded weights, its sample shape)."""
    import torch

    from dse.models import get_family
    from dse.models.cnn import DEFAULT_ARCH

    family = get_family("cnn")
    torch.manual_seed(0)
    cnn = family.build(DEFAULT_ARCH).eval()
    torch.manual_seed(0)
    return {"cnn": (cnn, tuple(family.input_shape)), "resnet": (_resnet().eval(), (3, 32, 32))}


def _cases(backends: list[str], cache_dir: Path, quick: bool) -> list[Case]:
    """Every case (quick: the quickstart CNN at batch 1), its artifact built by dse and compiled
    by the backend (one thread)."""
    import numpy as np

    from dse.accuracy.cache import TrainedModel
    from dse.artifacts import ArtifactCache, build_artifact
    from dse.backends import get_backend
    from dse.core.candidate import Candidate
    from dse.spec import HardwareProfile

    profile = HardwareProfile(name="vendor-harness", kind="cpu", backends=backends,
                              precisions=["fp32"], max_threads=1)
    cache = ArtifactCache(cache_dir)
    cases = []
    models = _models()
    if quick:
        models = {"cnn": models["cnn"]}
    batches = BATCHES[:1] if quick else BATCHES
    for model, (module, shape) in models.items():
        # Untrained weights: the latency of fp32 kernels does not depend on their values.
        trained = TrainedModel(module, math.nan, 0.0, False, f"vendor-harness-{model}-1", shape,
                               None)
        images = np.random.default_rng(0).random((max(BATCHES), *shape), dtype=np.float32)
        for backend in backends:
            for batch in batches:
                candidate = Candidate("cnn", {}, "fp32", batch, backend, KNOBS[backend])
                artifact, _ = build_artifact(candidate, trained, cache, images[:8])
                runner = get_backend(backend).compile(artifact, KNOBS[backend], profile, batch)
                cases.append(Case(backend, model, batch, runner, images[:batch], artifact.path))
    return cases


# ------------------------------------------------------------------------------------ the windows
def _dse_round(case: Case, window_s: float) -> None:
    """dse's p50 (ms) of the case's timed call, as a campaign times it (one block), on the host
    clock and, where the runner keeps one, on the runtime's own clock of the same calls."""
    from dse import measure_latency

    call = case.runner.bound_call(case.example)
    stats = measure_latency(call, min_seconds=window_s / 2, max_seconds=window_s,
                            warmup_max_seconds=0.2, blocks=1, required_quantiles=(0.5,),
                            runtime_clock=case.runner.runtime_clock(call))
    case.dse_ms.append(float(stats.p50_ms))
    if not math.isnan(stats.runtime_p50_ms):
        case.runtime_ms.append(stats.runtime_p50_ms)
        case.call_ms.append(stats.runtime_overhead_us / 1e3)


def _tool_median(case: Case, window_s: float) -> ToolMedian:
    """The tool's median, over as many iterations as fill ``window_s`` at dse's p50."""
    assert case.tool_model is not None
    iterations = max(50, min(20_000, round(window_s * 1000 / case.dse_ms[0])))
    if case.backend == "openvino":
        command = benchmark_app_command(TOOLS["openvino"], case.tool_model,
                                        (case.batch, *case.example.shape[1:]), iterations)
    else:
        command = litert_benchmark_command(TOOLS["litert"], case.tool_model, iterations,
                                           max(10, iterations // 10))
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"{Path(command[0]).name} failed ({done.returncode}) on "
                           f"{case.label}: {output.strip().splitlines()[-1:]}")
    return parse_benchmark_app(output) if case.backend == "openvino" \
        else parse_litert_benchmark(output)


# --------------------------------------------------------------------------------- the load readings
def _ticks() -> tuple[int, int, int, float]:
    """/proc/stat's (all, busy, steal) ticks, and this process's CPU with its waited-for children
    (the tools), in ticks."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    own = os.times()
    mine = (own.user + own.system + own.children_user + own.children_system) \
        * os.sysconf("SC_CLK_TCK")
    return sum(fields), sum(fields) - fields[3] - fields[4], fields[7], mine


def _load_since(before: tuple[int, int, int, float]) -> str:
    after = _ticks()
    total = max(after[0] - before[0], 1)
    busy = 100 * (after[1] - before[1]) / total
    others = max(0.0, busy - 100 * (after[3] - before[3]) / total)
    verdict = "busy: other processes ran beside it" if others > 10 else "quiet"
    return (f"machine busy {busy:.0f}% of its CPU, {others:.0f}% other processes' "
            f"(steal {100 * (after[2] - before[2]) / total:.1f}%): {verdict}")


# ------------------------------------------------------------------------------------------- report
def _row(case: Case) -> tuple[str, tuple[float, float] | None]:
    """The case's lines of the table, and its deviation on the tool's clock and on dse's host
    clock (each the median of the rounds' ratios), where the tool resolves it."""
    ours = case.runtime_ms or case.dse_ms
    host_ms, dse_ms = statistics.median(case.dse_ms), statistics.median(ours)
    tool_ms = statistics.median(m.median_ms for m in case.tool)
    ratio = statistics.median(d / m.median_ms for d, m in zip(ours, case.tool, strict=True))
    caller = statistics.median(d / m.median_ms for d, m in zip(case.dse_ms, case.tool, strict=True))
    dev, dev_caller = abs(ratio - 1), abs(caller - 1)
    clock = "runtime" if case.runtime_ms else "host"
    line = (f"  {case.label:22s} dse p50 {dse_ms:9.4f} ms ({clock})  tool median "
            f"{tool_ms:9.4f} ms  paired ratio {ratio:6.3f}  dev {dev:6.3f}")
    if case.call_ms:
        line += (f"  host p50 {host_ms:9.4f} ms  call_us "
                 f"{statistics.median(case.call_ms) * 1e3:5.2f}  dev_caller {dev_caller:6.3f}")
    rounds = " ".join(f"{d:.4f}/{m.median_ms:.4f}" for d, m in zip(ours, case.tool, strict=True))
    if not resolved(case.tool):
        return f"{line}  n/r (the tool prints {max(m.step_ms for m in case.tool):g} ms " \
               f"steps)\n    rounds dse/tool: {rounds}", None
    return f"{line}\n    rounds dse/tool: {rounds}", (dev, dev_caller)


def compare(quick: bool, rounds: int | None = None) -> tuple[float, float]:
    """Every case, interleaved (dse, tool, dse, tool ... per round); prints the table and the
    machine's load. The largest deviation over the resolved cases, on the tool's clock and on
    dse's host clock (nan when no vendor tool is installed)."""
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    from dse.util.user_cache import user_cache_root

    backends = [name for name, tool in TOOLS.items() if tool.exists()]
    if not backends:
        print("  no vendor benchmark tool installed here (benchmark_app, litert-benchmark)")
        return math.nan, math.nan
    window = QUICK_WINDOW_S if quick else WINDOW_S
    rounds = rounds or (QUICK_ROUNDS if quick else ROUNDS)
    cases = _cases(backends, user_cache_root() / "vendor-harness", quick)
    start = _ticks()
    for number in range(rounds):
        round_start = _ticks()
        for case in cases:
            _dse_round(case, window)
            case.tool.append(_tool_median(case, window))
        print(f"  round {number + 1}/{rounds}: {_load_since(round_start)}", flush=True)
    devs = []
    for case in cases:
        line, dev = _row(case)
        print(line)
        if dev is not None:
            devs.append(dev)
        case.runner.close()
    print(f"  over the run: {_load_since(start)}")
    if not devs:
        return math.nan, math.nan
    return max(dev for dev, _ in devs), max(caller for _, caller in devs)


def vendor_part(quick: bool) -> float:
    """``vendor_harness_max_dev``: the largest |dse p50 / tool median - 1| over the resolved
    cases, as measured (see :func:`compare`)."""
    return compare(quick)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"the quickstart CNN at batch 1, {QUICK_ROUNDS} round(s) of "
                             f"{QUICK_WINDOW_S:g} s windows")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default: "
                        f"{ROUNDS}, {QUICK_ROUNDS} with --quick)")
    args = parser.parse_args()
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    began = time.perf_counter()
    worst, worst_caller = compare(args.quick, args.rounds)
    print(f"  ({time.perf_counter() - began:.0f} s)")
    print(f"BENCH vendor_harness_max_dev {worst:.4f}")
    print(f"BENCH vendor_harness_max_dev_caller {worst_caller:.4f}")


if __name__ == "__main__":
    main()
