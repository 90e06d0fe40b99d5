"""The measurement of one prepared candidate on its device: the timed window, measured again while
it is disturbed or unstable (the interference policy), the sustained and offline runs, and the
metrics and provenance they give.

The device worker calls :func:`measure_prepared` with the node held exclusively; everything here
runs inside that measurement.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING

from dse.core import Candidate, Measurement
from dse.measure import (
    PERCENTILES,
    LatencyStats,
    Probe,
    drift_pct,
    measure_latency,
    measure_offline,
    measure_sustained,
    measurement_quality,
    model_footprint_mb,
    next_run,
    rss_bytes,
    trim_heap,
)
from dse.spec import MeasureSpec
from dse.trial.telemetry_window import TelemetryWindow

if TYPE_CHECKING:
    # Only for the annotations: prepare pulls in torch-side modules the actor loads lazily.
    from dse.measure import RunToRun
    from dse.trial.prepare import PreparedCandidate


def measure_prepared(candidate: Candidate, prepared: PreparedCandidate, measure: MeasureSpec,
                     provenance: dict[str, str], *, probes: list[Probe],
                     run_to_run: RunToRun | None, run_to_run_note: str) -> Measurement:
    """Time ``prepared`` under ``measure`` with the device's ``probes`` around the window;
    ``run_to_run`` is the device's calibration (``note`` says where it came from, or why none)."""
    runner, example = prepared.runner, prepared.example
    metrics = dict(prepared.metrics)
    missing: dict[str, str] = dict(prepared.missing)
    window = TelemetryWindow(probes, missing)

    # What a deployment calls: the example bound to the runtime once (Runner.bound_call).
    call = runner.bound_call(example)

    # Freed heap back to the system before the window: RSS in it is what is live.
    trim_heap()
    try:
        sustained = measure.sustained_seconds > 0
        # Telemetry covers the sustained run when there is one (that is where a device heats
        # up), else exactly the timed single-stream window.
        policy = measure.interference
        floor = run_to_run if measure.run_to_run == "auto" else None
        stats, disturbance, remeasured_because = _settled_latency(
            call, measure, window, floor, runner.runtime_clock(call))
        metrics.update(latency_metrics(stats, candidate.batch_size, missing,
                                       required=measure.required_precision()))
        record_footprint(prepared.rss_before_runner, prepared.runner.borrowed_bytes, metrics,
                         missing)
        if "flops_m" in metrics and "latency_p50_ms" in metrics and stats.p50_ms > 0:
            # The rate reached at the median call: the roofline's y-axis.
            metrics["achieved_gflops"] = (metrics["flops_m"] * 1e6 * candidate.batch_size
                                          / (stats.p50_ms / 1e3) / 1e9)
        telemetry_stats = stats
        if sustained:
            run = measure_sustained(call, seconds=measure.sustained_seconds, on_window=window.mark)
            metrics["latency_drift_pct"] = drift_pct(run.samples_ms)
            telemetry_stats = run
        if measure.offline_concurrency > 0:
            offline = measure_offline(call, batch_size=candidate.batch_size,
                                      concurrency=measure.offline_concurrency,
                                      seconds=measure.offline_seconds)
            metrics["offline_throughput_sps"] = offline.throughput_sps
    finally:
        # A runner that crashed mid-window must not leave samplers running into the next trial.
        window.close()
    metrics.update(window.summarize(telemetry_stats.window_calls * candidate.batch_size))
    if sustained:
        disturbance = window.disturbance(policy)
    provenance.update(window.provenance())
    flagged = bool(disturbance) and policy.action != "ignore"
    provenance.update({
        "remeasures": str(len(remeasured_because)),
        "remeasured_because": " | ".join(remeasured_because),
        "disturbed": str(flagged),
        "disturbance": disturbance})
    provenance.update(measurement_quality(stats, flagged, measure.required_precision()))
    provenance.update(prepared.provenance)
    provenance.update(_window_provenance(window, stats, measure.required_precision()))
    provenance["run_to_run"] = (run_to_run_note if measure.run_to_run == "auto"
                                else "off (measurement.run_to_run)")
    provenance.update(_stats_provenance(stats))
    provenance["timer"] = measure.timer
    samples = {"latency_ms": stats.samples_ms, **window.trace_samples()}
    return Measurement(candidate.candidate_id, "ok", metrics=metrics, missing=missing,
                       samples=samples, provenance=provenance)


def _settled_latency(call: Callable[[], object], measure: MeasureSpec, window: TelemetryWindow,
                     floor: RunToRun | None, runtime_clock: Callable[[], float] | None,
                     ) -> tuple[LatencyStats, str, list[str]]:
    """The single-stream latency run, measured again while it falls short
    (:func:`dse.measure.remeasure.next_run`: a disturbed or unstable window, an underpowered or
    imprecise run); ``runtime_clock`` is the runner's own clock of the call, where it keeps one
    (:meth:`dse.backends.base.Runner.runtime_clock`). The last run's statistics, why its window
    was disturbed ("" when it was not, or when a sustained run carries the window and is judged
    instead), and why each earlier run was measured again."""
    sustained = measure.sustained_seconds > 0
    policy = measure.interference
    arguments = measure.latency_arguments()
    precision = measure.required_precision()
    remeasured_because: list[str] = []
    done: list[str] = []
    while True:
        stats = measure_latency(
            call, **arguments, on_window=None if sustained else window.mark, run_to_run=floor,
            runtime_clock=runtime_clock)
        disturbance = "" if sustained else window.disturbance(policy)
        again = next_run(stats, disturbance, done, arguments, policy, precision)
        if again is None:
            return stats, disturbance, remeasured_because
        remeasured_because.append(again.reason)
        done.append(again.kind)
        arguments = again.arguments
        time.sleep(policy.wait_s)


