"""``dse verify``: an exported bundle deployed on a device of a profile and measured by the
protocol it was measured with, then compared with what was recorded (:mod:`dse.deploy.compare`):
pass, regressed or improved, with the statistics, in a JSON report."""

from __future__ import annotations

import datetime
import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.candidate import Candidate
from dse.deploy.compare import (
    DEFAULT_ACCURACY_TOLERANCE,
    DEFAULT_TOLERANCE,
    Comparison,
    MetricCheck,
    compare,
)
from dse.exceptions import DseError, SpecError

if TYPE_CHECKING:
    from dse.deploy.bundle_read import Bundle
    from dse.deploy.exported import VerifiedModel
    from dse.spec import HardwareProfile

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
        verdict: ``pass``, ``improved``, ``regressed``, ``inconclusive`` (no check regressed,
            but other work disturbed the measurement window even after re-measuring it: a busy
            device cannot certify a pass), or ``failed`` (the model could not be deployed or
            measured on the device); ``reason`` says why for the last two.
        checks: every metric compared (:class:`dse.deploy.compare.MetricCheck`).
        device: the verifying device's profile; ``device_id`` the device itself.
        measured: the metrics measured now; ``measurement_quality`` their quality label.
        max_abs_diff: the largest difference of the outputs on the bundle's inputs from those
            recorded at export; ``decisions_agree`` the share with the same top output.
        fingerprint_changes: fingerprint entries that differ from the exporting device's
            (name -> [then, now]).
        notes: what else the reader should know (a rebuilt engine, a disturbed window).
        reason: why the verdict is ``failed``.
        report_file: where the JSON report was written.
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
           report: str | os.PathLike[str] | None = None) -> VerifyReport:
    """Deploy an exported bundle (:func:`dse.export`) on a device of a profile, measure it by
    the protocol its trial was measured with, and compare with the recorded measurement.

    A latency percentile (the median, and any the campaign optimised or constrained) regressed
    when it is slower than recorded by more than ``tolerance`` and its 95 % interval lies wholly
    above the recorded one (intervals floored by the device's calibrated run-to-run variation
    where ``dse calibrate`` measured it); accuracy and top-1 agreement with the fp32 model are
    re-scored on the bundle's inputs. A device whose fingerprint differs from the exporting
    one's (driver, runtime, TensorRT) rebuilds device-bound artifacts from the bundle's ONNX,
    and the report says so.

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

    Returns:
        The :class:`VerifyReport`; its ``exit_code`` is 0 for pass or improved, else 1.

    Raises:
        DseError: One line, before anything runs, for a bundle whose files do not match its
            manifest, an unreadable bundle, or a profile that cannot run its backend and
            precision.

    Examples:
        A folder that is not a bundle:

        >>> from dse import verify
        >>> from dse.exceptions import DseError
        >>> try:
        ...     verify("experiments")
        ... except DseError as exc:
        ...     print(exc)
        experiments: the bundle does not match its manifest: no MANIFEST.sha256: ...

        >>> found = verify("bundle")  # doctest: +SKIP
        >>> found.verdict, [(c.metric, c.verdict) for c in found.checks]  # doctest: +SKIP
        ('pass', [('latency_p50_ms', 'pass'), ('latency_p99_ms', 'pass'), ('accuracy', 'pass')])
    """
    from dse.deploy.bundle_read import read_bundle
    from dse.deploy.exported import VerifiedModel, VerifyRequest
    from dse.farm.single_call import call_device
    from dse.spec import MeasureSpec

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
    request = VerifyRequest(candidate, str(found.deployment["artifact"]["format"]),
                            found.artifact_file, found.artifact,
                            tuple(found.deployment["input"]["shape"][1:]),
                            found.deployment["input"].get("fixed_batch"), found.data,
                            found.run_to_run)
    cache = Path(cache_dir) if cache_dir is not None else _default_cache()
    result = call_device(device, cache, address, "verify_bundle", (request, measure),
                         _VERIFY_SECONDS)
    if isinstance(result, VerifiedModel) and result.measurement.status != "ok":
        result = f"{result.measurement.status}: {result.measurement.reason}"
    verdict = (_judged(found, device, result, tolerance, accuracy_tolerance)
               if isinstance(result, VerifiedModel)
               else VerifyReport(found.folder, "failed", [], device.name, reason=str(result)))
    return _written(verdict, report, device)


