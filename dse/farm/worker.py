"""`DeviceWorker`: the long-lived Ray actor that builds and measures candidates on one device.

One actor per physical device, one candidate at a time, so nothing of dse runs beside a
measurement on that device. The actor keeps its caches (trained weights, artifacts) between trials.
A candidate that cannot be built is returned as ``infeasible`` and one that breaks while running as
``failed``, each with its reason; other exceptions are bugs and propagate to the driver.

With a :class:`~dse.farm.dispatcher.Screening` the worker measures in two fidelities on the same
warm runner: a short screening timing, then the full protocol only when the candidate could still
enter the device's front. The verdict is the worker's own, so a candidate costs one round trip.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.build.fingerprint import DEVICE_CACHE_ENV
from dse.candidate import Candidate
from dse.exceptions import BuildError, MeasurementError
from dse.farm.isolation import NodeLock, Span, current_node_id
from dse.measure.footprint import model_footprint_mb, rss_bytes, trim_heap
from dse.measure.harness import measure_latency, measure_offline, measure_sustained
from dse.measure.quality import disturbed, measurement_quality, unstable
from dse.measure.stats import PERCENTILES, LatencyStats, drift_pct, samples_for_ci
from dse.measure.telemetry import Probe, ProbeResult, Trace, Window, make_probe, make_probes
from dse.measurement import Measurement
from dse.metrics import is_measured
from dse.spec import HardwareProfile, InterferenceSpec, MeasureSpec, TrainingSpec

if TYPE_CHECKING:
    # Only for the annotation: prepare pulls in torch-side modules the actor loads lazily.
    from dse.farm.dispatcher import Screening
    from dse.farm.prepare import PreparedCandidate


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
    from dse.measure.provenance import host_provenance

    return {**host_provenance(), "device_profile": profile.name, "device_kind": profile.kind,
            "pid": str(os.getpid())}


def _trial_provenance(host: dict[str, str]) -> dict[str, str]:
    """The worker's fixed host facts plus what changes between trials (clocks at start)."""
    from dse.measure.provenance import cpu_clocks_mhz

    provenance = dict(host)
    clocks = cpu_clocks_mhz()
    if clocks is not None:
        provenance["cpu_clocks_mhz_at_start"] = clocks
    return provenance


