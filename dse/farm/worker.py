"""`DeviceWorker`: the long-lived Ray actor that builds and measures candidates on one device.

One actor per physical device, one candidate at a time, so nothing of dse runs beside a
measurement on that device. The actor keeps its caches (trained weights, artifacts) between trials.
A candidate that cannot be built is returned as ``infeasible`` and one that breaks while running as
``failed``, each with its reason; other exceptions are bugs and propagate to the driver.

With a :class:`~dse.trial.screening.Screening` the worker measures in two fidelities on the same
warm runner: a short screening timing, then the full protocol only when the candidate could still
enter the device's front. The verdict is the worker's own, so a candidate costs one round trip.
How a candidate is timed is :mod:`dse.trial.timing`; the worker holds the device's probes and
calibration, the node lock, and the trial's provenance. A duel (:meth:`DeviceWorker.duel`)
builds two measured candidates again and times them against each other
(:mod:`dse.trial.duel_window`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from dse.artifacts import DEVICE_CACHE_ENV
from dse.core import BuildError, Candidate, Measurement, MeasurementError
from dse.measure import Probe, make_probe, make_probes
from dse.models import is_llm_source
from dse.spec import HardwareProfile, MeasureSpec, TrainingSpec
from dse.trial import (
    NodeLock,
    Screening,
    Span,
    current_node_id,
    measure_prepared,
    screening_measure,
    screening_verdict,
)

if TYPE_CHECKING:
    # Only for the annotation: prepare pulls in torch-side modules the actor loads lazily.
    from dse.deploy import (
        ExportedGenerator,
        ExportedModel,
        GenerationVerifyRequest,
        VerifiedModel,
        VerifyRequest,
    )
    from dse.profiling import DeviceProfile, ProfileSettings
    from dse.trial import DuelReport, DuelRequest, PreparedCandidate


class _Closes(Protocol):
    def close(self) -> None: ...


class _Deployed(Protocol):
    """What a trial's build hands its measurement: something holding a runner to close."""

    @property
    def runner(self) -> _Closes: ...


_Prepared = TypeVar("_Prepared", bound=_Deployed)


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
    from dse.measure import host_provenance

    return {**host_provenance(), "device_profile": profile.name, "device_kind": profile.kind,
            "pid": str(os.getpid())}


