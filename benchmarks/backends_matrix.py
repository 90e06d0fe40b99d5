"""Every installed backend x precision on this CPU, for three fixed models: what builds, how fast
it runs, what its build cost, and how close it stays to fp32.

Models: the cnn family's default architecture and the transformer family's (each trained briefly on
its dataset), and the shipped ONNX file (search_spaces/models/digits-cnn.onnx). Each cell goes
through dse's own worker path (``dse.trial.prepare.prepare_candidate``: train or load, build the
artifact, compile, score fidelity against the fp32 torch reference) and is timed with dse's
measurement protocol (``dse.measure.measure_latency``). LiteRT and ExecuTorch also run at fp32
without their XNNPACK delegate (``litert-builtin``, ``executorch-portable``). TVM runs twice: with
TVM's default schedules and with MetaSchedule tuning (``--tuning-trials``, default 64; the tuning is
cached per device, so a second run of this script reuses it and reports what the tuning cost when
made).

All cells run one thread (``max_threads: 1``) so they compare code generation, not parallelism,
and the other core is left to the OS. The cells are timed in ROUNDS rounds, every cell once per
round in turn, and each cell's p50 is the median over the rounds: a shared VM changes speed for
seconds at a time, and interleaving spreads that drift over every cell instead of charging it to
whichever ran last. Each round's window is watched by the ``cpu_interference`` probe and the share
of disturbed windows is printed.

A cell is ok when it builds, runs and passes fidelity: top-1 agreement with the fp32 reference of
at least FIDELITY_FLOOR on the validation batch.

Run: ``.venv/bin/python benchmarks/backends_matrix.py [--tuning-trials N] [--rounds R] [--quick]``.
Ends with ``BENCH backend_cells_ok``, ``BENCH tvm_tuning_speedup`` (p50 untuned / p50 tuned, median
over the models; nan when TVM is not installed) and ``BENCH best_vs_ort_fp32_<model>`` (best p50 of
any cell / ONNX Runtime fp32) for each model.

``--quick`` checks that it runs: ONNX Runtime fp32 (the reference every model's line divides
by) on every model, one epoch of training, one round of timing in shorter windows
(QUICK_WINDOW_S). No TVM: MetaSchedule tunes for tens of seconds even at two trials, so
``tvm_tuning_speedup`` reads nan.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
ONNX_FILE = REPO / "search_spaces" / "models" / "digits-cnn.onnx"
BATCH = 8
ROUNDS = 3
FIDELITY_FLOOR = 0.95
PRECISIONS = ("fp32", "fp16", "bf16", "int8")
# The edge runtimes once more at fp32 without their XNNPACK delegate: what the delegate buys.
WITHOUT_DELEGATE = {"litert": ("xnnpack", "litert-builtin"),
                    "executorch": ("delegate", "executorch-portable")}
MODELS = ("cnn", "transformer", "onnx_file")
BENCH_NAMES = ("backend_cells_ok", "tvm_tuning_speedup", "best_vs_ort_fp32_cnn",
               "best_vs_ort_fp32_transformer", "best_vs_ort_fp32_onnx_file")
QUICK_WINDOW_S = 0.3


@dataclass
class Cell:
    """One (model, backend, precision, knobs) and what it measured."""

    model: str
    backend: str
    precision: str
    knobs: dict[str, Any]
    label: str
    runner: Any = None
    example: Any = None
    metrics: dict[str, float] = field(default_factory=dict)
    reason: str = ""
    p50s: list[float] = field(default_factory=list)
    intervals: list[tuple[float, float] | None] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.runner is not None and self.metrics.get("top1_agreement", 0.0) >= FIDELITY_FLOOR

    @property
    def p50(self) -> float:
        return statistics.median(self.p50s)


def models(quick: bool = False) -> dict[str, dict[str, Any]]:
    """Each model's family, architecture, source and training (quick: one epoch)."""
    from dse.models import cnn, transformer
    from dse.models.sources import file_sha256
    from dse.spec import TrainingSpec

    return {
        "cnn": {"family": "cnn", "arch": dict(cnn.DEFAULT_ARCH), "model": {},
                "training": TrainingSpec(epochs=1 if quick else 8, batch_size=128,
                                         learning_rate=0.02, seed=0, threads=1)},
        "transformer": {"family": "transformer", "arch": dict(transformer.DEFAULT_ARCH), "model": {},
                        "training": TrainingSpec(epochs=1 if quick else 10, batch_size=64,
                                                 learning_rate=0.003, seed=0, threads=1)},
        "onnx_file": {"family": f"onnx:{ONNX_FILE}", "arch": {},
                      "model": {"onnx": str(ONNX_FILE), "dataset": "digits",
                                "sha256": file_sha256(ONNX_FILE)},
                      "training": TrainingSpec(epochs=1, batch_size=128, seed=0, threads=1)},
    }


