"""How long `dse report` takes to render a 10,000-trial campaign, and how big the page gets.

The study is written the way a campaign writes it, into a real ``study.db`` (SQLite): candidates
come from the quickstart search space and the local-cpu profile through ``suggest_candidate``
(Optuna's random sampler proposes them, so each trial also carries its parameters and
distributions), each trial gets the user attributes the search loop sets (candidate, its id,
status, reason, metrics, missing metrics, provenance; ``reused_from`` for a repeated candidate,
as the loop reuses the earlier measurement) and its constraint through Optuna. The metric values
come from a seeded model of the space (bigger, wider, higher-precision models are more accurate
and slower), since ten thousand real measurements would take days; the report reads values, not
where they came from. About 4% of trials are infeasible and 2% failed, with reasons.

Figures (targets from issue 8: at most 10 s, at most 15 MB):

    BENCH report_seconds <s>   write_dashboard(run folder, page): read the study, build, write
                               (median of --repeat runs)
    BENCH report_mb <MB>       size of the page
    BENCH report_ratio <x>     report_seconds / the time to read the study into the trials
                               table alone (load_campaign + trials_frame, the same run)

Then the split of the time by stage and of the page by part, to show where a miss comes from.

    .venv/bin/python benchmarks/report_scale.py [--trials 10000] [--repeat 3] [--keep DIR]
                                                [--profile] [--quick]

``--quick``: QUICK_TRIALS trials, one timed run.

Writing the study takes minutes (about 6.5 for 10,000 trials on a 2-core machine); with --keep DIR
the study stays in DIR and later runs reuse it.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import pstats
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from plotly.offline import get_plotlyjs

from dse.core.measurement import Measurement
from dse.report.dashboard import dashboard_html, dashboard_info, write_dashboard
from dse.results import (
    competing_mask,
    front_frame,
    load_campaign,
    study_objectives,
    trials_frame,
)
from dse.search.space import suggest_candidate
from dse.search.study import open_study
from dse.spec import SamplerSpec
from dse.spec.loading import load_profile, load_search_space

REPO = Path(__file__).resolve().parents[1]
TARGET_SECONDS, TARGET_MB = 10.0, 15.0
QUICK_TRIALS = 100
BENCH_NAMES = ("report_seconds", "report_mb", "report_ratio")
CAMPAIGN = "report-scale"
PRECISION_SPEED = {"fp32": 1.0, "fp16": 0.7, "bf16": 0.75, "int8": 0.45}
PRECISION_LOSS = {"fp32": 0.0, "fp16": 0.001, "bf16": 0.004, "int8": 0.012}
# What a run on this VM records as missing (from a real quickstart trial).
MISSING = {
    "energy_per_inference_mj": "no RAPL powercap domain under /sys/class/powercap: the directory "
                               "does not exist (no powercap driver loaded, or a VM that does "
                               "not expose RAPL)",
    "power_mean_w": "no RAPL powercap domain under /sys/class/powercap: the directory does not "
                    "exist (no powercap driver loaded, or a VM that does not expose RAPL)",
    "temperature_peak_c": "no thermal zone under /sys/class/thermal",
    "clock_drop_pct": "no cpufreq folder under /sys/devices/system/cpu/cpu*/ (no cpufreq "
                      "driver: usual in a virtual machine)",
    "throttled_fraction": "no thermal_throttle folder under /sys/devices/system/cpu/cpu*/ "
                          "(Intel thermal interrupt reporting; absent on AMD, ARM and most "
                          "virtual machines)",
}
HOST_PROVENANCE = {
    "host": "vm", "kernel": "6.18.44", "platform": "Linux-6.18.44-x86_64-with-glibc2.36",
    "python": "3.11.7", "cpu_count": "2", "dse_version": "0.1.0", "cpu_model": "AMD EPYC",
    "version_torch": "2.13.0+cpu", "version_onnxruntime": "1.32.0", "version_onnx": "1.23.2",
    "version_numpy": "2.4.6", "version_ray": "2.60.0", "version_optuna": "5.0.0",
    "device_profile": "local-cpu", "device_kind": "cpu", "niceness": "0",
}


def measure(candidate: dict[str, Any], rng: np.random.Generator) -> Measurement:
    """A measurement of ``candidate`` by the seeded model: metrics named and shaped as the
    harness and quality stage report them."""
    arch, batch, precision = candidate["arch"], candidate["batch_size"], candidate["precision"]
    size = (arch["width_mult"] * arch["depth"] * arch["num_stages"] * arch["expand_ratio"] / 4
            * arch["kernel_size"] / 3)
    accuracy = min(1.0, 0.8 + 0.18 * (1 - math.exp(-size)) - PRECISION_LOSS[precision]
                   + rng.normal(0, 0.004))
    threads = next(iter(candidate["knobs"].values()))
    runtime = 0.02 if candidate["backend"] == "onnxruntime" else 0.08  # per-call overhead, ms
    p50 = (runtime + 0.03 * size * batch * PRECISION_SPEED[precision] / threads) * float(
        rng.lognormal(0, 0.05))
    p99 = p50 * (1.15 + float(rng.exponential(0.2)))
    mean = p50 * 1.05
    metrics = {
        "accuracy": accuracy, "params_m": 0.01 * size, "model_size_mb": 0.05 * size,
        "train_seconds": 2.0 + size, "latency_p50_ms": p50, "latency_p90_ms": p50 * 1.1,
        "latency_p95_ms": p50 * 1.15, "latency_p99_ms": p99, "latency_mean_ms": mean,
        "latency_std_ms": 0.1 * mean, "latency_min_ms": 0.8 * p50, "latency_max_ms": 1.3 * p99,
        "first_call_ms": 2 * p99, "throughput_sps": batch / mean * 1000,
        "latency_p50_ci_low_ms": 0.97 * p50, "latency_p50_ci_high_ms": 1.03 * p50,
        "process_rss_peak_mb": 150 + 4 * size * batch + float(rng.normal(0, 5)),
        # The space's constraint's metric (memory_model_mb <= 128): some rows break it.
        "memory_model_mb": 0.2 * size * batch + float(rng.uniform(0, 20)),
    }
    provenance = {**HOST_PROVENANCE, "backend": candidate["backend"], "precision": precision,
                  "threads": str(threads), "timed_iters": str(int(300 + rng.integers(0, 400))),
                  "window_start": f"{1.79e9 + rng.uniform(0, 1e5):.6f}",
                  "achieved_rel_ci": f"{rng.uniform(0.005, 0.05):.5f}", "target_met": "True"}
    draw = rng.uniform()
    if draw < 0.04:
        return Measurement("", "infeasible", f"build error: {precision} export of a "
                           f"{arch['kernel_size']}x{arch['kernel_size']} depthwise convolution "
                           "is not supported", provenance=provenance)
    if draw < 0.06:
        return Measurement("", "failed", "timed out after 120 s while measuring",
                           metrics={"accuracy": accuracy}, missing=dict(MISSING),
                           provenance=provenance)
    return Measurement("", "ok", metrics=metrics, missing=dict(MISSING), provenance=provenance)


def write_study(run_dir: Path, trials: int, seed: int = 0) -> None:
    """``run_dir/study.db`` holding ``trials`` finished trials of a quickstart-shaped campaign."""
    space = load_search_space(REPO / "search_spaces" / "cnn-digits.yaml")
    profile = load_profile(REPO / "hw_profiles" / "local-cpu.yaml")
    objectives = [o.metric for o in space.objectives]
    constraint = space.constraints[0]
    rng = np.random.default_rng(seed)
    # Proposed in memory, then stored trial by trial with add_trials: the same rows as if the
    # loop had told them to the SQLite study, without a transaction per attribute. Still about
    # 40 ms a trial through Optuna's ORM (10,000: ~6.5 min here), hence --keep.
    scratch = optuna.create_study(directions=["maximize", "minimize", "maximize"],
                                  sampler=optuna.samplers.RandomSampler(seed=seed))
    known: dict[str, tuple[int, Measurement]] = {}
    for _ in range(trials):
        trial = scratch.ask()
        candidate = suggest_candidate(trial, space, profile)
        data = candidate.to_dict()
        trial.set_user_attr("candidate", data)
        trial.set_user_attr("candidate_id", candidate.candidate_id)
        if candidate.candidate_id in known:  # the loop reuses an identical candidate's result
            number, result = known[candidate.candidate_id]
            trial.set_user_attr("reused_from", number)
        else:
            result = measure(data, rng)
            known[candidate.candidate_id] = (trial.number, result)
            trial.set_user_attr("provenance", result.provenance)
        for name in ("status", "reason", "metrics", "missing"):
            trial.set_user_attr(name, getattr(result, name))
        if result.status != "ok":
            scratch.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        trial.set_constraint(str(constraint),
                             constraint.violation(result.metrics[constraint.metric]))
        scratch.tell(trial, [result.metrics[m] for m in objectives])
    study = open_study(run_dir, CAMPAIGN, space, SamplerSpec(name="random", seed=seed))
    study.add_trials(scratch.get_trials(deepcopy=False))


def page_parts(page: str) -> dict[str, float]:
    """MB of the page by part: plotly.js, each figure's data, the rest (tables, header)."""
    scripts = re.findall(r"<script[^>]*>.*?</script>", page, flags=re.S)
    plotlyjs = str(get_plotlyjs())
    parts = {"plotly.js": sum(len(s) for s in scripts if plotlyjs in s)}
    for div in ("dse-pareto", "dse-parallel"):
        parts[f"{div} figure"] = sum(len(s) for s in scripts
                                     if f'"{div}"' in s and plotlyjs not in s)
    parts["rest"] = len(page) - sum(parts.values())
    # Part of the figures: what the hover boxes show (per-point texts or custom data).
    decoder, hover = json.JSONDecoder(), 0
    for match in re.finditer(r'"(?:text|customdata)":(?=\[)', page):
        hover += decoder.raw_decode(page, match.end())[1] - match.end()
    parts["of which hover data"] = hover
    return {name: size / 1e6 for name, size in parts.items()}