def _trial_provenance(host: dict[str, str]) -> dict[str, str]:
    """The worker's fixed host facts plus what changes between trials (clocks at start)."""
    from dse.measure import cpu_clocks_mhz

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
        # the CPUs everywhere, and an NVIDIA GPU's other compute processes on a CUDA device; a
        # CPU device's windows for the machine's own speed too (a GPU's work does not run on
        # the CPU whose speed the canary reads).
        always = (["cpu_interference"] + (["gpu_interference"] if profile.kind == "cuda" else [])
                  + (["speed_canary"] if profile.kind == "cpu" else []))
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
        from dse.measure import calibration_path, load
        from dse.trial import device_key

        self.run_to_run_path = calibration_path(self.cache_dir, self.profile.name,
                                                device_key(self.host))
        self.run_to_run, self.run_to_run_note = load(self.run_to_run_path)

    def calibrate(self, measure: MeasureSpec, runs: int, gap_s: float) -> dict[str, Any]:
        """Measure this device's run-to-run variation (:mod:`dse.trial.calibrate`), save it where
        later workers of this device read it, and use it from now on: the calibration's figures
        and file, or the error that stopped it."""
        from dataclasses import asdict

        from dse.measure import save
        from dse.trial import calibrate_device

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

    def identity(self, backends: list[str] | None = None,
                 generative: bool = False) -> dict[str, str]:
        """Which device this is: profile, device id, Ray node, host, process, GPUs it sees.

        The dispatcher's readiness call: the worker answers once its runtimes are loaded
        (:meth:`_warm_up`: those of ``backends``, the campaign's, or else every one its profile
        lists), so a job's ``trial_timeout_s`` measures the trial, not the process
        start-up: were a restarted worker's first trial to pay for importing torch and the
        runtimes inside its timeout, a tight timeout on a slow or busy device would fail every
        trial in turn, each restart starting the next one cold."""
        self._warm_up(backends, generative)
        keys = ("device_profile", "device_id", "node_id", "host", "pid", "cuda_visible_devices")
        return {key: self.host[key] for key in keys if key in self.host}

    def _warm_up(self, backends: list[str] | None = None, generative: bool = False) -> None:
        """Load torch (training and the torch backends), the runtime of each profile backend
        that ``backends`` names (all of them when None) and, unless the campaign's model is a
        ``generative`` language model, torch's ONNX exporter, in this process. ``start_runtime``
        is idempotent and never raises: a runtime that cannot start says so when a candidate of
        it is compiled.

        Every fixed-shape candidate is exported to ONNX, whatever its backend (its graph's
        statistics come from that file), and the exporter's first run in a process costs about
        3 s of CPU more than later ones here: a first trial would pay it inside its timeout. A
        language model is never exported to ONNX, and a campaign loads only its own backends'
        runtimes."""
        with contextlib.suppress(ImportError):  # a device without torch: its candidates say so
            import torch  # noqa: F401
        from dse.backends import get_backend

        for name in self.profile.backends:
            if backends is not None and name not in backends:
                continue
            try:
                backend = get_backend(name)
            except KeyError:  # a backend this process does not know: its candidates say so
                continue
            backend.start_runtime(self.profile)
        if not generative and "torch" in sys.modules:
            from dse.artifacts import warm_up_exporter

            warm_up_exporter()

    def evaluate(self, candidate: Candidate, training: TrainingSpec, measure: MeasureSpec,
                 screening: Screening | None = None) -> Measurement:
        """Build ``candidate`` and measure it; with ``screening``, screen it first (provenance
        then says ``fidelity``: ``screen`` when it stopped there, else ``full``, with the seconds
        of each part and the verdict). A language model is deployed and its workload's requests
        timed instead (:mod:`dse.trial.llm_model`, :mod:`dse.trial.generation_timing`);
        screening does not apply to it (its fast protocol times calls, not requests)."""
        from dse.trial import measure_generator, prepare_candidate, prepare_generator

        if is_llm_source(candidate.family):
            return self._trial(
                candidate,
                lambda: prepare_generator(candidate, self.profile, self.cache_dir / "artifacts"),
                lambda prepared, provenance: measure_generator(
                    candidate, prepared, measure, provenance, probes=self.probes))

        def timed(prepared: PreparedCandidate, provenance: dict[str, str]) -> Measurement:
            if screening is None:
                return self._measure(candidate, prepared, measure, provenance)
            return self._screen_then_measure(candidate, prepared, measure, provenance,
                                             screening)

        return self._trial(
            candidate,
            lambda: prepare_candidate(candidate, training, self.profile, self.cache_dir), timed)

    def _trial(self, candidate: Candidate, prepare: Callable[[], _Prepared],
               measure: Callable[[_Prepared, dict[str, str]], Measurement]) -> Measurement:
        """One trial: ``prepare`` beside other builds on this node (infeasible, with the reason,
        when it raises BuildError: the architecture's failure when an ArchFailure), then
        ``measure`` with the node held alone (failed, with the reason, when the runner fails
        there); the runner closed whatever happened."""
        from dse.trial import ArchFailure

        provenance = _trial_provenance(self.host)
        build, timed = Span(), Span()
        try:
            # Building may overlap other builds on this node, never a measurement.
            with self.node_lock.shared(), build.timing():
                prepared = prepare()
        except BuildError as exc:
            provenance.update(_spans(build, None))
            if isinstance(exc, ArchFailure):  # the architecture's: the search answers its other
                provenance["failure_scope"] = "arch"  # candidates from this one (device_search)
            return Measurement(candidate.candidate_id, "infeasible", reason=str(exc),
                               provenance=provenance)
        try:
            with self.node_lock.exclusive(), timed.timing():
                result = measure(prepared, provenance)
            result.provenance.update(_spans(build, timed))
            return result
        except (MeasurementError, RuntimeError, MemoryError) as exc:
            provenance.update(_spans(build, timed))
            return Measurement(candidate.candidate_id, "failed",
                               reason=f"{type(exc).__name__}: {exc}", provenance=provenance)
        finally:
            prepared.runner.close()

    def profile_candidate(self, candidate: Candidate, training: TrainingSpec,
                settings: ProfileSettings) -> DeviceProfile | str:
        """Rebuild ``candidate`` (from the caches) and profile it (:mod:`dse.profiling.session`)
        with nothing else of dse on the node, as for a measurement; the reason, in one line, when
        it cannot be built or run. Nothing is recorded on any study."""
        from dse.profiling import profile_runner

        if is_llm_source(candidate.family):
            return self._profile_generator(candidate, settings)
        prepared = self._rebuilt(candidate, training)
        if isinstance(prepared, str):
            return prepared
        try:
            with self.node_lock.exclusive():
                return profile_runner(prepared.runner, prepared.artifact, prepared.example,
                                      candidate, self.profile, settings)
        except (RuntimeError, MemoryError) as exc:
            return f"the candidate failed while profiled: {type(exc).__name__}: {exc}"
        finally:
            prepared.runner.close()

    def _profile_generator(self, candidate: Candidate,
                           settings: ProfileSettings) -> DeviceProfile | str:
        """A language model's phase (``settings.phase``) profiled over its workload's requests
        (:mod:`dse.profiling.generation_session`); the reason, in one line, when it cannot be."""
        from dse.profiling import profile_generator
        from dse.trial import prepare_generator

        try:
            with self.node_lock.shared():
                prepared = prepare_generator(candidate, self.profile, self.cache_dir / "artifacts")
        except BuildError as exc:
            return f"the candidate could not be built: {exc}"
        try:
            with self.node_lock.exclusive():
                return profile_generator(prepared.runner, prepared.prompts,
                                         prepared.workload.output_tokens, candidate,
                                         self.profile, settings)
        except (RuntimeError, MemoryError, ValueError) as exc:
            return f"the candidate failed while profiled: {type(exc).__name__}: {exc}"
        finally:
            prepared.runner.close()

    def _export_generator(self, candidate: Candidate) -> ExportedGenerator | str:
        """A language model deployed again as it was measured (from the caches) and handed back
        as a bundle's parts (:func:`dse.trial.generation_bundle_jobs.export_generator`); the
        reason, in one line, when it cannot be."""
        from dse.trial import export_generator, prepare_generator

        try:
            with self.node_lock.shared():
                prepared = prepare_generator(candidate, self.profile, self.cache_dir / "artifacts")
                try:
                    return export_generator(candidate, prepared, self.run_to_run)
                finally:
                    prepared.runner.close()
        except BuildError as exc:
            return f"the candidate could not be exported: {exc}"

    def duel(self, request: DuelRequest) -> DuelReport | str:
        """Rebuild two measured candidates (from the caches, both alive in this process) and time
        them against each other in alternating blocks, nothing else of dse on the node
        (:mod:`dse.trial.duel_window`); the reason, in one line, when either cannot be built or
        run. Nothing is recorded on any study: the driver records the verdicts."""
        from dse.trial import duel_prepared

        built: list[PreparedCandidate] = []
        try:
            for side, candidate in (("A", request.a), ("B", request.b)):
                prepared = self._rebuilt(candidate, request.training)
                if isinstance(prepared, str):
                    return f"candidate {side} ({candidate.candidate_id[:12]}): {prepared}"
                built.append(prepared)
            with self.node_lock.exclusive():
                return duel_prepared(built[0], built[1], request, probes=self.probes,
                                     device_id=self.device_id)
        except (MeasurementError, RuntimeError, MemoryError) as exc:
            return f"the duel failed while timed: {type(exc).__name__}: {exc}"
        finally:
            for prepared in built:
                prepared.runner.close()

    def _rebuilt(self, candidate: Candidate, training: TrainingSpec) -> PreparedCandidate | str:
        """``candidate`` built again from the caches, beside other builds but no measurement
        (``dse profile``, ``dse export``); why not, in one line."""
        from dse.trial import prepare_candidate

        try:
            with self.node_lock.shared():
                return prepare_candidate(candidate, training, self.profile, self.cache_dir)
        except BuildError as exc:
            return f"the candidate could not be built: {exc}"

    def export_candidate(self, candidate: Candidate,
                         training: TrainingSpec) -> ExportedModel | ExportedGenerator | str:
        """Rebuild ``candidate`` (from the caches, as it was measured) and hand back what an
        exported bundle holds (:func:`dse.trial.bundle_jobs.export_prepared`; a language model's,
        :func:`dse.trial.generation_bundle_jobs.export_generator`); the reason, in one line, when
        it cannot be built."""
        from dse.trial import export_prepared

        if is_llm_source(candidate.family):
            return self._export_generator(candidate)
        prepared = self._rebuilt(candidate, training)
        if isinstance(prepared, str):
            return prepared
        try:
            return export_prepared(candidate, prepared, self.profile, self.run_to_run)
        except BuildError as exc:
            return f"the candidate could not be exported: {exc}"
        finally:
            prepared.runner.close()

    def verify_bundle(self, request: VerifyRequest | GenerationVerifyRequest,
                      measure: MeasureSpec) -> VerifiedModel | str:
        """Deploy a bundle's model on this device and measure it by ``measure``, as a trial is
        (probes, run-to-run calibration, node lock); the reason, in one line, when it cannot be
        deployed or run. A language model's bundle: its requests timed, its greedy tokens
        compared with those recorded."""
        import shutil

        from dse.artifacts import device_fingerprint
        from dse.deploy import GenerationVerifyRequest, VerifiedModel
        from dse.trial import compare_outputs, verify_prepared_model

        if isinstance(request, GenerationVerifyRequest):
            return self._verify_generator(request, measure)
        try:
            with self.node_lock.shared():
                prepared, folder = verify_prepared_model(request, self.profile,
                                                         self.cache_dir / "verify")
        except BuildError as exc:
            return f"the bundle's model could not be deployed: {exc}"
        try:
            diff, agree = compare_outputs(request, prepared)
            # The intervals' floor: this device's own calibration, else the exporting device's.
            floor, note = self.run_to_run, self.run_to_run_note
            if floor is None and request.run_to_run is not None:
                floor = request.run_to_run
                note = f"from the bundle: {floor.describe()}"
            with self.node_lock.exclusive():
                measurement = measure_prepared(
                    request.candidate, prepared, measure, _trial_provenance(self.host),
                    probes=self.probes, run_to_run=floor, run_to_run_note=note)
            return VerifiedModel(measurement, diff, agree, device_fingerprint())
        except (BuildError, MeasurementError, RuntimeError, MemoryError) as exc:
            return f"the bundle's model failed while measured: {type(exc).__name__}: {exc}"
        finally:
            prepared.runner.close()
            shutil.rmtree(folder, ignore_errors=True)

    def _verify_generator(self, request: GenerationVerifyRequest,
                          measure: MeasureSpec) -> VerifiedModel | str:
        """A language model's bundle deployed, its tokens compared, its requests timed by the
        workload's protocol (as a trial's are, with the device's probes)."""
        import shutil

        from dse.artifacts import device_fingerprint
        from dse.deploy import VerifiedModel
        from dse.trial import measure_generator, token_agreement, verify_prepared_generator

        try:
            with self.node_lock.shared():
                prepared, folder = verify_prepared_generator(request, self.profile,
                                                             self.cache_dir / "verify")
        except BuildError as exc:
            return f"the bundle's model could not be deployed: {exc}"
        try:
            agree = token_agreement(request, prepared)
            with self.node_lock.exclusive():
                measurement = measure_generator(request.candidate, prepared, measure,
                                                _trial_provenance(self.host), probes=self.probes)
            return VerifiedModel(measurement, None, agree, device_fingerprint())
        except (BuildError, MeasurementError, RuntimeError, MemoryError) as exc:
            return f"the bundle's model failed while measured: {type(exc).__name__}: {exc}"
        finally:
            prepared.runner.close()
            shutil.rmtree(folder, ignore_errors=True)

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
        """Time ``prepared`` with this device's probes and run-to-run calibration."""
        return measure_prepared(candidate, prepared, measure, provenance, probes=self.probes,
                                run_to_run=self.run_to_run, run_to_run_note=self.run_to_run_note)


def _spans(build: Span, timed: Span | None) -> dict[str, str]:
    """The build and measurement windows of a trial (epoch seconds), for isolation checks."""
    out = {"build_start": f"{build.start:.6f}", "build_end": f"{build.end:.6f}"}
    if timed is not None:
        out.update({"measure_start": f"{timed.start:.6f}", "measure_end": f"{timed.end:.6f}"})
    return out