def _profile(found: Bundle, path: str | os.PathLike[str] | None) -> HardwareProfile:
    from dse.deploy.layout import DEVICE_PROFILE
    from dse.spec.loading import load_profile

    target = Path(path) if path is not None else found.folder / DEVICE_PROFILE
    if path is not None and not target.is_file():
        raise DseError(f"--profile {target}: no such device profile file")
    try:
        return load_profile(target)
    except SpecError as exc:
        raise DseError(str(exc).splitlines()[0]) from None


def _check_device(found: Bundle, device: HardwareProfile, candidate: Candidate) -> None:
    """A profile that cannot run the bundle's configuration: one line, before Ray, by the rules a
    trial's worker applies (:func:`dse.farm.prepare.check_deployable`)."""
    from dse.exceptions import BuildError
    from dse.farm.prepare import check_deployable

    if device.kind == "replay":
        raise DseError(f"{found.folder}: profile {device.name!r} replays a recorded table: it "
                       f"cannot run a model")
    try:
        check_deployable(candidate, device)
    except BuildError as exc:
        raise DseError(f"{found.folder}: {exc}; give --profile a device that runs it") from None


def _judged(found: Bundle, device: HardwareProfile, result: VerifiedModel, tolerance: float,
            accuracy_tolerance: float) -> VerifyReport:
    recorded = found.measurements
    measured = result.measurement.metrics
    carried = recorded.get("carried_data", {})
    scores = {name: (carried.get(name), measured.get(name))
              for name in ("accuracy", "top1_agreement") if name in carried}
    comparison: Comparison = compare(recorded.get("metrics", {}), measured,
                                     recorded.get("objectives", []), scores=scores,
                                     tolerance=tolerance, accuracy_tolerance=accuracy_tolerance)
    changes = {key: [str(then), str(result.fingerprint.get(key, "absent"))]
               for key, then in found.deployment["device"].get("fingerprint", {}).items()
               if str(then) != str(result.fingerprint.get(key, "absent"))}
    provenance = result.measurement.provenance
    notes = _notes(found, changes, provenance)
    verdict: str = comparison.verdict
    reason = ""
    if verdict != "regressed" and "disturbed" in provenance.get("measurement_flags", ""):
        verdict = "inconclusive"
        reason = (f"other work on the device disturbed the measurement "
                  f"({provenance.get('disturbance') or 'see its provenance'}) even after "
                  f"re-measuring: a pass cannot be certified on a busy device; verify again "
                  f"when it is quiet")
    return VerifyReport(
        found.folder, verdict, comparison.checks, device.name,
        provenance.get("device_id", ""),
        {k: v for k, v in measured.items() if isinstance(v, int | float) and math.isfinite(v)},
        provenance.get("measurement_quality", ""), result.max_abs_diff, result.decisions_agree,
        changes, notes, reason)


def _notes(found: Bundle, changes: dict[str, list[str]], provenance: dict[str, str]) -> list[str]:
    from dse.parts.backends import declaration

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
    if provenance.get("disturbed") == "True":
        notes.append("the measurement window was disturbed: other work on the device may "
                     "explain a slower figure; verify again when it is quiet")
    if provenance.get("run_to_run", "").startswith("not calibrated"):
        notes.append("intervals are within this run only: the device has no run-to-run "
                     "calibration in this cache (dse calibrate; --cache-dir)")
    return notes


def _default_cache() -> Path:
    from dse.user_cache import user_cache_root

    return user_cache_root() / "verify"


def _written(found: VerifyReport, report: str | os.PathLike[str] | None,
             device: HardwareProfile) -> VerifyReport:
    from dataclasses import replace

    from dse.atomic import atomic_write_text
    from dse.deploy.manifest import REPORTS_DIR
    from dse.storage.write_failure import refused_writes_as_errors

    if report is None:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
        target = found.bundle / REPORTS_DIR / f"{stamp}-{device.name}.json"
    else:
        target = Path(report)
    with refused_writes_as_errors(target.parent, "free space, or --report elsewhere"):
        atomic_write_text(target, json.dumps(found.to_dict(), indent=1, default=str) + "\n")
    return replace(found, report_file=target)
