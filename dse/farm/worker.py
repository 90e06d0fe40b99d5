"""`DeviceWorker`: the long-lived Ray actor that builds and measures candidates on one device.

One actor per physical device, one candidate at a time, so nothing of dse runs beside a
measurement on that device. The actor keeps its caches (trained weights, artifacts) between trials.
A candidate that cannot be built is returned as ``infeasible`` and one that breaks while running as
``failed``, each with its reason; other exceptions are bugs and propagate to the driver.
"""

from __future__ import annotations

import os
import platform
import socket
import time
from pathlib import Path

from dse.candidate import Candidate
from dse.exceptions import BuildError, MeasurementError
from dse.measure.harness import measure_latency
from dse.measure.telemetry import PROBES, Probe, Window
from dse.measurement import Measurement
from dse.spec import HardwareProfile, MeasureSpec, TrainingSpec


def _normal_priority() -> str:
    """Undo a low scheduling priority (Ray may start workers niced) where allowed; say what holds."""
    niceness = os.getpriority(os.PRIO_PROCESS, 0)
    if niceness > 0:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, 0)
        except PermissionError:
            return f"{niceness} (could not reset to 0: no permission)"
    return str(os.getpriority(os.PRIO_PROCESS, 0))


def _host_provenance(profile: HardwareProfile) -> dict[str, str]:
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": str(os.cpu_count()),
        "device_profile": profile.name,
        "device_kind": profile.kind,
        "pid": str(os.getpid()),
    }


class DeviceWorker:
    """Builds and measures candidates for one device profile (wrapped by ``ray.remote``)."""

    def __init__(self, profile: HardwareProfile, cache_dir: str) -> None:
        self.profile = profile
        self.cache_dir = Path(cache_dir)
        self.probes: list[Probe] = [PROBES[name]() for name in profile.telemetry]
        self.niceness = _normal_priority()

    def ping(self) -> str:
        return self.profile.name

    def evaluate(self, candidate: Candidate, training: TrainingSpec,
                 measure: MeasureSpec) -> Measurement:
        from dse.farm.prepare import prepare_candidate

        provenance = _host_provenance(self.profile)
        provenance["niceness"] = self.niceness
        try:
            prepared = prepare_candidate(candidate, training, self.profile, self.cache_dir)
        except BuildError as exc:
            return Measurement(candidate.candidate_id, "infeasible", reason=str(exc),
                               provenance=provenance)
        try:
            return self._measure(candidate, prepared, measure, provenance)
        except (MeasurementError, RuntimeError, MemoryError) as exc:
            return Measurement(candidate.candidate_id, "failed",
                               reason=f"{type(exc).__name__}: {exc}", provenance=provenance)
        finally:
            prepared.runner.close()

    def _measure(self, candidate: Candidate, prepared: object, measure: MeasureSpec,
                 provenance: dict[str, str]) -> Measurement:
        from dse.farm.prepare import PreparedCandidate

        assert isinstance(prepared, PreparedCandidate)
        runner, example = prepared.runner, prepared.example
        missing: dict[str, str] = {}
        active: list[Probe] = []
        for probe in self.probes:
            ok, why = probe.available()
            if ok:
                active.append(probe)
            else:
                missing.update({name: why for name in probe.provides})
        window_start = time.time()
        for probe in active:
            probe.start()
        try:
            stats = measure_latency(
                lambda: runner.run(example),
                warmup_iters=measure.warmup_iters, min_iters=measure.min_iters,
                max_iters=measure.max_iters, min_seconds=measure.min_seconds,
                max_seconds=measure.max_seconds)
        finally:
            traces = [(probe, probe.stop()) for probe in active]
        window_end = time.time()
        metrics = dict(prepared.metrics)
        metrics.update({
            "latency_p50_ms": stats.p50_ms,
            "latency_p90_ms": stats.p90_ms,
            "latency_p99_ms": stats.p99_ms,
            "latency_mean_ms": stats.mean_ms,
            "throughput_sps": candidate.batch_size * 1000.0 / stats.mean_ms,
        })
        window = Window(window_start, window_end, stats.n * candidate.batch_size)
        for probe, trace in traces:
            summary = probe.summarize(trace, window)
            metrics.update(summary.metrics)
            missing.update(summary.missing)
        provenance.update(prepared.provenance)
        provenance.update({
            "window_start": f"{window_start:.6f}",
            "window_end": f"{window_end:.6f}",
            "timed_iters": str(stats.n),
            "first_call_ms": f"{stats.first_call_ms:.4f}",
        })
        return Measurement(candidate.candidate_id, "ok", metrics=metrics, missing=missing,
                           samples={"latency_ms": stats.samples_ms}, provenance=provenance)