def installed_backends() -> list[str]:
    """Registered backends with a CPU capability whose libraries import here."""
    import importlib.metadata

    from dse.backends import BACKENDS, CAPABILITIES

    found = []
    for name, backend in sorted(BACKENDS.items()):
        if not any(CAPABILITIES[name, p, "cpu"].supported for p in PRECISIONS):
            continue
        try:
            for library in backend.declaration.libraries:
                importlib.metadata.version(library)
        except importlib.metadata.PackageNotFoundError:
            print(f"skip {name}: {library} is not installed (pip install 'dse[{backend.declaration.extra}]')")
            continue
        found.append(name)
    return found


def cells_for(model: str, backends: list[str], tuning_trials: int) -> list[Cell]:
    from dse.backends import CAPABILITIES
    from dse.plugins.backends import declaration

    cells = []
    for backend in backends:
        if model == "onnx_file" and declaration(backend).artifact_format != "onnx":
            continue  # a fixed ONNX file has no torch module to hand the torch backends
        for precision in PRECISIONS:
            if not CAPABILITIES[backend, precision, "cpu"].supported:
                continue
            if backend == "tvm":
                cells.append(Cell(model, backend, precision, {"tuning_trials": 0}, "tvm"))
                cells.append(Cell(model, backend, precision, {"tuning_trials": tuning_trials},
                                  f"tvm-tuned{tuning_trials}"))
            else:
                cells.append(Cell(model, backend, precision, {}, backend))
            if precision == "fp32" and backend in WITHOUT_DELEGATE:
                knob, label = WITHOUT_DELEGATE[backend]
                cells.append(Cell(model, backend, precision, {knob: False}, label))
    return cells


def quick_cells(cells: list[Cell]) -> list[Cell]:
    """What ``--quick`` keeps: ONNX Runtime fp32, the reference of every model's BENCH line."""
    return [cell for cell in cells if (cell.backend, cell.precision) == ("onnxruntime", "fp32")]


def prepare(cell: Cell, spec: dict[str, Any], cache: Path) -> None:
    from dse.backends import get_backend
    from dse.core.candidate import Candidate
    from dse.core.exceptions import BuildError
    from dse.spec import HardwareProfile
    from dse.trial.prepare import prepare_candidate

    backend = get_backend(cell.backend)
    profile = HardwareProfile(name="bench-cpu", kind="cpu", backends=[cell.backend],
                              precisions=list(PRECISIONS), max_threads=1)
    knobs = {backend.thread_knob: 1, **cell.knobs}
    candidate = Candidate(family=spec["family"], arch=spec["arch"], precision=cell.precision,
                          batch_size=BATCH, backend=cell.backend, knobs=knobs,
                          device_profile=profile.name, model=spec["model"])
    try:
        prepared = prepare_candidate(candidate, spec["training"], profile, cache)
    except BuildError as exc:
        cell.reason = str(exc)
        return
    cell.runner, cell.example, cell.metrics = prepared.runner, prepared.example, prepared.metrics


WINDOWS = {"clean": 0, "disturbed": 0}


def time_cell(cell: Cell, max_seconds: float | None) -> None:
    from watched_timing import watched_latency

    runner, example = cell.runner, cell.example
    stats, verdict = watched_latency(lambda: runner.run(example), max_seconds)
    WINDOWS["disturbed" if verdict else "clean"] += 1
    cell.p50s.append(stats.p50_ms)
    cell.intervals.append(stats.p50_ci_ms)


