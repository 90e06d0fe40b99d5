"""The measurement of one prepared generative candidate on its device: its workload's requests timed
by :func:`dse.measure.measure_generation` inside one telemetry window, measured again while the
window was disturbed (the interference policy), and the metrics, label and provenance they give.

The device worker calls :func:`measure_generator` with the node held exclusively.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from dse.core import Measurement
from dse.measure import (
    GenerationStats,
    generation_quality,
    halves_shift_pct,
    measure_generation,
    trim_heap,
    unstable_reason,
    without_interval,
)
from dse.trial.telemetry_window import TelemetryWindow
from dse.trial.timing import record_footprint

if TYPE_CHECKING:
    from dse.core import Candidate
    from dse.measure import Probe
    from dse.spec import MeasureSpec, WorkloadSpec
    from dse.trial.llm_model import PreparedGenerator

# What the window's probes report per inference is, for a generative model, per output token.
_PER_TOKEN = {"energy_per_inference_mj": "energy_per_token_mj"}


def measure_generator(candidate: Candidate, prepared: PreparedGenerator, measure: MeasureSpec,
                      provenance: dict[str, str], *, probes: list[Probe]) -> Measurement:
    """Time ``prepared``'s requests with the device's ``probes`` around them. Requests go on past
    the workload's ``requests`` (up to ``max_requests``) until every percentile of TTFT and TPOT
    that ``measure.percentiles`` holds (the objectives' and constraints') has its interval."""
    workload, runner = prepared.workload, prepared.runner
    metrics = dict(prepared.metrics)
    missing = dict(prepared.missing)
    required = [str(name) for name in (measure.percentiles or ["p50"])
                if name in ("p50", "p99")]
    stream = runner.bound_stream(prepared.prompts, workload.output_tokens)
    policy = measure.interference
    remeasured_because: list[str] = []
    trim_heap()
    while True:
        window = TelemetryWindow(probes, missing)
        try:
            stats = measure_generation(
                stream, batch=candidate.batch_size, prompt_tokens=workload.prompt_tokens,
                output_tokens=workload.output_tokens, warmup_requests=workload.warmup_requests,
                min_requests=workload.requests, min_seconds=workload.min_seconds,
                max_requests=workload.max_requests,
                enough=lambda so_far: not without_interval(so_far.metrics(), required),
                on_window=window.mark)
        finally:
            window.close()
        disturbance = window.disturbance(policy)
        again = disturbance or unstable_reason(stats)
        if not again or policy.action != "remeasure" \
                or len(remeasured_because) >= policy.max_remeasures:
            break
        remeasured_because.append(again)
        time.sleep(policy.wait_s)
    found = stats.metrics()
    for name in without_interval(found, ["p50", "p99"]):
        why = (f"{stats.requests} requests are too few for a 95% interval of "
               f"{name.removesuffix('_ms')}")
        missing[f"{name[:-3]}_ci_low_ms"] = missing[f"{name[:-3]}_ci_high_ms"] = why
    metrics.update(found)
    _record_goodput(stats, workload, metrics, missing, provenance)
    tokens = stats.requests * candidate.batch_size * workload.output_tokens
    for name, value in window.summarize(tokens).items():
        metrics[_PER_TOKEN.get(name, name)] = value
    for name, new in _PER_TOKEN.items():
        if name in missing:
            missing[new] = missing.pop(name)
    _record_memory(prepared, metrics, missing)
    flagged = bool(disturbance) and policy.action != "ignore"
    provenance.update(window.provenance())
    provenance.update(generation_quality(stats, disturbance if flagged else "", required))
    provenance.update(prepared.provenance)
    provenance.update(_run_provenance(stats, window, required))
    provenance.update({"remeasures": str(len(remeasured_because)),
                       "remeasured_because": " | ".join(remeasured_because),
                       "disturbed": str(flagged), "disturbance": disturbance,
                       "run_to_run": "off (a generative model's requests are timed as they come)",
                       "timer": "host"})
    samples = {"ttft_ms": stats.ttft_ms, "tpot_ms": stats.tpot_ms, "e2e_ms": stats.e2e_ms,
               **window.trace_samples()}
    return Measurement(candidate.candidate_id, "ok", metrics=metrics, missing=missing,
                       samples=samples, provenance=provenance)


def _record_goodput(stats: GenerationStats, workload: WorkloadSpec, metrics: dict[str, float],
                    missing: dict[str, str], provenance: dict[str, str]) -> None:
    """``goodput``: the share of the timed requests within the workload's SLO (missing, with the
    reason, when it names none)."""
    if workload.slo is None:
        missing["goodput"] = "the workload names no SLO (workload.slo)"
        return
    metrics["goodput"] = stats.goodput(*workload.slo.limits)
    provenance["slo"] = str(workload.slo)


def _record_memory(prepared: PreparedGenerator, metrics: dict[str, float],
                   missing: dict[str, str]) -> None:
    """``kv_cache_mb`` (the runtime's cache at the workload's longest context) and
    ``memory_model_mb`` (the process's growth since before the runner, weights borrowed from the
    loaded model counted in)."""
    cache = prepared.runner.kv_cache_bytes()
    if cache is None:
        missing["kv_cache_mb"] = "the runtime does not expose its KV cache"
    else:
        metrics["kv_cache_mb"] = cache / 1e6
    record_footprint(prepared.rss_before_runner, prepared.runner.borrowed_bytes, metrics, missing)


def _run_provenance(stats: GenerationStats, window: TelemetryWindow,
                    required: list[str]) -> dict[str, str]:
    return {"window_start": f"{window.start:.6f}", "window_end": f"{window.end:.6f}",
            "timed_requests": str(stats.requests), "warmup_requests": str(stats.warmup_requests),
            "timed_seconds": f"{stats.seconds:.6f}",
            "timed_iters": str(len(stats.tpot_ms)),
            "required_percentiles": ",".join(required),
            "halves_shift_pct": f"{halves_shift_pct(stats):.2f}"}