class DeviceWorker:
    """Builds and measures candidates for one device profile (wrapped by ``ray.remote``)."""

    def __init__(self, profile: HardwareProfile, cache_dir: str, device_id: str = "") -> None:
        # Inductor otherwise keeps a pool of compile processes alive beside every measurement.
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
        self.profile = profile
        self.cache_dir = Path(cache_dir)
        # Device-side artifacts (TensorRT engines, EP caches) live here, keyed by the device's
        # fingerprint; the backends read the folder from this variable.
        os.environ[DEVICE_CACHE_ENV] = str(self.cache_dir / "device")
        self.probes: list[Probe] = make_probes(profile.telemetry)
        # Every window is checked for other work on the device, listed in the profile or not:
        # the CPUs everywhere, and an NVIDIA GPU's other compute processes on a CUDA device.
        always = ["cpu_interference"] + (["gpu_interference"] if profile.kind == "cuda" else [])
        for name in always:
            if not any(probe.name == name for probe in self.probes):
                self.probes.append(make_probe(name))
        self.niceness = _normal_priority()
        self.node_id = current_node_id()
        self.device_id = device_id or f"{profile.name}@{self.node_id[:12]}"
        self.node_lock = NodeLock(self.node_id)
        self.host = _host_provenance(profile)
        self.host.update({"niceness": self.niceness, "node_id": self.node_id,
                          "device_id": self.device_id})
        gpus = os.environ.get("CUDA_VISIBLE_DEVICES")
        if gpus is not None:
            self.host["cuda_visible_devices"] = gpus
        self._load_run_to_run()

    def _load_run_to_run(self) -> None:
        """This device's calibrated run-to-run variation (``dse calibrate``), or why none."""
        from dse.farm.calibrate import device_key
        from dse.measure.run_to_run import calibration_path, load

        self.run_to_run_path = calibration_path(self.cache_dir, self.profile.name,
                                                device_key(self.host))
        self.run_to_run, self.run_to_run_note = load(self.run_to_run_path)

    def calibrate(self, measure: MeasureSpec, runs: int, gap_s: float) -> dict[str, Any]:
        """Measure this device's run-to-run variation (:mod:`dse.farm.calibrate`), save it where
        later workers of this device read it, and use it from now on: the calibration's figures
        and file, or the error that stopped it."""
        from dataclasses import asdict

        from dse.farm.calibrate import calibrate_device
        from dse.measure.run_to_run import save

        try:
            with self.node_lock.exclusive():  # a measurement: nothing else on the node meanwhile
                found = calibrate_device(self.profile, measure, device=self.device_id,
                                         runs=runs, gap_s=gap_s)
            save(found, self.run_to_run_path)
        except (MeasurementError, BuildError, OSError) as exc:
            return {"device_id": self.device_id, "error": f"{type(exc).__name__}: {exc}"}
        self._load_run_to_run()
        return {"device_id": self.device_id, "path": str(self.run_to_run_path),
                "calibration": asdict(found), "summary": found.describe()}

    def ping(self) -> str:
        return self.profile.name

    def identity(self) -> dict[str, str]:
        """Which device this is: profile, device id, Ray node, host, process, GPUs it sees.

        The dispatcher's readiness call: the worker answers once its runtimes are loaded
        (:meth:`_warm_up`), so a job's ``trial_timeout_s`` measures the trial, not the process
        start-up. A restarted worker's first trial used to pay for importing torch and the
        runtimes inside its timeout, and on a slow or busy device a tight timeout then failed
        every trial in turn, each restart starting the next one cold."""
        self._warm_up()
        keys = ("device_profile", "device_id", "node_id", "host", "pid", "cuda_visible_devices")
        return {key: self.host[key] for key in keys if key in self.host}

    def _warm_up(self) -> None:
        """Load torch (training and the torch backends) and each listed backend's runtime in
        this process. ``start_runtime`` is idempotent and never raises: a runtime that cannot
        start says so when a candidate of it is compiled."""
        with contextlib.suppress(ImportError):  # a device without torch: its candidates say so
            import torch  # noqa: F401
        from dse.backends import get_backend

        for name in self.profile.backends:
            try:
                backend = get_backend(name)
            except KeyError:  # a backend this process does not know: its candidates say so
                continue
            backend.start_runtime(self.profile)

    def evaluate(self, candidate: Candidate, training: TrainingSpec, measure: MeasureSpec,
                 screening: Screening | None = None) -> Measurement:
        """Build ``candidate`` and measure it; with ``screening``, screen it first (provenance
        then says ``fidelity``: ``screen`` when it stopped there, else ``full``, with the seconds
        of each part and the verdict)."""
        from dse.farm.prepare import prepare_candidate

        provenance = _trial_provenance(self.host)
        build, timed = Span(), Span()
        try:
            # Building may overlap other builds on this node, never a measurement.
            with self.node_lock.shared(), build.timing():
                prepared = prepare_candidate(candidate, training, self.profile, self.cache_dir)
        except BuildError as exc:
            provenance.update(_spans(build, None))
            return Measurement(candidate.candidate_id, "infeasible", reason=str(exc),
                               provenance=provenance)
        try:
            with self.node_lock.exclusive(), timed.timing():
                if screening is None:
                    result = self._measure(candidate, prepared, measure, provenance)
                else:
                    result = self._screen_then_measure(candidate, prepared, measure, provenance,
                                                       screening)
            result.provenance.update(_spans(build, timed))
            return result
        except (MeasurementError, RuntimeError, MemoryError) as exc:
            provenance.update(_spans(build, timed))
            return Measurement(candidate.candidate_id, "failed",
                               reason=f"{type(exc).__name__}: {exc}", provenance=provenance)
        finally:
            prepared.runner.close()

    def _screen_then_measure(self, candidate: Candidate, prepared: PreparedCandidate,
                             measure: MeasureSpec, provenance: dict[str, str],
                             screening: Screening) -> Measurement:
        """The screening measurement when even its optimistic objectives are dominated by the
        front; else the full protocol's, on the same runner, still warm. An empty front has
        nothing to dominate: straight to the full protocol."""
        facts = {"fidelity": "full", "screen_seconds": "0"}
        if screening.front:
            span = Span()
            with span.timing():
                screened = self._measure(candidate, prepared, screening_measure(measure, screening),
                                         dict(provenance))
            enters, verdict = screening_verdict(screened.metrics, prepared.metrics, screening)
            facts.update({"screen_seconds": f"{span.end - span.start:.6f}",
                          "screen_verdict": verdict,
                          "screen_timed_iters": screened.provenance.get("timed_iters", "")})
            if not enters:
                screened.provenance.update(facts | {"fidelity": "screen", "full_seconds": "0"})
                return screened
        span = Span()
        with span.timing():
            result = self._measure(candidate, prepared, measure, provenance)
        result.provenance.update(facts | {"full_seconds": f"{span.end - span.start:.6f}"})
        return result

    def _measure(self, candidate: Candidate, prepared: PreparedCandidate, measure: MeasureSpec,
                 provenance: dict[str, str]) -> Measurement:
        runner, example = prepared.runner, prepared.example
        metrics = dict(prepared.metrics)
        missing: dict[str, str] = dict(prepared.missing)
        window = _TelemetryWindow(self.probes, missing)

        def call() -> object:
            return runner.run(example)

        # Freed heap back to the system before the window: RSS in it is what is live.
        trim_heap()
        try:
            sustained = measure.sustained_seconds > 0
            # Telemetry covers the sustained run when there is one (that is where a device heats
            # up), else exactly the timed single-stream window.
            policy = measure.interference
            # Why each earlier window was measured again: disturbed, or unstable (a state change
            # inside it); an underpowered one is not, since the same caps stop the next short.
            remeasured_because: list[str] = []
            floor = self.run_to_run if measure.run_to_run == "auto" else None
            while True:
                stats = measure_latency(
                    call, target_rel_ci=measure.target_rel_ci, min_iters=measure.min_iters,
                    max_iters=measure.max_iters, min_seconds=measure.min_seconds,
                    max_seconds=measure.max_seconds,
                    warmup_max_seconds=measure.warmup_max_seconds,
                    required_quantiles=measure.required_quantiles(), blocks=measure.blocks,
                    block_gap_s=measure.block_gap_s,
                    on_window=None if sustained else window.mark, run_to_run=floor)
                # With a sustained run, that run carries the window and is judged instead.
                disturbance = "" if sustained else _disturbance(window, policy)
                problem = disturbance or unstable(stats)
                if not problem or policy.action != "remeasure" \
                        or len(remeasured_because) >= policy.max_remeasures:
                    break
                remeasured_because.append(problem)
                time.sleep(policy.wait_s)
            metrics.update(latency_metrics(stats, candidate.batch_size, missing))
            _record_footprint(prepared, metrics, missing)
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
            disturbance = _disturbance(window, policy)
        provenance.update(window.provenance())
        flagged = bool(disturbance) and policy.action != "ignore"
        provenance.update({
            "remeasures": str(len(remeasured_because)),
            "remeasured_because": " | ".join(remeasured_because),
            "disturbed": str(flagged),
            "disturbance": disturbance})
        provenance.update(measurement_quality(stats, flagged))
        provenance.update(prepared.provenance)
        provenance.update({
            "window_start": f"{window.start:.6f}",
            "window_end": f"{window.end:.6f}",
            "timed_iters": str(stats.n),
            "target_rel_ci": f"{stats.target_rel_ci:g}",
            "achieved_rel_ci": f"{stats.rel_ci:.5f}",
            "target_met": str(stats.target_met),
            "stationary": str(stats.stationary),
            "halves_shift_pct": f"{stats.halves_shift_pct:.2f}",
            "run_to_run": (self.run_to_run_note if measure.run_to_run == "auto"
                           else "off (measurement.run_to_run)"),
            "run_to_run_cv_p50": f"{stats.run_to_run_cv:.5f}",
            "blocks": str(stats.blocks),
            "block_p50_ms": " ".join(f"{v:.6g}" for v in stats.block_p50_ms),
            "min_samples": str(stats.min_samples),
            "underpowered": str(stats.underpowered),
            "warmup_iters": str(stats.warmup_iters),
            "timer_overhead_ns": f"{stats.timer_overhead_ns:.0f}",
            "stopping_check_seconds": f"{stats.check_seconds:.6f}",
            "harness_first_call_ms": f"{stats.first_call_ms:.4f}",
        })
        samples = {"latency_ms": stats.samples_ms, **window.trace_samples()}
        return Measurement(candidate.candidate_id, "ok", metrics=metrics, missing=missing,
                           samples=samples, provenance=provenance)


