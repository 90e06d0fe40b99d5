"""Does dse's measurement hold on a machine that is not quiet? Six checks, on this machine.

1. **Repeat coverage.** Each artifact (ONNX Runtime, sub-ms and ~0.4 ms; torch eager, ~15 ms) is
   measured RUNS times, each run in its own process, artifacts alternating, with the campaign's
   default protocol (``MeasureSpec()``: blocks, floors, caps). For every ordered pair of runs
   (i, j) of one artifact: is run j's p50 inside run i's reported 95% interval? That is what a
   user relies on when a second campaign, or a colleague's, measures the same thing. First the
   device is calibrated as ``dse calibrate`` does it (its reference workloads, not these
   artifacts, in fresh processes spread in time), and every run's intervals carry that floor,
   as a campaign's do; the coverage of the runs' own intervals is printed beside it.
   ``repeat_coverage`` is the share of pairs that hold (with the floor);
   ``seconds_per_candidate`` the median time the protocol took (warm-ups and blocks included).
   With ``--blocks 1 3 5`` every count is measured, interleaved, so the default can be chosen on
   the same machine state; the BENCH lines are for the campaign default.
2. **Interference.** WINDOWS windows of the real probe ``cpu_interference`` around a real
   measurement, in random order: a third quiet, a third with one busy loop beside it (a free core
   remains), a third with a busy loop on every CPU (the benchmark's own child processes, ended by
   PID). Recall (all-CPU windows flagged) and false alarms (quiet or beside windows flagged) of the
   default policy's ``disturbed`` rule, with each arm's median p50 and p99.
3. **Front under load.** The same grid campaign (the bring-your-own ONNX space, same candidates)
   run twice through the CLI: once quietly, once with a hog (a busy loop on every CPU) started
   when half its trials are done and ended HOG_BURST_S later. ``dirty_front_points``: trials on
   the loaded run's reported front whose measurement_quality is not ok (must be 0);
   ``front_jaccard``: the two reported fronts' overlap, by candidate.
4. **A slower CPU.** The quickstart campaign on one core shared with a busy loop (both pinned to
   CPU 0): ``slow_cpu_failed_trials`` (trials failed for sample counts, must be 0),
   ``negative_or_absurd_bounds`` (interval bounds below 0 or below the trial's fastest call, over
   every trial), ``front_imprecise_points`` (front points wider than the precision target) and
   ``slow_cpu_seconds`` (the campaign's wall time).
5. **The runtime's own tool** (``vendor_harness.py``): dse's p50 against OpenVINO's
   ``benchmark_app`` and LiteRT's benchmark on the same artifacts, interleaved:
   ``vendor_harness_max_dev`` (on the clock the tool reports; target <= 0.05) and
   ``vendor_harness_max_dev_caller`` (dse's host clock: the call from Python included).
6. **Duels** (``duel_resolution.py``): pairs of known difference duelled while a busy loop runs:
   ``duel_resolution_pct``, ``duel_wrong_order``, ``duel_seconds``.

Run: ``.venv/bin/python benchmarks/measure_calibration.py [--runs 10] [--blocks 3]
[--calibration-runs 10] [--calibration-gap 10] [--skip PART ...] [--quick]``. Ends with
``BENCH`` lines (BENCH_NAMES; those of a part left out with ``--skip`` are not printed).
``--quick`` checks that every part runs (QUICK: short calibration windows, one artifact run
twice, three windows, campaigns of one trial, the slow part's trained one epoch on a core not
shared; parts 5 and 6 in their own quick modes); its figures mean nothing. Busy-machine readings
(other processes' CPU, steal) are printed beside each part: a noisy neighbour outside this VM
shows in neither, only in the spread of the numbers.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = {
    "ort-small": ("onnxruntime", {"num_stages": 1, "depth": 1, "width_mult": 0.5,
                                  "kernel_size": 3, "expand_ratio": 2}),
    "ort-medium": ("onnxruntime", {"num_stages": 2, "depth": 2, "width_mult": 1.0,
                                   "kernel_size": 3, "expand_ratio": 4}),
    "torch-large": ("torch", {"num_stages": 3, "depth": 3, "width_mult": 2.0,
                              "kernel_size": 5, "expand_ratio": 6}),
}
BATCH = 32
WINDOWS = 30
HOG = "while True: pass"
HOG_BURST_S = 10.0  # the hog of the front-under-load part: another job that comes and goes
BENCH_NAMES = ("repeat_coverage", "seconds_per_candidate", "interference_recall",
               "interference_false_alarm", "dirty_front_points", "front_jaccard",
               "slow_cpu_failed_trials", "negative_or_absurd_bounds", "front_imprecise_points",
               "slow_cpu_seconds", "vendor_harness_max_dev", "vendor_harness_max_dev_caller",
               "duel_resolution_pct", "duel_wrong_order", "duel_seconds")
# Its quick mode runs real campaigns (Ray, training, measuring): tens of seconds, so
# benchmarks/quick.py starts it first (docs/benchmarks.md has the times).
QUICK_CAMPAIGNS = True
# One of the three longest quick modes: CI's budget leaves them out (quick.py --ci).
QUICK_IN_CI = False
# Parts 5 and 6 are these scripts' own functions, run here (in their quick modes with --quick).
PARTS = (("the runtime's own tool", "vendor_harness.py"), ("duels", "duel_resolution.py"))


@dataclass(frozen=True)
class Sizes:
    """How much each part measures."""

    artifacts: tuple[str, ...]  # of ARTIFACTS: the repeat part's
    windows: int  # the interference part's
    window_s: tuple[float, float]  # min and max seconds of each interference window
    front_trials: int  # each front campaign's budget
    hog_after: int  # front: trials of the loaded campaign before its hog starts
    measurement: str  # the front and slow campaigns' extra measurement settings (YAML)
    slow_trials: int | None  # the slow part's budget (None: the quickstart's)
    slow_epochs: int | None  # the slow part's training epochs (None: the space's)
    slow_hog: bool  # whether a busy loop shares the slow part's core
    calibration_s: float | None  # a cap on each calibration window (None: the default's)


FULL = Sizes(tuple(ARTIFACTS), WINDOWS, (0.5, 1.0), 12, 6, "", None, None, True, None)
# --quick checks that every part runs; its figures mean nothing. Its campaigns take no second
# looks (each a measurement more) and train one epoch, and the slow part's core is not shared:
# beside a busy loop every window is disturbed and waited out and measured again, minutes more.
QUICK = Sizes(("ort-small",), 3, (0.2, 0.4), 1, 0, "second_looks: 0", 1, 1, False, 0.3)


# ----------------------------------------------------------------------------- one run, in a child
def _one_run(kind: str, path: str, blocks: int, gap: float, floor_path: str) -> dict[str, Any]:
    """Load the artifact, measure it with the campaign's default protocol and the device's
    calibrated run-to-run floor, report the outcome (and the interval the run alone gave)."""
    import torch

    from dse.measure import measure_latency
    from dse.measure.run_to_run import load
    from dse.measure.stats import run_quantile_ci
    from dse.spec import MeasureSpec

    torch.set_num_threads(1)
    x = np.random.default_rng(0).random((BATCH, 1, 8, 8), dtype=np.float32)
    if kind == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        feed = {session.get_inputs()[0].name: x}

        def call() -> object:
            return session.run(None, feed)
    else:
        model = torch.load(path, weights_only=False).eval()
        tensor = torch.from_numpy(x)

        def call() -> object:
            with torch.inference_mode():
                return model(tensor)

    spec = MeasureSpec(blocks=blocks, block_gap_s=gap)
    floor = load(Path(floor_path))[0]
    start = time.perf_counter()
    stats = measure_latency(call, target_rel_ci=spec.target_rel_ci, min_iters=spec.min_iters,
                            max_iters=spec.max_iters, min_seconds=spec.min_seconds,
                            max_seconds=spec.max_seconds,
                            warmup_max_seconds=spec.warmup_max_seconds,
                            required_quantiles=spec.required_quantiles(), blocks=blocks,
                            block_gap_s=gap, run_to_run=floor)
    seconds = time.perf_counter() - start
    alone = run_quantile_ci(np.asarray(stats.samples_ms), 0.5, stats.block_sizes)
    return {"p50": stats.p50_ms, "ci": stats.p50_ci_ms, "ci_alone": alone, "n": stats.n,
            "seconds": seconds, "cv": stats.between_run_cv}


def _artifacts(folder: Path, names: tuple[str, ...]) -> dict[str, Path]:
    import torch

    from dse.artifacts.onnx_export import export_onnx
    from dse.models import get_family

    family = get_family("cnn")
    paths = {}
    for name in names:
        kind, arch = ARTIFACTS[name]
        torch.manual_seed(0)
        model = family.build(arch).eval()
        if kind == "onnxruntime":
            paths[name] = folder / f"{name}.onnx"
            export_onnx(model, family.input_shape, paths[name])
        else:
            paths[name] = folder / f"{name}.pt"
            torch.save(model, paths[name])
    return paths


def _child(name: str, path: Path, blocks: int, gap: float, floor: Path) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, __file__, "--child", ARTIFACTS[name][0], str(path),
                          str(blocks), str(gap), str(floor)], capture_output=True, text=True,
                         env=env, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def coverage(runs: list[dict[str, Any]], key: str = "ci") -> tuple[int, int]:
    """(pairs where run j's p50 lies in run i's interval ``key``, ordered pairs)."""
    held = total = 0
    for i, j in itertools.permutations(range(len(runs)), 2):
        total += 1
        ci = runs[i][key]
        held += ci is not None and ci[0] <= runs[j]["p50"] <= ci[1]
    return held, total


# ----------------------------------------------------------------------------------- load readings
def _cpu_busy() -> tuple[int, int, int]:
    """(all ticks, busy ticks, steal ticks) of /proc/stat's cpu line."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields), sum(fields) - idle, fields[7] if len(fields) > 7 else 0