def report(cells: list[Cell], tuning_trials: int) -> None:
    print(f"\n{'model':12s} {'cell':16s} {'prec':5s} {'p50 ms':>9s} {'95% interval (median round)':>28s} "
          f"{'build s':>8s} {'compile s':>9s} {'tuning s':>9s} {'top1 agr':>8s} {'rel l2':>9s}")
    for cell in cells:
        if cell.runner is None:
            print(f"{cell.model:12s} {cell.label:16s} {cell.precision:5s} not built: {cell.reason}")
            continue
        median_round = cell.p50s.index(sorted(cell.p50s)[len(cell.p50s) // 2])
        ci = cell.intervals[median_round]
        interval = f"[{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "none"
        m = cell.metrics
        print(f"{cell.model:12s} {cell.label:16s} {cell.precision:5s} {cell.p50:9.4f} {interval:>28s} "
              f"{m.get('build_seconds', 0):8.2f} {m.get('compile_seconds', float('nan')):9.2f} "
              f"{m.get('tuning_seconds', float('nan')):9.2f} {m.get('top1_agreement', 0):8.3f} "
              f"{m.get('rel_l2_error', float('nan')):9.2e}{'' if cell.ok else '  FIDELITY'}")
    print(f"\nwindows watched by cpu_interference: {WINDOWS['clean']} clean, {WINDOWS['disturbed']} "
          f"disturbed; cpu count {os.cpu_count()}, one thread per cell, batch {BATCH}, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"BENCH backend_cells_ok {sum(cell.ok for cell in cells)}")
    speedups = []
    for model in dict.fromkeys(cell.model for cell in cells):
        mine = {(c.label, c.precision): c for c in cells if c.model == model and c.ok}
        untuned, tuned = mine.get(("tvm", "fp32")), mine.get((f"tvm-tuned{tuning_trials}", "fp32"))
        if untuned and tuned:
            speedups.append(untuned.p50 / tuned.p50)
            print(f"tvm {model}: untuned {untuned.p50:.4f} ms, tuned ({tuning_trials} trials) "
                  f"{tuned.p50:.4f} ms: {untuned.p50 / tuned.p50:.3f}x")
    # nan: no model had both TVM cells (TVM not installed, or a cell failed).
    print(f"BENCH tvm_tuning_speedup {statistics.median(speedups) if speedups else math.nan:.3f}")
    for model in dict.fromkeys(cell.model for cell in cells):
        mine = [c for c in cells if c.model == model and c.ok]
        reference = next((c for c in mine if (c.label, c.precision) == ("onnxruntime", "fp32")), None)
        if reference is None or not mine:
            continue
        best = min(mine, key=lambda c: c.p50)
        print(f"{model}: best {best.label} {best.precision} {best.p50:.4f} ms; onnxruntime fp32 "
              f"{reference.p50:.4f} ms")
        print(f"BENCH best_vs_ort_fp32_{model} {best.p50 / reference.p50:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuning-trials", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--quick", action="store_true",
                        help="ONNX Runtime fp32 on every model, one epoch, one round "
                             "(--rounds, --models ignored)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.models = 1, ",".join(MODELS)
    window = QUICK_WINDOW_S if args.quick else None
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    backends = installed_backends()
    specs = models(args.quick)
    cells: list[Cell] = []
    with tempfile.TemporaryDirectory(prefix="dse-backends-matrix-") as scratch:
        for model in args.models.split(","):
            wanted = cells_for(model, backends, args.tuning_trials)
            for cell in quick_cells(wanted) if args.quick else wanted:
                start = time.perf_counter()
                prepare(cell, specs[model], Path(scratch))
                print(f"built {model} {cell.label} {cell.precision} in "
                      f"{time.perf_counter() - start:.1f} s{': ' + cell.reason if cell.reason else ''}",
                      flush=True)
                cells.append(cell)
        built = [cell for cell in cells if cell.runner is not None]
        for index in range(args.rounds):
            for cell in built:
                time_cell(cell, window)
            print(f"round {index + 1} of {args.rounds} timed", flush=True)
        for cell in built:
            cell.runner.close()
    report(cells, args.tuning_trials)


if __name__ == "__main__":
    main()