def _disturbance(window: _TelemetryWindow, policy: InterferenceSpec) -> str:
    """Why the window just closed was disturbed under ``policy``, or ""."""
    return disturbed(window.result_of("cpu_interference"), policy.max_foreign_cpu_pct,
                     policy.max_steal_pct, max_cpu_wait_pct=policy.max_cpu_wait_pct,
                     gpu=window.result_of("gpu_interference"),
                     max_gpu_foreign_pct=policy.max_gpu_foreign_pct,
                     max_gpu_foreign_processes=policy.max_gpu_foreign_processes)


def _record_footprint(prepared: PreparedCandidate, metrics: dict[str, float],
                      missing: dict[str, str]) -> None:
    """``memory_model_mb`` once the runner is warm and timed (see ``dse.measure.footprint``)."""
    if prepared.rss_before_runner is None:
        missing["memory_model_mb"] = "no resident-memory reading before the runner was built"
        return
    value, why = model_footprint_mb(prepared.rss_before_runner, rss_bytes(),
                                    prepared.runner.borrowed_bytes)
    if value is None:
        missing["memory_model_mb"] = why
    else:
        metrics["memory_model_mb"] = value


def screening_measure(measure: MeasureSpec, screening: Screening) -> MeasureSpec:
    """The screening protocol: the campaign's, loosened to the screening's target and time (never
    tighter or longer than the campaign's own), with no offline or sustained run; enough samples
    for each objective's confidence interval where the time allows (p99 needs a few hundred)."""
    quantiles = [bounds[2] for bounds in screening.ci if bounds is not None]
    needed = max([samples_for_ci(q) for q in quantiles], default=1)
    seconds = min(screening.max_seconds, measure.max_seconds)
    # Twice the bare minimum: correlated samples count for less (see dse.measure.stats).
    min_iters = min(max(measure.min_iters, 2 * needed), measure.max_iters)
    return measure.model_copy(update={
        "target_rel_ci": max(screening.target_rel_ci, measure.target_rel_ci),
        "min_iters": min_iters,
        # No floor on time: the sample count above is what a verdict needs.
        "min_seconds": 0.0, "max_seconds": seconds,
        # Each block warms up: together within the screening's time, not a multiple of it.
        "warmup_max_seconds": min(measure.warmup_max_seconds, seconds) / measure.blocks,
        "offline_concurrency": 0, "sustained_seconds": 0.0})