def profile_report(run_dir: Path, page: Path) -> None:
    """The functions one ``write_dashboard`` spends its time in, by cumulative time."""
    profiler = cProfile.Profile()
    profiler.runcall(write_dashboard, run_dir, page)
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)


def median_seconds(action: Callable[[], object], repeat: int) -> float:
    """The median wall time of ``repeat`` calls (this machine is shared: one call can be slow)."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def stages(run_dir: Path) -> tuple[dict[str, float], str]:
    """Seconds of each stage of one dashboard, and its HTML: Optuna reading the trials, the trials
    table, the rest of the infos, the HTML. The infos are computed on an in-memory copy of the
    study so that the read is counted once."""
    started = time.perf_counter()
    [study] = load_campaign(run_dir)
    trials = study.get_trials(deepcopy=False)
    read = time.perf_counter() - started
    copy = optuna.create_study(study_name=study.study_name, directions=study.directions)
    for key, value in study.user_attrs.items():
        copy.set_user_attr(key, value)
    copy.add_trials(trials)
    started = time.perf_counter()
    trials_frame(copy)
    frame = time.perf_counter() - started
    started = time.perf_counter()
    info = dashboard_info(copy)
    infos = time.perf_counter() - started - frame  # dashboard_info builds the table too
    started = time.perf_counter()
    text = dashboard_html(info)
    html = time.perf_counter() - started
    return {"Optuna reads the trials": read, "trials table": frame, "other infos": infos,
            "HTML": html}, text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs; the median counts")
    parser.add_argument("--keep", type=Path, help="write the run folder and page here (and "
                        "reuse a study already there: writing 10,000 trials takes minutes)")
    parser.add_argument("--profile", action="store_true",
                        help="also print cProfile's top functions of one write_dashboard")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_TRIALS} trials, one timed run (--trials, --repeat ignored)")
    args = parser.parse_args()
    if args.quick:
        args.trials, args.repeat = QUICK_TRIALS, 1
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory() as scratch:
        root = args.keep or Path(scratch)
        run_dir = root / "runs" / CAMPAIGN
        started = time.perf_counter()
        if not (run_dir / "study.db").is_file():
            write_study(run_dir, args.trials)
        print(f"study: {run_dir / 'study.db'} ({(run_dir / 'study.db').stat().st_size / 1e6:.1f}"
              f" MB, ready in {time.perf_counter() - started:.1f} s)")

        # The reference: reading the study into the trials table, nothing drawn.
        reference = median_seconds(lambda: trials_frame(load_campaign(run_dir)), args.repeat)
        page = root / "dashboards" / f"{CAMPAIGN}.html"
        seconds = median_seconds(lambda: write_dashboard(run_dir, page), args.repeat)
        megabytes = page.stat().st_size / 1e6

        [study] = load_campaign(run_dir)
        trials = trials_frame(study)
        front = front_frame(trials, study_objectives(study))
        print(f"trials table: {len(trials)} rows x {len(trials.columns)} columns; "
              f"{int(competing_mask(trials).sum())} feasible; front {len(front)} points")
        split, text = stages(run_dir)
        print("seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in split.items()))
        print("page MB: " + ", ".join(f"{k} {v:.2f}" for k, v in page_parts(text).items()))
        if args.profile:
            profile_report(run_dir, root / "profiled.html")
        print(f"BENCH report_seconds {seconds:.2f}")
        print(f"BENCH report_mb {megabytes:.2f}")
        print(f"BENCH report_ratio {seconds / reference:.2f}")
        verdict = [f"{seconds:.1f} s {'<=' if seconds <= TARGET_SECONDS else '>'} "
                   f"{TARGET_SECONDS:.0f} s", f"{megabytes:.1f} MB "
                   f"{'<=' if megabytes <= TARGET_MB else '>'} {TARGET_MB:.0f} MB"]
        print(f"targets: {'; '.join(verdict)} (median of {args.repeat}; reference: reading the "
              f"study into the trials table, {reference:.2f} s)")


if __name__ == "__main__":
    main()