def _load_since(before: tuple[int, int, int]) -> str:
    after = _cpu_busy()
    total = max(after[0] - before[0], 1)
    return (f"machine busy {100 * (after[1] - before[1]) / total:.0f}% (this benchmark "
            f"included), steal {100 * (after[2] - before[2]) / total:.1f}%")


def _start_hog() -> list[subprocess.Popen[bytes]]:
    """A busy loop on every CPU: the measurement must share one (one loop beside it on a free
    core moves neither its p50 nor its p99, and is rightly not called interference)."""
    return [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(os.cpu_count() or 1)]


def _stop(hog: list[subprocess.Popen[bytes]]) -> None:
    for process in hog:
        process.kill()  # by its PID: only this benchmark's own children
        process.wait()


# ------------------------------------------------------------------------------------------ parts
def _calibrate(folder: Path, runs: int, gap_s: float, max_seconds: float | None = None) -> Path:
    """What ``dse calibrate`` does on the local device, before any artifact is measured: the
    reference workloads (not the artifacts below) in fresh processes, with the default protocol
    (``max_seconds``: a shorter cap on each window)."""
    from dse.measure.run_to_run import save
    from dse.spec import MeasureSpec
    from dse.spec.loading import load_profile
    from dse.trial.calibrate import calibrate_device

    profile = load_profile(REPO / "hw_profiles" / "local-cpu.yaml")
    start = time.perf_counter()
    spec = MeasureSpec() if max_seconds is None else MeasureSpec(max_seconds=max_seconds)
    found = calibrate_device(profile, spec, device="this machine", runs=runs, gap_s=gap_s)
    path = folder / "run_to_run.json"
    save(found, path)
    print(f"calibration: {found.describe()}; {time.perf_counter() - start:.0f} s, once per device")
    for name, p50s in found.per_workload.items():
        print(f"    {name} p50 per run: " + ", ".join(f"{v:.4g}" for v in p50s))
    return path