def screening_verdict(metrics: Mapping[str, float], exact: Collection[str],
                      screening: Screening) -> tuple[bool, str]:
    """Whether a screened candidate could still enter the front, and why (one line).

    Its optimistic objective vector (see :class:`~dse.farm.dispatcher.Screening`; ``exact``: the
    metrics known before timing) must be dominated by a front point's pessimistic vector for the
    answer to be no. An objective the screening could not bound (not measured, or too few
    samples for its interval) keeps the candidate in: nothing shows it cannot enter.
    """
    optimistic = []
    for name, maximize, bounds in zip(screening.objectives, screening.maximize, screening.ci,
                                      strict=True):
        value = metrics.get(name, math.nan)
        if not is_measured(name, value):
            return True, f"{name} not measured by the screening"
        if name in exact or math.isinf(value):  # an infinitely bad value has no noise
            best = value
        elif bounds is not None:
            ends = [metrics.get(bound, math.nan) for bound in bounds[:2]]
            if not all(math.isfinite(end) for end in ends):
                return True, f"the screening gave {name} no confidence interval"
            best = max(value, *ends) if maximize else min(value, *ends)
        else:
            step = screening.margin * abs(value)
            best = value + step if maximize else value - step
        optimistic.append(best)
    for point in screening.front:
        if _dominates(point.values, optimistic, screening.maximize):
            shown = ", ".join(f"{n} {v:.4g}" for n, v in zip(screening.objectives, optimistic,
                                                             strict=True))
            return False, f"dominated by front trial #{point.trial} even at best ({shown})"
    return True, "could enter the front"


def _dominates(point: tuple[float, ...], other: list[float], maximize: tuple[bool, ...]) -> bool:
    """``point`` at least as good as ``other`` in every objective and better in one."""
    signs = [-1.0 if up else 1.0 for up in maximize]
    mine = [s * v for s, v in zip(signs, point, strict=True)]
    theirs = [s * v for s, v in zip(signs, other, strict=True)]
    return all(a <= b for a, b in zip(mine, theirs, strict=True)) and any(
        a < b for a, b in zip(mine, theirs, strict=True))


def _spans(build: Span, timed: Span | None) -> dict[str, str]:
    """The build and measurement windows of a trial (epoch seconds), for isolation checks."""
    out = {"build_start": f"{build.start:.6f}", "build_end": f"{build.end:.6f}"}
    if timed is not None:
        out.update({"measure_start": f"{timed.start:.6f}", "measure_end": f"{timed.end:.6f}"})
    return out


def latency_metrics(stats: LatencyStats, batch_size: int,
                    missing: dict[str, str]) -> dict[str, float]:
    """The latency metrics of a run. A percentile is reported only with its 95% confidence
    interval: one the samples cannot support (a p99 of 30 calls is their maximum, not a p99) is
    missing, with why, and so is the throughput when the median is."""
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


class _TelemetryWindow:
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
