"""Are the default precision targets (``measurement.precision``) ones a shared machine can meet?

The candidates are the quickstart's kind: the ``cnn`` family at three sizes (small, medium,
large), batch 1, 8 and 32, each run by ONNX Runtime and by torch eager on one thread: 18
configurations. Each is timed with the quickstart's protocol (its ``measurement:`` window, p50 and
p99 required) and the campaign's re-measurement policy (``dse.measure.remeasure.next_run``: a run
left unstable, underpowered or imprecise is measured again as a trial's would be; there is no
interference probe here, so ``disturbed`` plays no part). Rounds alternate the configurations.

Prints, per configuration, the first run's own relative half-widths of p50 and p99 (before any
re-measurement: what a target without re-measuring would meet), the last run's, the
re-measurements made, the label and the seconds, then the distribution of the first runs'
half-widths, and

    BENCH precision_ok_share <share of configurations labelled ok at the end (target 1.0)>
    BENCH precision_remeasures <re-measurements per configuration, mean>
    BENCH precision_seconds <median seconds one configuration took, re-measurements included>

``--targets '{"p50": 0.1, "p99": 0.2}'`` tries other targets (the defaults otherwise).
Others measure on this machine too; hold the lock:

    flock /tmp/dse-bench.lock .venv/bin/python benchmarks/precision_targets.py [--quick]

``--quick``: the small size at batch 1 (two configurations), one round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
SIZES = {
    "small": {"num_stages": 1, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2},
    "medium": {"num_stages": 2, "depth": 2, "width_mult": 1.0, "kernel_size": 3,
               "expand_ratio": 4},
    "large": {"num_stages": 3, "depth": 3, "width_mult": 1.5, "kernel_size": 5, "expand_ratio": 6},
}
BATCHES = (1, 8, 32)
BENCH_NAMES = ("precision_ok_share", "precision_remeasures", "precision_seconds")


def _cpu_ticks() -> tuple[int, int]:
    """(all, busy) jiffies of every CPU so far, from /proc/stat."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    return sum(fields), sum(fields) - fields[3] - fields[4]


def _calls(folder: Path, sizes: list[str], batches: tuple[int, ...]
           ) -> dict[str, Callable[[], Any]]:
    """One timed call per configuration: the model built by the ``cnn`` family, exported by dse's
    own ONNX export for ONNX Runtime, called as is for torch."""
    import onnxruntime as ort
    import torch

    from dse.artifacts.onnx_export import export_onnx
    from dse.models import get_family

    torch.set_num_threads(1)
    family = get_family("cnn")
    calls: dict[str, Callable[[], Any]] = {}
    for size in sizes:
        torch.manual_seed(0)
        model = family.build(SIZES[size]).eval()
        path = folder / f"{size}.onnx"
        export_onnx(model, family.input_shape, path)
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        for batch in batches:
            x = np.random.default_rng(0).random((batch, *family.input_shape), dtype=np.float32)
            tensor = torch.from_numpy(x)

            def torch_call(model: Any = model, tensor: Any = tensor) -> Any:
                with torch.inference_mode():
                    return model(tensor)

            calls[f"{size} b{batch} onnxruntime"] = (
                lambda session=session, name=name, x=x: session.run(None, {name: x}))
            calls[f"{size} b{batch} torch"] = torch_call
    return calls


def _measure(call: Callable[[], Any], spec: Any) -> dict[str, Any]:
    """One configuration under the campaign's policy: runs until ``next_run`` says it stands."""
    from dse.measure import measure_latency
    from dse.measure.quality_labels import measurement_quality
    from dse.measure.remeasure import next_run

    precision = spec.required_precision()
    arguments = spec.latency_arguments()
    done: list[str] = []
    start = time.perf_counter()
    first = stats = measure_latency(call, **arguments)
    while (again := next_run(stats, "", done, arguments, spec.interference, precision)):
        done.append(again.kind)
        arguments = again.arguments
        stats = measure_latency(call, **arguments)
    return {"first": first.own_rel_ci, "last": stats.own_rel_ci, "again": done,
            "quality": measurement_quality(stats, False, precision)["measurement_quality"],
            "seconds": time.perf_counter() - start}


def _quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    at = [ordered[min(len(ordered) - 1, int(share * len(ordered)))] for share in (0.5, 0.9)]
    return f"median ±{100 * at[0]:.1f}%, 90th ±{100 * at[1]:.1f}%, worst ±{100 * ordered[-1]:.1f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the small size at batch 1, one round")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 2, 1 quick)")
    parser.add_argument("--targets", type=json.loads, default=None,
                        help="precision targets as JSON (default: the campaign's defaults)")
    args = parser.parse_args()
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    import yaml

    from dse.spec import MeasureSpec

    quickstart = yaml.safe_load((REPO / "experiments" / "quickstart.yaml").read_text())
    settings = dict(quickstart.get("measurement") or {})
    settings["percentiles"] = ["p50", "p99"]
    if args.targets is not None:
        settings["precision"] = args.targets
    spec = MeasureSpec.model_validate(settings)
    sizes = ["small"] if args.quick else list(SIZES)
    batches = (1,) if args.quick else BATCHES
    rounds = args.rounds or (1 if args.quick else 2)
    print(f"targets {spec.required_precision()}; protocol min_seconds {spec.min_seconds:g}, "
          f"max_seconds {spec.max_seconds:g}, blocks {spec.blocks}; {rounds} round(s)")
    ticks = _cpu_ticks()
    outcomes: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        calls = _calls(Path(folder), sizes, batches)
        for number in range(rounds):
            for label, call in calls.items():
                found = _measure(call, spec)
                outcomes.append(found)
                print(f"round {number + 1} {label:<24} first p50 ±{100 * found['first']['p50']:.1f}%"
                      f" p99 ±{100 * found['first']['p99']:.1f}%; last p50 "
                      f"±{100 * found['last']['p50']:.1f}% p99 ±{100 * found['last']['p99']:.1f}%;"
                      f" again {found['again'] or '-'}; {found['quality']}; "
                      f"{found['seconds']:.1f} s", flush=True)
    after = _cpu_ticks()
    print(f"the CPUs were {100 * (after[1] - ticks[1]) / max(1, after[0] - ticks[0]):.0f}% busy "
          f"(this benchmark's one thread is {100 / (os.cpu_count() or 1):.0f}% of them); "
          f"load average {os.getloadavg()[0]:.2f}")
    for name in ("p50", "p99"):
        print(f"first runs' {name}: {_quantiles([o['first'][name] for o in outcomes])}")
    print(f"BENCH precision_ok_share "
          f"{sum(o['quality'] == 'ok' for o in outcomes) / len(outcomes):.2f}")
    print(f"BENCH precision_remeasures "
          f"{statistics.mean(len(o['again']) for o in outcomes):.2f}")
    print(f"BENCH precision_seconds {statistics.median(o['seconds'] for o in outcomes):.2f}")


if __name__ == "__main__":
    main()