def _report(name: str, k: tuple[int, float], done: list[dict[str, Any]], key: str) -> tuple[int, int]:
    h, t = coverage(done, key)
    p50s = [r["p50"] for r in done]
    widths = [100 * (r[key][1] - r[key][0]) / 2 / r["p50"] if r[key] else float("inf")
              for r in done]
    print("    runs in order (p50 ms, interval ±%): " + ", ".join(
        f"{r['p50']:.4g} ±{w:.1f}" for r, w in zip(done, widths, strict=True)))
    print(f"  blocks {k[0]} gap {k[1]:g} s  {name:11s} p50 {min(p50s):.4f}-{max(p50s):.4f} ms "
          f"(spread {100 * (max(p50s) / min(p50s) - 1):.1f}%)  median ±"
          f"{statistics.median(widths):.1f}%  coverage {h}/{t}  seconds "
          f"{statistics.median(r['seconds'] for r in done):.2f}")
    return h, t


def repeat_part(runs: int, counts: list[tuple[int, float]], default: tuple[int, float],
                calibration_runs: int, calibration_gap_s: float,
                names: tuple[str, ...] = tuple(ARTIFACTS),
                calibration_s: float | None = None) -> tuple[float, float]:
    results: dict[tuple[str, tuple[int, float]], list[dict[str, Any]]] = {
        (name, k): [] for name in names for k in counts}
    before = _cpu_busy()
    with tempfile.TemporaryDirectory() as tmp:
        floor = _calibrate(Path(tmp), calibration_runs, calibration_gap_s, calibration_s)
        paths = _artifacts(Path(tmp), names)
        for _ in range(runs):  # alternating: a slow minute of the host hits every artifact
            for k in counts:
                for name in names:
                    results[(name, k)].append(_child(name, paths[name], *k, floor))
    print(f"repeat: {_load_since(before)}")
    chosen = (0.0, 0.0)
    for k in counts:
        for key, what in (("ci_alone", "the run's own interval"),
                          ("ci", "with the calibrated run-to-run floor")):
            held = total = 0
            print(f"  {what}:")
            for name in names:
                h, t = _report(name, k, results[(name, k)], key)
                held, total = held + h, total + t
            seconds = statistics.median(r["seconds"] for name in names
                                        for r in results[(name, k)])
            print(f"  blocks {k[0]} gap {k[1]:g} s, {what}: coverage {held}/{total} = "
                  f"{held / total:.3f}, median seconds per candidate {seconds:.2f}")
            if k == default and key == "ci":
                chosen = (held / total, seconds)
    return chosen


