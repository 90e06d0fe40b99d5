"""``dse verify``: an exported bundle deployed on a device of a profile and measured by the
protocol it was measured with, then compared with what was recorded (:mod:`dse.deploy.compare`):
pass, regressed or improved, with the statistics, in a JSON report. A run that suspects a
regression, or whose window other work disturbed, is followed by fresh runs, each in a worker
process of its own, until they confirm or dismiss it (:mod:`dse.deploy.confirm`)."""

from __future__ import annotations

import datetime
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.core import Candidate, DseError, SpecError
from dse.deploy import (
    DEFAULT_ACCURACY_TOLERANCE,
    DEFAULT_CONFIRM_GAP_S,
    DEFAULT_CONFIRM_RUNS,
    DEFAULT_TOLERANCE,
    Comparison,
    MetricCheck,
    Run,
    decided,
    is_disturbed,
    latency_checks,
    score_checks,
    settled,
    summary,
)

if TYPE_CHECKING:
    from dse.deploy import Bundle, GenerationVerifyRequest, VerifiedModel, VerifyRequest
    from dse.spec import HardwareProfile, MeasureSpec

# Deploying (a TensorRT engine build, TVM's compile) and measuring by the bundle's protocol.
_VERIFY_SECONDS = 1800.0
# Fingerprint entries a device-bound artifact of any backend depends on, besides the backend's
# own libraries.
_DEVICE_KEYS = ("gpu_name", "compute_capability", "cuda_runtime", "driver", "l4t")


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found.

    Examples:
        >>> import dataclasses
        >>> from dse import VerifyReport
        >>> [f.name for f in dataclasses.fields(VerifyReport)][:4]
        ['bundle', 'verdict', 'checks', 'device']

    Attributes:
        bundle: the bundle's folder.
        verdict: ``pass``, ``improved``, ``regressed`` (every run found a latency slower, or
            an accuracy dropped), ``inconclusive`` (no check regressed, but a latency was
            neither confirmed nor dismissed: other work disturbed the windows even after
            re-measuring them, and a busy device cannot certify a pass), or ``failed`` (the
            model could not be deployed or measured on the device); ``reason`` says why for the
            last two.
        checks: every metric compared (:class:`dse.deploy.compare.MetricCheck`), a latency with
            the figures of the run that decided it.
        device: the verifying device's profile; ``device_id`` the device itself.
        measured: the metrics the first run measured; ``measurement_quality`` their quality
            label.
        max_abs_diff: the largest difference of the outputs on the bundle's inputs from those
            recorded at export; ``decisions_agree`` the share with the same top output.
        fingerprint_changes: fingerprint entries that differ from the exporting device's
            (name -> [then, now]).
        notes: what else the reader should know (a rebuilt engine, a disturbed window).
        reason: why the verdict is ``failed`` or ``inconclusive``.
        report_file: where the JSON report was written.
        confirmation: what the fresh runs were for and what they found ("suspected 12% slower
            (latency_p50_ms), confirmed in 2 of 2 fresh runs (+13.1%, +11.4%)"); "" when the
            first run decided alone.
        runs: every run's own latency checks, quality label and worker process
            (:class:`dse.deploy.confirm.Run`).
    """

    bundle: Path
    verdict: str
    checks: list[MetricCheck]
    device: str
    device_id: str = ""
    measured: dict[str, float] = field(default_factory=dict)
    measurement_quality: str = ""
    max_abs_diff: float | None = None
    decisions_agree: float | None = None
    fingerprint_changes: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    reason: str = ""
    report_file: Path | None = None
    confirmation: str = ""
    runs: list[Run] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 when the bundle performs as recorded or better, 1 otherwise."""
        return 0 if self.verdict in ("pass", "improved") else 1

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["bundle"], data["report_file"] = str(self.bundle), None
        data["exit_code"] = self.exit_code
        return data


def verify(bundle: str | os.PathLike[str], *, profile: str | os.PathLike[str] | None = None,
           address: str | None = None, tolerance: float = DEFAULT_TOLERANCE,
           accuracy_tolerance: float = DEFAULT_ACCURACY_TOLERANCE,
           cache_dir: str | os.PathLike[str] | None = None,
           report: str | os.PathLike[str] | None = None,
           confirm_runs: int = DEFAULT_CONFIRM_RUNS,
           confirm_gap_s: float = DEFAULT_CONFIRM_GAP_S) -> VerifyReport:
    """Deploy an exported bundle (:func:`dse.export`) on a device of a profile, measure it by
    the protocol its trial was measured with, and compare with the recorded measurement.

    A latency percentile (the median, and any the campaign optimised or constrained) regressed
    when it is slower than recorded by more than ``tolerance`` and its 95 % interval lies wholly
    above the recorded one (intervals floored by the device's calibrated run-to-run variation
    where ``dse calibrate`` measured it) in the first run and in ``confirm_runs`` fresh runs,
    each in a worker process of its own, the second on after an idle pause of
    ``confirm_gap_s``: one run can land several percent from the next, and a machine can run
    slower for tens of seconds after heavy use, neither of which a run's interval sees, so one
    run's excursion is no regression. A first run that finds nothing slower in a clean window
    decides alone. Accuracy and top-1 agreement with the
    fp32 model are re-scored on the bundle's inputs. A device whose fingerprint differs from the
    exporting one's (driver, runtime, TensorRT) rebuilds device-bound artifacts from the
    bundle's ONNX, and the report says so.

    Args:
        bundle: The bundle's folder.
        profile: A device profile YAML file to verify on; by default the bundle's own
            (``device_profile.yaml``).
        address: The farm's Ray address; else an embedded local Ray.
        tolerance: The relative latency change that counts (0.10: 10 %).
        accuracy_tolerance: The accuracy drop that counts, as a fraction (0.01: one point).
        cache_dir: The worker's cache (device artifacts, run-to-run calibration); default
            ``verify`` in the user's dse cache (``$DSE_CACHE_HOME``, else
            ``$XDG_CACHE_HOME/dse``). A campaign's cache folder brings its calibration.
        report: Where the JSON report goes; default
            ``<bundle>/verify/<UTC time>-<profile>.json``.
        confirm_runs: Fresh runs that must agree before a latency is called regressed (0: the
            first run decides alone).
        confirm_gap_s: The idle pause before each fresh run after the first.

    Returns:
        The :class:`VerifyReport`; its ``exit_code`` is 0 for pass or improved, else 1.

    Raises:
        DseError: One line, before anything runs, for a bundle whose files do not match its
            manifest, an unreadable bundle, a profile that cannot run its backend and
            precision, or a negative ``confirm_runs`` or ``confirm_gap_s``.

    Examples:
        A folder that is not a bundle:

        >>> from dse import verify
        >>> from dse.core.exceptions import DseError
        >>> try:
        ...     verify("experiments")
        ... except DseError as exc:
        ...     print(exc)
        experiments: the bundle does not match its manifest: no MANIFEST.sha256: ...

        >>> found = verify("bundle")  # doctest: +SKIP
        >>> found.verdict, [(c.metric, c.verdict) for c in found.checks]  # doctest: +SKIP
        ('pass', [('latency_p50_ms', 'pass'), ('latency_p99_ms', 'pass'), ('accuracy', 'pass')])
    """
    from dse.deploy import read_bundle
    from dse.spec import MeasureSpec

    for name, value in (("confirm_runs", confirm_runs), ("confirm_gap_s", confirm_gap_s)):
        if value < 0:
            raise DseError(f"{name} {value}: must be 0 or more")
    found = read_bundle(Path(bundle))
    device = _profile(found, profile)
    candidate = Candidate.from_dict({**found.deployment["candidate"],
                                     "device_profile": device.name})
    _check_device(found, device, candidate)
    try:
        measure = MeasureSpec.model_validate(found.deployment["measurement"])
    except ValueError as exc:
        raise DseError(f"{found.folder}: deployment.yaml's measurement: "
                       f"{str(exc).splitlines()[0]}") from None
    request = _request(found, candidate)
    cache = Path(cache_dir) if cache_dir is not None else _default_cache()
    first = _measured(device, cache, address, request, measure)
    if isinstance(first, str):
        return _written(VerifyReport(found.folder, "failed", [], device.name, reason=first),
                        report, device)
    results, problem = [first], ""
    while (len(results) <= confirm_runs
           and not settled(_runs(found, results, tolerance), confirm_runs + 1)):
        if len(results) > 1:
            # The first fresh run follows at once (a process's own excursion); later ones after
            # an idle pause, which outlasts a machine's slower spell after heavy use.
            time.sleep(confirm_gap_s)
        again = _measured(device, cache, address, request, measure)
        if isinstance(again, str):
            problem = f"fresh run {len(results) + 1} failed: {again}"
            break
        results.append(again)
    return _written(_judged(found, device, results, tolerance, accuracy_tolerance,
                            needed=confirm_runs + 1, problem=problem), report, device)


def _request(found: Bundle, candidate: Candidate) -> VerifyRequest | GenerationVerifyRequest:
    """What the device deploys: the artifact and carried data, or a language model's folder,
    prompts and recorded tokens."""
    from dse.deploy import GenerationVerifyRequest, VerifyRequest

    if found.generation is not None:
        settings = dict(found.deployment["model"].get("settings") or {})
        return GenerationVerifyRequest(candidate, found.generation.model_files, settings,
                                       found.generation.prompts, found.generation.tokens,
                                       found.run_to_run)
    assert found.data is not None  # a fixed-shape model's bundle carries its inputs
    return VerifyRequest(candidate, str(found.deployment["artifact"]["format"]),
                         found.artifact_file, found.artifact,
                         tuple(found.deployment["input"]["shape"][1:]),
                         found.deployment["input"].get("fixed_batch"), found.data,
                         found.run_to_run)


def _measured(device: HardwareProfile, cache: Path, address: str | None,
              request: VerifyRequest | GenerationVerifyRequest,
              measure: MeasureSpec) -> VerifiedModel | str:
    """One run: the bundle deployed and measured by a worker started for it (a fresh process),
    or why not, in one line."""
    from dse.deploy import VerifiedModel
    from dse.farm import call_device

    result = call_device(device, cache, address, "verify_bundle", (request, measure),
                         _VERIFY_SECONDS)
    if isinstance(result, VerifiedModel) and result.measurement.status != "ok":
        return f"{result.measurement.status}: {result.measurement.reason}"
    return result if isinstance(result, VerifiedModel) else str(result)


def _profile(found: Bundle, path: str | os.PathLike[str] | None) -> HardwareProfile:
    from dse.deploy import DEVICE_PROFILE
    from dse.spec import load_profile

    target = Path(path) if path is not None else found.folder / DEVICE_PROFILE
    if path is not None and not target.is_file():
        raise DseError(f"--profile {target}: no such device profile file")
    try:
        return load_profile(target)
    except SpecError as exc:
        raise DseError(str(exc).splitlines()[0]) from None


def _check_device(found: Bundle, device: HardwareProfile, candidate: Candidate) -> None:
    """A profile that cannot run the bundle's configuration: one line, before Ray, by the rules a
    trial's worker applies (:func:`dse.trial.prepare.check_deployable`)."""
    from dse.core import BuildError
    from dse.trial import check_deployable

    if device.kind == "replay":
        raise DseError(f"{found.folder}: profile {device.name!r} replays a recorded table: it "
                       f"cannot run a model")
    try:
        check_deployable(candidate, device)
    except BuildError as exc:
        raise DseError(f"{found.folder}: {exc}; give --profile a device that runs it") from None


def _runs(found: Bundle, results: list[VerifiedModel], tolerance: float) -> list[Run]:
    """Each run's own latency checks against the record, and its window's facts."""
    recorded = found.measurements
    runs = []
    for number, result in enumerate(results, start=1):
        provenance = result.measurement.provenance
        checks = latency_checks(recorded.get("metrics", {}), result.measurement.metrics,
                                recorded.get("objectives", []), tolerance, run=number,
                                generative=found.generation is not None)
        runs.append(Run(number, checks, provenance.get("measurement_quality", ""),
                        is_disturbed(provenance.get("measurement_flags", "")),
                        provenance.get("pid", ""), provenance.get("device_id", "")))
    return runs


def _judged(found: Bundle, device: HardwareProfile, results: list[VerifiedModel],
            tolerance: float, accuracy_tolerance: float, *, needed: int = 1,
            problem: str = "") -> VerifyReport:
    """The verdict over every run (the first, then the fresh ones): each latency decided by
    :func:`dse.deploy.confirm.decided`, where ``needed`` runs must find it slower; accuracy on
    the first run's scores (the same inputs give the same outputs in every run)."""
    first = results[0]
    measured = first.measurement.metrics
    carried = found.measurements.get("carried_data", {})
    scores = {name: (carried.get(name), measured.get(name))
              for name in ("accuracy", "top1_agreement") if name in carried}
    if found.generation is not None:
        # The tokens recorded at export are the deployed model's own: all of them match there.
        scores = {"greedy_tokens_as_recorded": (1.0, first.decisions_agree)}
    runs = _runs(found, results, tolerance)
    comparison = Comparison([decided(runs, check.metric, needed) for check in runs[0].checks]
                            + score_checks(scores, accuracy_tolerance))
    changes = {key: [str(then), str(first.fingerprint.get(key, "absent"))]
               for key, then in found.deployment["device"].get("fingerprint", {}).items()
               if str(then) != str(first.fingerprint.get(key, "absent"))}
    provenance = first.measurement.provenance
    notes = _notes(found, changes, provenance) + _run_notes(runs, results)
    verdict: str = comparison.verdict
    reason = _inconclusive_reason(results, problem) if verdict == "inconclusive" else ""
    if problem and not reason:
        notes.append(problem)
    return VerifyReport(
        found.folder, verdict, comparison.checks, device.name,
        provenance.get("device_id", ""),
        {k: v for k, v in measured.items() if isinstance(v, int | float) and math.isfinite(v)},
        provenance.get("measurement_quality", ""), first.max_abs_diff, first.decisions_agree,
        changes, notes, reason, confirmation=summary(runs), runs=runs)


def _inconclusive_reason(results: list[VerifiedModel], problem: str) -> str:
    """Why no run could decide: the first disturbance a run's window had, else the fresh run
    that failed."""
    for result in results:
        provenance = result.measurement.provenance
        if is_disturbed(provenance.get("measurement_flags", "")):
            return (f"other work on the device disturbed the measurement "
                    f"({provenance.get('disturbance') or 'see its provenance'}) even after "
                    f"re-measuring: a pass cannot be certified on a busy device; verify again "
                    f"when it is quiet")
    return f"{problem}: a suspected regression was neither confirmed nor dismissed"


def _run_notes(runs: list[Run], results: list[VerifiedModel]) -> list[str]:
    """The windows other work disturbed, and the runs labelled other than ok or disturbed."""
    notes = []
    touched = [run.run for run in runs if run.disturbed]
    if touched:
        which = "the measurement window was" if len(runs) == 1 else \
            f"run {', '.join(map(str, touched))} of {len(runs)}: the measurement window was"
        notes.append(f"{which} disturbed: other work on the device may explain a slower "
                     f"figure; verify again when it is quiet")
    for run in runs:
        if run.quality not in ("", "ok", "disturbed"):
            flags = results[run.run - 1].measurement.provenance.get("measurement_flags", "")
            notes.append(f"run {run.run} was measured {run.quality} ({flags}): its figures count "
                         f"with their interval, which says how precise they are")
    return notes


def _notes(found: Bundle, changes: dict[str, list[str]], provenance: dict[str, str]) -> list[str]:
    from dse.plugins import declaration

    backend = str(found.deployment["deployment"]["backend"])
    notes = []
    bound = set(declaration(backend).fingerprint) | set(_DEVICE_KEYS)
    relevant = {key: value for key, value in changes.items() if key in bound}
    if relevant:
        shown = ", ".join(f"{key}: {then} -> {now}" for key, (then, now) in relevant.items())
        notes.append(f"this device differs from the exporting one ({shown}): {backend} built "
                     f"the bundle's {found.deployment['artifact']['file']} here, and what it "
                     f"builds for a device (engines, tuned schedules, caches) was rebuilt for "
                     f"this one, not reused")
    if provenance.get("run_to_run", "").startswith("not calibrated"):
        notes.append("intervals are within this run only: the device has no run-to-run "
                     "calibration in this cache (dse calibrate; --cache-dir)")
    return notes


def _default_cache() -> Path:
    from dse.util import user_cache_root

    return user_cache_root() / "verify"


def _written(found: VerifyReport, report: str | os.PathLike[str] | None,
             device: HardwareProfile) -> VerifyReport:
    from dataclasses import replace

    from dse.deploy import REPORTS_DIR
    from dse.storage import refused_writes_as_errors
    from dse.util import atomic_write_text

    if report is None:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
        target = found.bundle / REPORTS_DIR / f"{stamp}-{device.name}.json"
    else:
        target = Path(report)
    with refused_writes_as_errors(target.parent, "free space, or --report elsewhere"):
        atomic_write_text(target, json.dumps(found.to_dict(), indent=1, default=str) + "\n")
    return replace(found, report_file=target)