def record_footprint(rss_before_runner: int | None, borrowed_bytes: int,
                     metrics: dict[str, float], missing: dict[str, str]) -> None:
    """``memory_model_mb`` once the runner is warm and timed (see ``dse.measure.footprint``):
    what the process grew by since ``rss_before_runner``, with the ``borrowed_bytes`` the runner
    runs from counted in."""
    if rss_before_runner is None:
        missing["memory_model_mb"] = "no resident-memory reading before the runner was built"
        return
    value, why = model_footprint_mb(rss_before_runner, rss_bytes(), borrowed_bytes)
    if value is None:
        missing["memory_model_mb"] = why
    else:
        metrics["memory_model_mb"] = value


def _window_provenance(window: TelemetryWindow, stats: LatencyStats,
                       precision: Mapping[str, float]) -> dict[str, str]:
    """When the window was, and how close the run came to its target."""
    return {
        "window_start": f"{window.start:.6f}",
        "window_end": f"{window.end:.6f}",
        "timed_iters": str(stats.n),
        "target_rel_ci": f"{stats.target_rel_ci:g}",
        "achieved_rel_ci": f"{stats.rel_ci:.5f}",
        "target_met": str(stats.target_met),
        # Each required percentile's precision as the run reached it, against its target.
        **{f"achieved_rel_ci_{name}": f"{stats.own_rel_ci.get(name, math.inf):.5f}"
           for name in precision},
        **{f"precision_{name}": f"{target:g}" for name, target in precision.items()},
        "window_extended": str(stats.extended),
        "stationary": str(stats.stationary),
        "halves_shift_pct": f"{stats.halves_shift_pct:.2f}",
    }


def _stats_provenance(stats: LatencyStats) -> dict[str, str]:
    """How the run was made: its blocks, sample floor, warm-up and the harness's own costs."""
    return {
        "run_to_run_cv_p50": f"{stats.run_to_run_cv:.5f}",
        "blocks": str(stats.blocks),
        "block_p50_ms": " ".join(f"{v:.6g}" for v in stats.block_p50_ms),
        "min_samples": str(stats.min_samples),
        "underpowered": str(stats.underpowered),
        "warmup_iters": str(stats.warmup_iters),
        "timer_overhead_ns": f"{stats.timer_overhead_ns:.0f}",
        "stopping_check_seconds": f"{stats.check_seconds:.6f}",
        "harness_first_call_ms": f"{stats.first_call_ms:.4f}",
        # The runtime's own clock of the same calls, where it keeps one (OpenVINO): what its
        # benchmark tool reports, and how much of each call was the way in from Python.
        **({"runtime_clock_p50_ms": f"{stats.runtime_p50_ms:.6g}",
            "runtime_call_overhead_us": f"{stats.runtime_overhead_us:.3g}"}
           if not math.isnan(stats.runtime_p50_ms) else {}),
    }


def latency_metrics(stats: LatencyStats, batch_size: int, missing: dict[str, str],
                    required: Collection[str] = ()) -> dict[str, float]:
    """The latency metrics of a run. A percentile is reported only with its 95% confidence
    interval: one the samples cannot support (a p99 of 30 calls is their maximum, not a p99) is
    missing, with why, and so is the throughput when the median is — except a ``required``
    percentile (one an objective or constraint needs) of an underpowered run: its value is kept
    and its interval missing, so the trial stays a result the search learns from, and its label
    (``underpowered``) keeps it off the front."""
    metrics = {
        "latency_mean_ms": stats.mean_ms, "latency_std_ms": stats.std_ms,
        "latency_min_ms": stats.min_ms, "latency_max_ms": stats.max_ms,
        "latency_iqr_ms": stats.iqr_ms,
    }
    for name, _ in PERCENTILES:
        value, ci = getattr(stats, f"{name}_ms"), getattr(stats, f"{name}_ci_ms")
        if ci is not None:
            metrics[f"latency_{name}_ms"] = value
            if name in ("p50", "p99"):
                metrics[f"latency_{name}_ci_low_ms"], metrics[f"latency_{name}_ci_high_ms"] = ci
            continue
        reason = stats.why_no_ci(dict(PERCENTILES)[name])
        if name in required and stats.underpowered:
            metrics[f"latency_{name}_ms"] = value
        else:
            missing[f"latency_{name}_ms"] = reason
        if name in ("p50", "p99"):
            missing[f"latency_{name}_ci_low_ms"] = missing[f"latency_{name}_ci_high_ms"] = reason
    if "latency_p50_ms" in metrics:
        metrics["throughput_sps"] = stats.throughput(batch_size)
    else:
        missing["throughput_sps"] = "comes from the median latency, which is missing"
    if stats.blocks > 1:
        metrics["between_run_cv"] = stats.between_run_cv
    else:
        missing["between_run_cv"] = "measured in one block (measurement.blocks = 1)"
    return metrics
