"""Does a fixed reference workload timed beside a window see the machine's speed states?

On the 2-core development VM a window can be slow from its start to its end — 1.3-3x, for seconds
to minutes, with no other process and no steal in ``/proc/stat`` — so neither the interference
probe nor the window's own interval shows it (docs/measurement.md, "On a slow or busy machine").
This benchmark measures whether a *canary* would: for SECONDS it alternates a canary, a 0.4 s
window of a candidate (an ONNX Runtime CNN of the ``cnn`` family, batch 8, one thread: its p50),
and the canary again. Three canaries, each the fastest of 15 repetitions (the minimum ignores a
repetition another thread interrupted): ``python`` (an interpreter loop), ``compute`` (96x96
float32 matmuls, in cache) and ``memory`` (a pass over 2 MB).

A window is *slow* when its p50 is more than SLOW (1.2) times the 5th percentile of all windows'
p50; a canary flags a window when its faster reading (before or after) is more than THRESHOLD
times its own 5th percentile. Prints each canary's correlation with the candidate (of the logs),
its recall and false alarms, a trace, and

    BENCH speed_state_ratio <95th / 5th percentile of the windows' p50: how far the speed moves>
    BENCH canary_correlation <the python canary's log correlation with the candidate's p50>
    BENCH canary_recall <share of slow windows the python canary flags>
    BENCH canary_false_alarm <share of other windows it flags>

    flock /tmp/dse-bench.lock .venv/bin/python benchmarks/speed_states.py [--seconds 240] [--quick]

``--quick``: QUICK_SECONDS seconds, the candidate the shipped ONNX file (``QUICK_MODEL``: a CNN
of the same input, no export). A quiet machine whose speed does not move reads a ratio near 1 and
leaves recall undefined (nan: no slow window).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

SLOW = 1.2
THRESHOLD = 1.2
REPEATS = 15
WINDOW_S = 0.4
QUICK_SECONDS = 5.0
QUICK_MODEL = Path(__file__).resolve().parents[1] / "search_spaces" / "models" / "digits-cnn.onnx"
BENCH_NAMES = ("speed_state_ratio", "canary_correlation", "canary_recall", "canary_false_alarm")


def _canaries() -> dict[str, Callable[[], None]]:
    rng = np.random.default_rng(1)
    square = rng.random((96, 96), dtype=np.float32)
    block = rng.random(1 << 19, dtype=np.float32)

    def python() -> None:
        total = 0
        for value in range(3000):
            total += value * value

    def compute() -> None:
        product = square
        for _ in range(20):
            product = square @ product
            product *= 1e-2

    def memory() -> None:
        block.sum()
        np.add(block, 1.0, out=block)

    return {"python": python, "compute": compute, "memory": memory}


def _fastest(work: Callable[[], None]) -> float:
    best = math.inf
    for _ in range(REPEATS):
        start = time.perf_counter_ns()
        work()
        best = min(best, time.perf_counter_ns() - start)
    return best / 1e3


def _export(folder: Path) -> Path:
    """The candidate's model: a ``cnn`` of the family's medium size, exported by dse."""
    import torch

    from dse.artifacts.onnx_export import export_onnx
    from dse.models import get_family

    family = get_family("cnn")
    torch.manual_seed(0)
    model = family.build({"num_stages": 2, "depth": 2, "width_mult": 1.0, "kernel_size": 3,
                          "expand_ratio": 4}).eval()
    path = folder / "candidate.onnx"
    export_onnx(model, family.input_shape, path)
    return path


def _candidate(path: Path) -> Callable[[], object]:
    """One thread of ONNX Runtime on the model at ``path``, batch 8."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    shape = [8, *session.get_inputs()[0].shape[1:]]
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    return lambda: session.run(None, {name: x})


def _window_p50(call: Callable[[], object]) -> float:
    samples = []
    start = time.perf_counter()
    while time.perf_counter() - start < WINDOW_S:
        began = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - began)
    return statistics.median(samples) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=240.0)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SECONDS:g} seconds")
    args = parser.parse_args()
    seconds = QUICK_SECONDS if args.quick else args.seconds
    canaries = _canaries()
    p50s: list[float] = []
    readings: dict[str, list[float]] = {name: [] for name in canaries}
    with tempfile.TemporaryDirectory() as folder:
        call = _candidate(QUICK_MODEL if args.quick else _export(Path(folder)))
        for _ in range(200):
            call()
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            before = {name: _fastest(work) for name, work in canaries.items()}
            p50s.append(_window_p50(call))
            for name, work in canaries.items():
                readings[name].append(min(before[name], _fastest(work)))
            if len(p50s) % 10 == 1:
                print(f"  {time.monotonic() - start:5.0f} s  p50 {p50s[-1]:7.1f} us  " +
                      "  ".join(f"{name} {values[-1]:6.1f} us"
                                for name, values in readings.items()), flush=True)
    relative = np.array(p50s) / np.percentile(p50s, 5)
    slow = relative > SLOW
    print(f"{len(p50s)} windows; p50 {min(p50s):.1f}-{max(p50s):.1f} us; {int(slow.sum())} slow "
          f"(> {SLOW:g}x the 5th percentile); load average {os.getloadavg()[0]:.2f}")
    found: dict[str, tuple[float, float, float]] = {}
    for name, values in readings.items():
        ratio = np.array(values) / np.percentile(values, 5)
        flagged = ratio > THRESHOLD
        correlation = float(np.corrcoef(np.log(relative), np.log(ratio))[0, 1])
        recall = float(flagged[slow].mean()) if slow.any() else math.nan
        false_alarm = float(flagged[~slow].mean()) if (~slow).any() else math.nan
        found[name] = (correlation, recall, false_alarm)
        print(f"  canary {name:8s} correlation {correlation:5.2f}  recall {recall:5.2f}  "
              f"false alarm {false_alarm:5.2f}")
    correlation, recall, false_alarm = found["python"]
    print(f"BENCH speed_state_ratio {np.percentile(p50s, 95) / np.percentile(p50s, 5):.2f}")
    print(f"BENCH canary_correlation {correlation:.2f}")
    print(f"BENCH canary_recall {recall:.2f}")
    print(f"BENCH canary_false_alarm {false_alarm:.2f}")


if __name__ == "__main__":
    main()
