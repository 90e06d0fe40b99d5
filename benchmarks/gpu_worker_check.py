"""dse's device worker on an NVIDIA GPU: real candidates built, measured and scored there.

The same ``DeviceWorker.evaluate`` a campaign's Ray actor runs, called in-process (the GPU
machine this is meant for may have no Ray), for the tiny CNN over every torch backend and
precision the profile offers (batch 1 and 256), plus the GPU-only backends (which become
infeasible with their reason where their runtime is missing). Then:
- a sustained run of one candidate: latency drift beside temperature, clocks and throttling;
- reproducibility: a launch-bound (batch 256) and a GPU-bound (batch 4096) candidate, each measured
  five times (the campaign's default blocks); repeat coverage is the share of ordered pairs of
  runs where one's p50 lies inside the other's reported 95% interval;
- energy: the NVML energy counter against integrated power over one loaded window (done-when 6);
- a language model (a random-weights Llama config, issue 39) on eager torch at fp32, bf16 and fp16,
  batch 4: TTFT, TPOT, the KV cache, quality against fp32 and energy per token on the GPU (its
  trials are infeasible, naming transformers, where the machine's Python lacks it).

Run: ``python benchmarks/gpu_worker_check.py [--profile hw_profiles/h200.yaml] [--quick]``. On a
machine without CUDA it prints ``SKIP`` and why, and exits 0 (nothing to measure). Ends with
``BENCH gpu_repeat_coverage_b256``, ``BENCH gpu_repeat_coverage_b4096``, ``BENCH
gpu_energy_counter_vs_integrated`` (|counter / integrated power - 1|) and ``BENCH
gpu_energy_source_counter`` (1 when NVML's energy counter was read).

``--quick``: QUICK_GRID only, one epoch of training, shorter windows, QUICK_REPEATS runs per
reproducibility candidate, a short sustained run and energy window.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
import warnings
from pathlib import Path

from dse.core.candidate import Candidate
from dse.core.measurement import Measurement
from dse.spec import MeasureSpec, TrainingSpec
from dse.spec.loading import load_profile

ARCH = {"num_stages": 2, "depth": 2, "width_mult": 1.0, "kernel_size": 3, "expand_ratio": 4}
PRECISIONS = ("fp32", "fp16", "bf16")
# A language model with random weights, built from a transformers config (no download).
LLM = {"kind": "config", "config": "llama", "seed": 0,
       "base": {"vocab_size": 32000, "hidden_size": 512, "num_hidden_layers": 4,
                "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 1408}}
LLM_WORKLOAD = {"prompt_tokens": 128, "output_tokens": 32, "requests": 8, "min_seconds": 1.0}
LLM_METRICS = ("ttft_p50_ms", "tpot_p50_ms", "device_decode_tokens_per_s", "kv_cache_mb",
               "perplexity_ratio", "token_agreement", "energy_per_token_mj",
               "cuda_allocated_peak_mb")
# torch.compile once per precision (its compiles dominate the run); the GPU-only runtimes once each.
GRID = ([("torch", precision, 1) for precision in PRECISIONS]
        + [(backend, precision, 256) for backend in ("torch", "torch_compile") for precision in PRECISIONS]
        + [("onnxruntime_cuda", "fp32", 256), ("onnxruntime_tensorrt", "fp16", 256),
           ("tensorrt", "fp16", 256)])
QUICK_GRID = [("torch", "fp32", 1), ("torch", "bf16", 256)]
REPEATS, QUICK_REPEATS = 5, 2
BENCH_NAMES = ("gpu_repeat_coverage_b256", "gpu_repeat_coverage_b4096",
               "gpu_energy_counter_vs_integrated", "gpu_energy_source_counter")


def _fmt(metrics: dict[str, float], name: str, spec: str = ".4f") -> str:
    value = metrics.get(name)
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


def report(label: str, result: Measurement) -> None:
    m = result.metrics
    if result.status != "ok":
        print(f"{label:34s} {result.status}: {result.reason[:300]}")
        return
    print(f"{label:34s} p50 {_fmt(m, 'latency_p50_ms')} ms [{_fmt(m, 'latency_p50_ci_low_ms')}, "
          f"{_fmt(m, 'latency_p50_ci_high_ms')}] p99 {_fmt(m, 'latency_p99_ms')}  "
          f"{_fmt(m, 'throughput_sps', '.0f')} sps  acc {_fmt(m, 'accuracy', '.3f')}  "
          f"E/inf {_fmt(m, 'energy_per_inference_mj', '.4f')} mJ "
          f"({result.provenance.get('nvml.energy_source', 'none')})  P {_fmt(m, 'power_mean_w', '.1f')} W  "
          f"T {_fmt(m, 'temperature_peak_c', '.0f')} C  thr {_fmt(m, 'throttled_fraction', '.2f')}  "
          f"cuda_peak {_fmt(m, 'cuda_allocated_peak_mb', '.1f')} MB  "
          f"compile {_fmt(m, 'compile_seconds', '.2f')} s  top1 {_fmt(m, 'top1_agreement', '.3f')}")


def repeat_coverage(runs: list[dict[str, float]], label: str) -> float:
    """Share of ordered pairs (i, j) of runs where run j's p50 lies inside run i's reported 95%
    interval (the blocks' included), as benchmarks/measure_calibration.py counts it; printed."""
    for i, run in enumerate(runs):
        print(f"repeat {label} run {i}: p50 {run['latency_p50_ms']:.5f} ms interval "
              f"[{_fmt(run, 'latency_p50_ci_low_ms', '.5f')}, "
              f"{_fmt(run, 'latency_p50_ci_high_ms', '.5f')}]  between_run_cv "
              f"{_fmt(run, 'between_run_cv', '.4f')}")
    pairs = [(i, j) for i in range(len(runs)) for j in range(len(runs)) if i != j]
    held = sum(runs[i].get("latency_p50_ci_low_ms", math.inf) <= runs[j]["latency_p50_ms"]
               <= runs[i].get("latency_p50_ci_high_ms", -math.inf) for i, j in pairs)
    return held / len(pairs)


def energy_agreement(seconds: float = 3.0) -> tuple[float, float, str]:
    """Energy per matmul over one loaded window of ``seconds``: (from the counter, from
    integrated power)."""
    import torch

    from dse.measure.telemetry import Window
    from dse.measure.telemetry.derived import power_energy
    from dse.measure.telemetry.nvml import NvmlProbe

    probe = NvmlProbe()
    ok, why = probe.available()
    if not ok:
        return math.nan, math.nan, why
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

    def load(seconds: float) -> int:
        done, end = 0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            for _ in range(10):
                a @ a
            torch.cuda.synchronize()
            done += 10
        return done

    load(1.5)  # NVML's power is a 1 s average from Ampere on: start the window loaded
    probe.start()
    start = time.time()
    done = load(seconds)
    end = time.time()
    trace = probe.stop()
    window = Window(start, end, inferences=done)
    result = probe.summarize(trace, window)
    counter = result.metrics.get("energy_per_inference_mj", math.nan)
    source = probe.last_energy_source
    integrated = power_energy(trace.timestamps, trace.channels["power_w"], window).metrics.get(
        "energy_per_inference_mj", math.nan)
    print(f"energy: {done} bf16 8192^3 products in {end - start:.2f} s; per product "
          f"{counter:.1f} mJ ({source}) vs {integrated:.1f} mJ integrated power; "
          f"mean power {result.metrics.get('power_mean_w', math.nan):.1f} W, "
          f"peak {result.metrics.get('temperature_peak_c', math.nan):.0f} C, "
          f"{2 * 8192**3 * done / (end - start) / 1e12:.0f} TFLOP/s")
    return counter, integrated, source


def main() -> None:
    warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", type=Path, default=Path("hw_profiles/h200.yaml"))
    parser.add_argument("--quick", action="store_true",
                        help="two candidates, short windows, two repeats")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("SKIP no CUDA device (torch reports none): nothing to measure here")
        return
    from dse.farm.worker import DeviceWorker
    from dse.measure.provenance import cuda_provenance

    print(cuda_provenance())
    profile = load_profile(args.profile)
    training = TrainingSpec(epochs=1 if args.quick else 3, threads=8)
    seconds = 0.5 if args.quick else 2.0
    measure = MeasureSpec(max_seconds=seconds, warmup_max_seconds=0.5)
    repeats = QUICK_REPEATS if args.quick else REPEATS
    with tempfile.TemporaryDirectory() as cache:
        worker = DeviceWorker(profile, cache)
        statuses: dict[str, int] = {}
        for backend, precision, batch in QUICK_GRID if args.quick else GRID:
            candidate = Candidate("cnn", ARCH, precision, batch, backend, device_profile=profile.name)
            start = time.perf_counter()
            result = worker.evaluate(candidate, training, measure)
            statuses[result.status] = statuses.get(result.status, 0) + 1
            report(f"{backend}/{precision}/b{batch} ({time.perf_counter() - start:.1f}s)", result)

        for precision in PRECISIONS:
            cell = Candidate(family="llm:llama", precision=precision, batch_size=4,
                             backend="torch", device_profile=profile.name,
                             model={"llm": LLM, "workload": LLM_WORKLOAD})
            start = time.perf_counter()
            result = worker.evaluate(cell, training, measure.for_metrics(["tpot_p50_ms"]))
            statuses[result.status] = statuses.get(result.status, 0) + 1
            print(f"llm torch/{precision}/b4 ({time.perf_counter() - start:.1f}s): "
                  f"{result.status} {result.reason or ''}")
            for name in LLM_METRICS:
                print(f"  {name} {_fmt(result.metrics, name)}")

        sustained = MeasureSpec(max_seconds=seconds, warmup_max_seconds=0.5,
                                sustained_seconds=2.0 if args.quick else 8.0)
        heavy = Candidate("cnn", ARCH, "fp32", 4096, "torch", device_profile=profile.name)
        result = worker.evaluate(heavy, training, sustained)
        report("sustained torch/fp32/b4096", result)
        print(f"  drift {_fmt(result.metrics, 'latency_drift_pct', '.2f')} %  clock drop "
              f"{_fmt(result.metrics, 'clock_drop_pct', '.1f')} %")

        # Launch-bound (batch 256: ~1 ms of mostly host work) and GPU-bound (batch 4096).
        repro = {batch: [worker.evaluate(Candidate("cnn", ARCH, "fp32", batch, "torch",
                                                   device_profile=profile.name),
                                         training, measure).metrics for _ in range(repeats)]
                 for batch in (256, 4096)}
    coverage = {batch: repeat_coverage(runs, f"b{batch}") for batch, runs in repro.items()}
    counter, integrated, source = energy_agreement(1.0 if args.quick else 3.0)
    deviation = abs(counter / integrated - 1) if integrated and math.isfinite(integrated) else math.nan
    print(f"statuses {statuses}")
    print(f"BENCH gpu_repeat_coverage_b256 {coverage[256]:.3f}")
    print(f"BENCH gpu_repeat_coverage_b4096 {coverage[4096]:.3f}")
    print(f"BENCH gpu_energy_counter_vs_integrated {deviation:.4f}")
    print(f"BENCH gpu_energy_source_counter {int(source == 'energy_counter')}")


if __name__ == "__main__":
    main()
