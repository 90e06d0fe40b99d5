"""Fidelity, reproducibility and cost of dse's latency measurement.

For three CNN artifacts of different size, dse's median latency is compared with independent
references measured in the same run, with the same threads:
- torch eager: ``torch.utils.benchmark.Timer.blocked_autorange`` (median of block means);
- ONNX Runtime: a plain loop timing each ``session.run`` with ``perf_counter``.
Then one candidate is measured five times: a run "hits" when its p50 lies inside every other
run's 95% CI. Cost is the wall time ``measure_latency`` needs to reach the ±1% target.

Run: ``.venv/bin/python benchmarks/measure_fidelity.py``. Ends with ``BENCH`` lines.
"""

from __future__ import annotations

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


def dse_p50(fn: Any) -> tuple[float, Any, float]:
    from dse.measure import measure_latency

    start = time.perf_counter()
    stats = measure_latency(fn, target_rel_ci=0.01, min_iters=30, min_seconds=0.2,
                            max_seconds=10.0)
    return stats.p50_ms, stats, time.perf_counter() - start


def torch_reference_ms(infer: Any) -> float:
    import torch.utils.benchmark as benchmark

    timer = benchmark.Timer(stmt="infer()", globals={"infer": infer}, num_threads=THREADS)
    return float(timer.blocked_autorange(min_run_time=1.0).median * 1000)


def torch_infer(model: Any, x: Any) -> Any:
    """The same call for dse and the reference: inference mode entered inside it, so the
    reference (which runs its statement in its own frame) does identical work."""
    import torch

    def infer() -> Any:
        with torch.inference_mode():
            return model(x)

    return infer


def ort_reference_ms(session: Any, feed: dict[str, np.ndarray], seconds: float = 1.0) -> float:
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
    warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
    import onnxruntime as ort
    import torch

    from dse.build.export import export_onnx
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
        for name, arch in ARCHS.items():
            model = family.build(arch).eval()
            infer = torch_infer(model, x)
            p50, _, cost = dse_p50(infer)
            reference = torch_reference_ms(infer)
            ratio = p50 / reference
            deviations.append(abs(ratio - 1))
            costs.append(cost)
            print(f"torch  {name:6s} dse p50 {p50:8.4f} ms  blocked_autorange {reference:8.4f} ms"
                  f"  ratio {ratio:.4f}  ({cost:.2f} s to target)")

            path = Path(tmp) / f"{name}.onnx"
            export_onnx(model, family.input_shape, path)
            options = ort.SessionOptions()
            options.intra_op_num_threads = THREADS
            options.inter_op_num_threads = 1
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            feed = {session.get_inputs()[0].name: x.numpy()}
            p50, _, cost = dse_p50(lambda s=session, f=feed: s.run(None, f))
            reference = ort_reference_ms(session, feed)
            ratio = p50 / reference
            deviations.append(abs(ratio - 1))
            costs.append(cost)
            print(f"ort    {name:6s} dse p50 {p50:8.4f} ms  plain loop        {reference:8.4f} ms"
                  f"  ratio {ratio:.4f}  ({cost:.2f} s to target)")
            if name == "medium":
                repro_session, repro_feed = session, feed

        runs = []
        for _ in range(5):
            p50, stats, cost = dse_p50(lambda: repro_session.run(None, repro_feed))
            runs.append(stats)
            costs.append(cost)
    hits = 0
    for i, run in enumerate(runs):
        inside = all(other.p50_ci_ms is not None
                     and other.p50_ci_ms[0] <= run.p50_ms <= other.p50_ci_ms[1]
                     for j, other in enumerate(runs) if j != i)
        hits += inside
        ci = run.p50_ci_ms or (float("nan"), float("nan"))
        print(f"repro  run {i}: p50 {run.p50_ms:.4f} ms  95% CI [{ci[0]:.4f}, {ci[1]:.4f}]  "
              f"n={run.n}  {'hit' if inside else 'miss'}")
    print(f"cpu count {os.cpu_count()}, threads {THREADS}, batch {BATCH}")
    print(f"BENCH fidelity_max_dev {max(deviations):.4f}")
    print(f"BENCH repro_hits {hits}")
    print(f"BENCH seconds_to_target {statistics.median(costs):.3f}")


if __name__ == "__main__":
    main()