def _marker(probe: Any, marks: list[float]) -> Any:
    """The window hook: starts the probe as the window opens, notes both ends' times."""
    def mark(opening: bool) -> None:
        marks.append(time.time())
        if opening:
            probe.start()
    return mark


def interference_part(seed: int = 0, windows: int = WINDOWS,
                      window_s: tuple[float, float] = (0.5, 1.0)) -> tuple[float, float]:
    import onnxruntime as ort

    from dse.artifacts.onnx_export import export_onnx
    from dse.measure import measure_latency
    from dse.measure.quality_labels import disturbed
    from dse.measure.telemetry import make_probe
    from dse.measure.telemetry.base import Window
    from dse.models import get_family
    from dse.spec import InterferenceSpec

    policy = InterferenceSpec()
    family = get_family("cnn")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.onnx"
        export_onnx(family.build(ARTIFACTS["ort-medium"][1]).eval(), family.input_shape, path)
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: np.zeros((BATCH, 1, 8, 8), np.float32)}
    probe = make_probe("cpu_interference")
    # A third of the windows quiet, a third with one busy loop beside the measurement (a free core
    # remains: not interference, and it must not be called so), a third with one on every CPU.
    arms = ["quiet", "beside", "hog"] * (windows // 3 + 1)
    arms = arms[:windows] if (os.cpu_count() or 1) > 1 else ["quiet", "hog"] * (windows // 2)
    random.Random(seed).shuffle(arms)
    latencies: dict[str, list[tuple[float, float]]] = {arm: [] for arm in set(arms)}
    flagged = dict.fromkeys(set(arms), 0)
    for arm in arms:
        hog = (_start_hog() if arm == "hog" else
               [subprocess.Popen([sys.executable, "-c", HOG])] if arm == "beside" else None)
        marks: list[float] = []
        try:
            stats = measure_latency(lambda: session.run(None, feed), min_seconds=window_s[0],
                                    max_seconds=window_s[1], blocks=3,
                                    required_quantiles=(0.5, 0.99),
                                    on_window=_marker(probe, marks))
            trace = probe.stop()
        finally:
            if hog is not None:
                _stop(hog)
        result = probe.summarize(trace, Window(marks[0], marks[-1], 1))
        verdict = disturbed(result, policy.max_foreign_cpu_pct, policy.max_steal_pct,
                            max_cpu_wait_pct=policy.max_cpu_wait_pct)
        latencies[arm].append((stats.p50_ms, stats.p99_ms))
        flagged[arm] += bool(verdict)
        print(f"  {arm:6s}  other processes {result.metrics.get('interference_cpu_pct', math.nan):5.1f}"
              f"% of the CPUs, waited {result.metrics.get('cpu_wait_pct', math.nan):5.1f}%  "
              f"p50 {stats.p50_ms:.4f} p99 {stats.p99_ms:.3f} ms -> "
              f"{'disturbed' if verdict else 'clean'}")
    for arm, values in sorted(latencies.items()):
        print(f"  {arm:6s}: {flagged[arm]} of {len(values)} flagged; median p50 "
              f"{statistics.median(v[0] for v in values):.4f} ms, median p99 "
              f"{statistics.median(v[1] for v in values):.3f} ms")
    negatives = arms.count("quiet") + arms.count("beside")
    return (flagged["hog"] / arms.count("hog"),
            (flagged.get("quiet", 0) + flagged.get("beside", 0)) / negatives)


def _front_campaign(folder: Path, name: str, hog_after: int | None, measurement: str = "",
                    budget: int = 12) -> tuple[set[str], int, int]:
    """One grid campaign; ``hog_after``: trials done before a hog of HOG_BURST_S starts (None:
    quiet)."""
    experiment = folder / "experiments" / f"{name}.yaml"
    experiment.write_text(
        f"name: {name}\nsearch_space: ../search_spaces/onnx-file-example.yaml\n"
        "devices: [../hw_profiles/local-cpu.yaml]\nsampler: {name: grid, seed: 0}\n"
        f"budget: {{trials: {budget}}}\n"
        + (f"measurement: {measurement}\n" if measurement else ""))
    process = subprocess.Popen([str(Path(sys.executable).parent / "dse"), "run", str(experiment)],
                               stdout=subprocess.PIPE, text=True, cwd=folder,
                               env={**os.environ, "COLUMNS": "200"})
    hog: list[subprocess.Popen[bytes]] | None = None
    started = 0.0
    done = 0
    assert process.stdout is not None
    duel_lines: list[str] = []
    for line in process.stdout:
        if "duel" in line:
            duel_lines.append(line.strip())
        done += line.startswith("#")
        if hog_after is not None and done >= hog_after and hog is None:
            hog, started = _start_hog(), time.monotonic()
        if hog is not None and time.monotonic() - started > HOG_BURST_S:
            _stop(hog)  # checked as lines arrive: the burst may outlast its length a little
            hog = []
    process.wait()
    if hog:
        _stop(hog)
    import pandas as pd

    front = pd.read_csv(folder / "experiments" / "runs" / name / "pareto.csv")
    keys = set(front["candidate_id"])
    dirty = int((front["measurement_quality"] != "ok").sum())
    trials = pd.read_parquet(folder / "experiments" / "runs" / name / "trials.parquet")
    unclean = int((trials["measurement_quality"].fillna("ok") != "ok").sum())
    print(f"  {name}: front {sorted(keys)}; {unclean} of {len(trials)} trials not measured "
          f"cleanly; {' / '.join(duel_lines) or 'no duels'}")
    for _, row in trials[trials["measurement_quality"].fillna("ok") != "ok"].iterrows():
        print(f"    {row['candidate_id']}: {row['measurement_quality']} after "
              f"{int(row['remeasures'])} re-measurement(s)")
    return keys, dirty, unclean


def front_part(measurement: str = "", keep: Path | None = None,
               sizes: Sizes = FULL) -> tuple[int, float]:
    """Two runs of a grid campaign, quiet and with a hog midway (``measurement``: a YAML
    mapping given to both as their ``measurement:``, for a diagnosis; the defaults otherwise):
    the loaded run's front points not measured cleanly, and the two fronts' overlap. ``keep``:
    a new folder to run them in and leave behind (their run folders, for a diagnosis)."""
    if sizes.measurement:  # the sizes' settings, inside the diagnosis's mapping if any
        inner = measurement.strip().removeprefix("{").removesuffix("}").strip()
        measurement = "{" + ", ".join(filter(None, (inner, sizes.measurement))) + "}"
    with tempfile.TemporaryDirectory() as tmp:
        folder = keep or Path(tmp)
        (folder / "experiments").mkdir(parents=True)
        for part in ("search_spaces", "hw_profiles"):
            shutil.copytree(REPO / part, folder / part)
        quiet, _, _ = _front_campaign(folder, "quiet", None, measurement, sizes.front_trials)
        loaded, dirty, _ = _front_campaign(folder, "loaded", sizes.hog_after, measurement,
                                           sizes.front_trials)
    union = quiet | loaded
    return dirty, len(quiet & loaded) / len(union) if union else 1.0


def _pinned(command: list[str], core: int) -> list[str]:
    """``command`` pinned to one core (``taskset``), as a CPU half as fast would run it once
    another process shares that core."""
    return ["taskset", "-c", str(core), *command]


def slow_part(sizes: Sizes = FULL) -> dict[str, float]:
    """The quickstart campaign on one core shared with a busy loop (both pinned to CPU 0): a
    machine half as fast for everything dse runs, Ray included. Counts the trials that failed
    for sample counts (``slow_cpu_failed_trials``), every interval bound below 0 or below its
    trial's fastest call (``negative_or_absurd_bounds``), and front points whose objective
    interval is wider than the campaign's precision target (``front_imprecise_points``)."""
    import pandas as pd

    from dse.app.api import load_experiment

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for part in ("search_spaces", "hw_profiles"):
            shutil.copytree(REPO / part, folder / part)
        (folder / "experiments").mkdir()
        text = (REPO / "experiments" / "quickstart.yaml").read_text()
        if sizes.slow_trials is not None:  # the quickstart's own YAML, its numbers replaced
            text = text.replace("trials: 32", f"trials: {sizes.slow_trials}").replace(
                "startup_trials: 12", f"startup_trials: {max(1, sizes.slow_trials // 2)}")
        if sizes.measurement:
            text = text.replace("measurement:\n", f"measurement:\n  {sizes.measurement}\n")
        if sizes.slow_epochs is not None:
            space = folder / "search_spaces" / "cnn-digits.yaml"
            space.write_text(re.sub(r"epochs: \d+", f"epochs: {sizes.slow_epochs}",
                                    space.read_text()))
        experiment = folder / "experiments" / "quickstart.yaml"
        experiment.write_text(text)
        hog = subprocess.Popen(_pinned([sys.executable, "-c", HOG], 0)) if sizes.slow_hog else None
        before = _cpu_busy()
        start = time.perf_counter()
        try:
            done = subprocess.run(_pinned([str(Path(sys.executable).parent / "dse"), "run",
                                           str(experiment)], 0),
                                  cwd=folder, capture_output=True, text=True,
                                  env={**os.environ, "COLUMNS": "200"}, timeout=3600)
        finally:
            if hog is not None:
                _stop([hog])
        took = time.perf_counter() - start
        closing = [line for line in done.stdout.splitlines() if line.startswith("measurement:")]
        print(f"  quickstart on one shared core: exit {done.returncode} in {took:.0f} s; "
              f"{_load_since(before)}")
        print("  " + (closing[0] if closing else done.stderr.strip()[-400:]))
        spec = load_experiment(experiment)
        trials = pd.read_parquet(spec.run_dir / "trials.parquet")
        front = pd.read_csv(spec.run_dir / "pareto.csv")
        objectives = [objective.metric for objective in spec.space.objectives]
        targets = spec.spec.measurement.for_metrics(objectives).required_precision()
    fresh = trials[trials["reused_from"].isna()]
    failed = fresh[fresh["status"] == "failed"]
    for reason in failed["reason"]:
        print(f"    failed: {reason}")
    short = int(failed["reason"].str.contains("too few", regex=False).sum())
    print("  qualities: " + ", ".join(f"{k} {v}" for k, v in
                                      fresh["measurement_quality"].value_counts().items()))
    return {"slow_cpu_failed_trials": short, "slow_cpu_seconds": took,
            "negative_or_absurd_bounds": _absurd_bounds(trials),
            "front_imprecise_points": _imprecise_points(front, targets)}


def _interval_columns(frame: Any) -> list[tuple[str, str, str, str]]:
    """(percentile, value, low, high) column names of every percentile with an interval."""
    found = []
    for name in ("p50", "p90", "p95", "p99", "p999"):
        columns = (f"latency_{name}_ms [ms]", f"latency_{name}_ci_low_ms [ms]",
                   f"latency_{name}_ci_high_ms [ms]")
        if all(column in frame.columns for column in columns):
            found.append((name, *columns))
    return found


def _absurd_bounds(trials: Any) -> int:
    """Interval bounds below zero or below the trial's fastest call."""
    count = 0
    fastest = trials["latency_min_ms [ms]"]
    for _, _, low, high in _interval_columns(trials):
        for column in (low, high):
            bound = trials[column]
            count += int(((bound < 0) | (bound < fastest * (1 - 1e-9))).sum())
    return count


def _imprecise_points(front: Any, targets: dict[str, float]) -> int:
    """Front rows with an objective percentile (or throughput, from p50) whose interval is
    wider than its precision target, from the interval the front itself holds."""
    wide = np.zeros(len(front), dtype=bool)
    for name, value, low, high in _interval_columns(front):
        if name not in targets:
            continue
        half = np.maximum(front[value] - front[low], front[high] - front[value]) / front[value]
        wide |= (half > targets[name]).to_numpy()
    for index in np.flatnonzero(wide):
        print(f"    imprecise front point: trial {front['trial'].iloc[index]}")
    return int(wide.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--blocks", type=int, nargs="+", default=None,
                        help="block counts to compare (default: the campaign default only)")
    parser.add_argument("--gaps", type=float, nargs="+", default=None,
                        help="seconds between blocks to compare (default: the campaign default)")
    parser.add_argument("--calibration-runs", type=int, default=10,
                        help="runs of `dse calibrate` before the artifacts (its default)")
    parser.add_argument("--calibration-gap", type=float, default=10.0,
                        help="seconds between calibration runs (its default)")
    parser.add_argument("--skip", nargs="*", default=[],
                        choices=["repeat", "interference", "front", "slow", "vendor", "duel"])
    parser.add_argument("--front-measurement", default="",
                        help="a YAML mapping for the front part's campaigns' measurement: block "
                             "(a diagnosis, e.g. '{duels: {time_share: 1.0}}'; default: none)")
    parser.add_argument("--front-keep", type=Path, default=None,
                        help="a new folder to run the front part's campaigns in and leave "
                             "behind (default: a temporary one)")
    parser.add_argument("--quick", action="store_true",
                        help="check that every part runs: one artifact, two runs, three "
                             "windows, campaigns of two trials (see QUICK)")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    if args.quick:
        args.runs, args.calibration_runs, args.calibration_gap = 2, 2, 0.0
    from dse.spec import MeasureSpec

    spec = MeasureSpec()
    default = (spec.blocks, spec.block_gap_s)
    counts = [(k, g) for k in (args.blocks or [spec.blocks])
              for g in (args.gaps or [spec.block_gap_s])]
    if default not in counts:
        counts.append(default)
    print(f"cpu count {os.cpu_count()}, one thread per runtime, batch {BATCH}, "
          f"default blocks {spec.blocks}, gap {spec.block_gap_s:g} s")
    if "repeat" not in args.skip:
        repeat, seconds = repeat_part(args.runs, counts, default, args.calibration_runs,
                                      args.calibration_gap, sizes.artifacts,
                                      sizes.calibration_s)
        print(f"BENCH repeat_coverage {repeat:.3f}")
        print(f"BENCH seconds_per_candidate {seconds:.2f}")
    if "interference" not in args.skip:
        before = _cpu_busy()
        recall, false_alarm = interference_part(windows=sizes.windows, window_s=sizes.window_s)
        print(f"interference: {_load_since(before)}")
        print(f"BENCH interference_recall {recall:.2f}")
        print(f"BENCH interference_false_alarm {false_alarm:.2f}")
    if "front" not in args.skip:
        dirty, jaccard = front_part(args.front_measurement, args.front_keep, sizes)
        print(f"BENCH dirty_front_points {dirty}")
        print(f"BENCH front_jaccard {jaccard:.2f}")
    if "slow" not in args.skip:
        slow = slow_part(sizes)
        for name in ("slow_cpu_failed_trials", "negative_or_absurd_bounds",
                     "front_imprecise_points"):
            print(f"BENCH {name} {slow[name]}")
        print(f"BENCH slow_cpu_seconds {slow['slow_cpu_seconds']:.0f}")
    if "vendor" not in args.skip:
        from vendor_harness import compare

        worst, worst_caller = compare(args.quick)
        print(f"BENCH vendor_harness_max_dev {worst:.4f}")
        print(f"BENCH vendor_harness_max_dev_caller {worst_caller:.4f}")
    if "duel" not in args.skip:
        from duel_resolution import duel_part

        duels = duel_part(args.quick, verbose=True)
        print(f"BENCH duel_resolution_pct {duels['duel_resolution_pct']:.2f}")
        print(f"BENCH duel_wrong_order {int(duels['duel_wrong_order'])}")
        print(f"BENCH duel_seconds {duels['duel_seconds']:.2f}")


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "--child":
        print(json.dumps(_one_run(sys.argv[2], sys.argv[3], int(sys.argv[4]),
                                  float(sys.argv[5]), sys.argv[6])))
    else:
        main()
