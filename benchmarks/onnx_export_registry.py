"""What building torchlib's operator registry once per process saves each ONNX export
(``dse.artifacts.dynamo_export``): the same module exported through dse's path (the registry
built once, reused) and through the public ``torch.onnx.export`` (built at every call), PAIRS
pairs side by side in one process, which goes first alternating by pair, after one warm-up export
of each (the first export in a process imports and traces the exporter's machinery: seconds,
either way).

The module is a small CNN of the quickstart's size (3x32x32 input, two conv blocks, a linear head).
Prints the medians and

    BENCH export_registry_speedup <public export / dse's export, median of the pairs' ratios>

    flock /tmp/dse-bench.lock .venv/bin/python benchmarks/onnx_export_registry.py [--quick]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path

BENCH_NAMES = ("export_registry_speedup",)
# Out of CI's budget (CI's exports already run this path in every campaign test).
QUICK_IN_CI = False
PAIRS = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 pairs")
    args = parser.parse_args()
    import torch

    from dse.artifacts import dynamo_export
    from dse.artifacts.onnx_export import export_onnx

    logging.disable(logging.WARNING)  # the exporter's notes on torchvision's absent operators
    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(32 * 16 * 16, 10)).eval()
    shared_entry = dynamo_export._exporter_entry

    def export(path: Path, public: bool) -> float:
        dynamo_export._exporter_entry = (lambda: None) if public else shared_entry
        start = time.perf_counter()
        export_onnx(module, (3, 32, 32), path)
        return time.perf_counter() - start

    times: dict[bool, list[float]] = {False: [], True: []}
    ratios = []
    with tempfile.TemporaryDirectory(prefix="dse-export-registry-") as folder:
        out = Path(folder)
        export(out / "warm-shared.onnx", False)
        export(out / "warm-public.onnx", True)
        for number in range(3 if args.quick else PAIRS):
            order = (False, True) if number % 2 == 0 else (True, False)
            pair = {public: export(out / f"{number}-{public}.onnx", public) for public in order}
            for public, seconds in pair.items():
                times[public].append(seconds)
            ratios.append(pair[True] / pair[False])
    dynamo_export._exporter_entry = shared_entry
    print(f"{len(ratios)} pairs: dse's export p50 {statistics.median(times[False]):.3f} s, the "
          f"public torch.onnx.export {statistics.median(times[True]):.3f} s")
    print(f"BENCH export_registry_speedup {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
