"""The telemetry of one measurement window: the device's available probes started and stopped
around it, their metrics (the first listed probe winning a shared one), provenance and traces."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from dse.measure import Probe, ProbeResult, Trace, Window, disturbed

if TYPE_CHECKING:
    from dse.spec import InterferenceSpec


class TelemetryWindow:
    """Starts and stops the available probes around one measurement window."""

    def __init__(self, probes: list[Probe], missing: dict[str, str]) -> None:
        self.active: list[Probe] = []
        self.missing = missing
        for probe in probes:
            ok, why = probe.available()
            if ok:
                self.active.append(probe)
            else:
                missing.update({name: why for name in probe.provides})
        self.start = self.end = float("nan")
        self.traces: list[tuple[Probe, Trace]] = []
        self.shadowed: dict[str, str] = {}
        self._open = False

    def mark(self, opening: bool) -> None:
        if opening:
            for probe in self.active:
                probe.start()
            self._open = True
            self.start = time.time()
        else:
            self.end = time.time()
            self.traces = [(probe, probe.stop()) for probe in self.active]
            self._open = False

    def result_of(self, probe_name: str) -> ProbeResult | None:
        """The last closed window's result of one probe, or None when it did not run."""
        window = Window(self.start, self.end, 0)
        for probe, trace in self.traces:
            if probe.name == probe_name:
                return probe.summarize(trace, window)
        return None

    def disturbance(self, policy: InterferenceSpec, *, speed: bool = True) -> str:
        """Why the last closed window shared its device beyond ``policy`` (other processes,
        steal, CPU wait, GPU work) or, with ``speed``, ran on a machine slower than itself, or
        "". A duel's windows leave the speed out: both of its candidates share each moment, and
        its paired ratio cancels the machine's speed."""
        return disturbed(self.result_of("cpu_interference"), policy.max_foreign_cpu_pct,
                         policy.max_steal_pct, max_cpu_wait_pct=policy.max_cpu_wait_pct,
                         gpu=self.result_of("gpu_interference"),
                         max_gpu_foreign_pct=policy.max_gpu_foreign_pct,
                         max_gpu_foreign_processes=policy.max_gpu_foreign_processes,
                         speed=self.result_of("speed_canary") if speed else None,
                         max_slowdown=policy.max_slowdown)

    def close(self) -> None:
        """Stop the probes if the window is still open (the measurement raised inside it)."""
        if self._open:
            self.mark(False)

    def summarize(self, inferences: int) -> dict[str, float]:
        """Metrics of every probe. Where two probes give the same metric (nvml and rapl both give
        power), the one listed first in the profile wins and the other's value is noted in
        provenance; a metric that has a value is never also reported missing."""
        window = Window(self.start, self.end, inferences)
        metrics: dict[str, float] = {}
        self.shadowed = {}
        for probe, trace in self.traces:
            result = probe.summarize(trace, window)
            for name, value in result.metrics.items():
                if name in metrics:
                    self.shadowed[f"{probe.name}.shadowed.{name}"] = f"{value:.6g}"
                else:
                    metrics[name] = value
            for name, reason in result.missing.items():
                self.missing.setdefault(name, reason)
        for name in metrics:
            self.missing.pop(name, None)
        return metrics

    def provenance(self) -> dict[str, str]:
        facts = {f"{probe.name}.{key}": value for probe, trace in self.traces
                 for key, value in probe.provenance(trace).items()}
        return {**facts, **self.shadowed}

    def trace_samples(self) -> dict[str, list[float]]:
        """Every probe's readings, kept beside the latencies (``trace.<probe>.time_s`` and
        ``trace.<probe>.<channel> [unit]``) so power and temperature can be plotted later."""
        out: dict[str, list[float]] = {}
        for probe, trace in self.traces:
            out[f"trace.{probe.name}.time_s"] = list(trace.timestamps)
            for channel, values in trace.channels.items():
                unit = trace.units.get(channel, "")
                out[f"trace.{probe.name}.{channel} [{unit}]"] = list(values)
        return out
