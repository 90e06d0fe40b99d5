"""One run of a device calibration, in a process of its own (``python -m dse.trial.calibration_run``).

Run-to-run variation includes what a fresh process brings (memory layout, thread placement,
allocator state), so each run of ``dse calibrate`` loads the reference workloads and measures
them here, with the campaign's protocol, and prints their percentiles as one JSON line.
Arguments: a JSON object ``{"workloads": {name: [kind, path]}, "device": "cpu" | "cuda",
"measure": MeasureSpec fields}``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np


def _onnxruntime_call(path: str, example: np.ndarray) -> Callable[[], object]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: example}
    return lambda: session.run(None, feed)


def _torch_call(path: str, example: np.ndarray, device: str) -> Callable[[], object]:
    import torch

    model = torch.load(path, weights_only=False).eval().to(device)
    tensor = torch.from_numpy(example).to(device)

    def call() -> object:
        with torch.inference_mode():
            return model(tensor)

    return call


def measure_workloads(request: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Every workload of ``request`` measured once, in order: its percentiles in ms."""
    import torch

    from dse.measure import PERCENTILES, measure_latency
    from dse.spec import MeasureSpec

    torch.set_num_threads(1)
    device = request["device"]
    spec = MeasureSpec.model_validate(request["measure"])
    sync = torch.cuda.synchronize if device == "cuda" else None
    out: dict[str, dict[str, float]] = {}
    for name, (kind, path, shape) in request["workloads"].items():
        example = np.random.default_rng(0).random(shape, dtype=np.float32)
        call = (_onnxruntime_call(path, example) if kind == "onnxruntime"
                else _torch_call(path, example, device))
        stats = measure_latency(call, **spec.latency_arguments(),
                                sync=sync if kind == "torch" else None)
        out[name] = {percentile: float(getattr(stats, f"{percentile}_ms"))
                     for percentile, _ in PERCENTILES}
    return out


def main(argv: list[str]) -> None:
    print(json.dumps(measure_workloads(json.loads(argv[0]))))


if __name__ == "__main__":
    main(sys.argv[1:])
