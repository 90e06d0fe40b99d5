"""Fidelity, reproducibility and cost of dse's latency measurement.

For three CNN artifacts of different size, dse's timings are compared with independent
references measured in the same run, with the same threads:
- torch eager: ``torch.utils.benchmark.Timer.blocked_autorange``. It reports the median of *block
  means* (each block runs ``number_per_run`` calls), so the like-for-like figure is that same
  statistic computed from dse's raw samples; dse's p50 ratio is printed beside it, and differs
  from it by the skew of the latency distribution, not by the measurement;
- ONNX Runtime: a plain loop timing each ``session.run`` with ``perf_counter``; p50 against its
  median.
Then one candidate is measured five times with the campaign's default protocol (its blocks
included): ``repeat_coverage`` is the share of ordered pairs of runs where one run's p50 lies
inside the other's reported 95% interval (``benchmarks/measure_calibration.py`` does the same
across processes, which is the harder test). Cost is the wall time ``measure_latency`` needs.

Every dse window is watched by the real ``cpu_interference`` probe: a comparison is only as good
as the machine was quiet, so the share of windows it found disturbed is printed beside the figures.

dse and each reference are measured in alternation, ROUNDS times each, and their medians over
the rounds compared: a shared VM changes speed for seconds at a time, and alternating cancels
that drift instead of charging it to whichever ran second.

Run: ``.venv/bin/python benchmarks/measure_fidelity.py [--quick]`` (``--quick``: the small
artifact only, one round, QUICK_REPEATS repeat runs, every window capped at QUICK_WINDOW_S).
Ends with ``BENCH fidelity_max_dev`` (the largest |dse / reference - 1|), ``BENCH
repeat_coverage`` and ``BENCH seconds_to_target`` (the median seconds one dse measurement took).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

THREADS = 1  # one thread each: the other core stays free for the OS on a 2-core machine
ARCHS = {
    "small": {"num_stages": 1, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2},
    "medium": {"num_stages": 2, "depth": 2, "width_mult": 1.0, "kernel_size": 3, "expand_ratio": 4},
    "large": {"num_stages": 3, "depth": 3, "width_mult": 2.0, "kernel_size": 5, "expand_ratio": 6},
}
BATCH = 32
ROUNDS = 3
REPEATS, QUICK_REPEATS = 5, 2
REFERENCE_S, QUICK_WINDOW_S = 0.5, 0.3
BENCH_NAMES = ("fidelity_max_dev", "repeat_coverage", "seconds_to_target")


WINDOWS = {"clean": 0, "disturbed": 0}


def dse_p50(fn: Any, max_seconds: float | None) -> tuple[float, Any, float]:
    """dse's p50 with the campaign's default protocol (``max_seconds``: a shorter cap), inside a
    watched window."""
    from watched_timing import watched_latency

    start = time.perf_counter()
    stats, verdict = watched_latency(fn, max_seconds)
    cost = time.perf_counter() - start
    WINDOWS["disturbed" if verdict else "clean"] += 1
    return stats.p50_ms, stats, cost


def torch_reference(infer: Any, seconds: float) -> tuple[float, int]:
    """blocked_autorange's median of block means (ms) and its block size."""
    import torch.utils.benchmark as benchmark

    timer = benchmark.Timer(stmt="infer()", globals={"infer": infer}, num_threads=THREADS)
    measurement = timer.blocked_autorange(min_run_time=seconds)
    return float(measurement.median * 1000), int(measurement.number_per_run)


def median_of_block_means(samples_ms: list[float], block: int) -> float:
    data = np.asarray(samples_ms)
    blocks = len(data) // block
    if blocks < 1:
        return float(np.mean(data))
    return float(np.median(data[: blocks * block].reshape(blocks, block).mean(axis=1)))


def torch_infer(model: Any, x: Any) -> Any:
    """The same call for dse and the reference: inference mode entered inside it, so the
    reference (which runs its statement in its own frame) does identical work."""
    import torch

    def infer() -> Any:
        with torch.inference_mode():
            return model(x)

    return infer


def ort_reference_ms(session: Any, feed: dict[str, np.ndarray], seconds: float) -> float:
    for _ in range(50):
        session.run(None, feed)
    samples = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter_ns()
        session.run(None, feed)
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return float(np.median(samples))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"the small artifact, one round, {QUICK_REPEATS} repeat runs")
    args = parser.parse_args()
    archs = {"small": ARCHS["small"]} if args.quick else ARCHS
    rounds = 1 if args.quick else ROUNDS
    repeats = QUICK_REPEATS if args.quick else REPEATS
    window = QUICK_WINDOW_S if args.quick else None
    reference_s = QUICK_WINDOW_S if args.quick else REFERENCE_S
    warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
    import onnxruntime as ort
    import torch

    from dse.artifacts.onnx_export import export_onnx
    from dse.models import get_family

    torch.manual_seed(0)
    torch.set_num_threads(THREADS)
    family = get_family("cnn")
    x = torch.from_numpy(np.random.default_rng(0).random((BATCH, 1, 8, 8), dtype=np.float32))
    deviations: list[float] = []
    costs: list[float] = []
    repro_session: Any = None
    repro_feed: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, arch in archs.items():
            model = family.build(arch).eval()
            infer = torch_infer(model, x)
            ours, theirs, p50s = [], [], []
            for _ in range(rounds):
                p50, stats, cost = dse_p50(infer, window)
                reference, block = torch_reference(infer, reference_s)
                ours.append(median_of_block_means(stats.samples_ms, block))
                theirs.append(reference)
                p50s.append(p50)
                costs.append(cost)
            ratio = statistics.median(ours) / statistics.median(theirs)
            deviations.append(abs(ratio - 1))
            print(f"torch  {name:6s} dse {statistics.median(ours):8.4f} ms  blocked_autorange "
                  f"{statistics.median(theirs):8.4f} ms  ratio {ratio:.4f}   (p50 "
                  f"{statistics.median(p50s):.4f} ms; block of {block})")

            path = Path(tmp) / f"{name}.onnx"
            export_onnx(model, family.input_shape, path)
            options = ort.SessionOptions()
            options.intra_op_num_threads = THREADS
            options.inter_op_num_threads = 1
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            feed = {session.get_inputs()[0].name: x.numpy()}
            ours, theirs = [], []
            for _ in range(rounds):
                p50, _, cost = dse_p50(lambda s=session, f=feed: s.run(None, f), window)
                ours.append(p50)
                theirs.append(ort_reference_ms(session, feed, reference_s))
                costs.append(cost)
            ratio = statistics.median(ours) / statistics.median(theirs)
            deviations.append(abs(ratio - 1))
            print(f"ort    {name:6s} dse p50 {statistics.median(ours):8.4f} ms  plain loop "
                  f"{statistics.median(theirs):8.4f} ms  ratio {ratio:.4f}")
            if repro_session is None or name == "medium":
                repro_session, repro_feed = session, feed

        runs = []
        for _ in range(repeats):
            p50, stats, cost = dse_p50(lambda: repro_session.run(None, repro_feed), window)
            runs.append(stats)
            costs.append(cost)
    for i, run in enumerate(runs):
        ci = run.p50_ci_ms or (float("nan"), float("nan"))
        print(f"repeat run {i}: p50 {run.p50_ms:.4f} ms  95% interval [{ci[0]:.4f}, {ci[1]:.4f}]  "
              f"n={run.n} in {run.blocks} blocks  between_run_cv {run.between_run_cv:.4f}")
    pairs = [(i, j) for i in range(len(runs)) for j in range(len(runs)) if i != j]
    inside = sum(runs[i].p50_ci_ms is not None
                 and runs[i].p50_ci_ms[0] <= runs[j].p50_ms <= runs[i].p50_ci_ms[1]
                 for i, j in pairs)
    print(f"repeat pairwise: run j's p50 inside run i's interval in {inside} of {len(pairs)} pairs")
    print(f"windows watched by cpu_interference: {WINDOWS['clean']} clean, "
          f"{WINDOWS['disturbed']} disturbed (other processes or steal beyond the default policy)")
    print(f"seconds to target per run: {', '.join(f'{c:.2f}' for c in costs)}")
    print(f"cpu count {os.cpu_count()}, threads {THREADS}, batch {BATCH}")
    print(f"BENCH fidelity_max_dev {max(deviations):.4f}")
    print(f"BENCH repeat_coverage {inside / len(pairs):.3f}")
    print(f"BENCH seconds_to_target {statistics.median(costs):.3f}")


if __name__ == "__main__":
    main()
