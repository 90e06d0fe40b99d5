"""The verdict of a verification, the manifest and requirements.txt, on plain numbers and files."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from dse.deploy.compare import (
    DEFAULT_ACCURACY_TOLERANCE,
    DEFAULT_TOLERANCE,
    Comparison,
    checked_latencies,
    compare_accuracy,
    compare_latency,
    latency_checks,
    score_checks,
)
from dse.deploy.manifest import manifest_problems, write_manifest
from dse.deploy.standalone import requirements_text

if TYPE_CHECKING:
    from dse.app.bundle_verify import VerifyReport
    from dse.deploy.exported import VerifiedModel


def _latency(p50: float, low: float, high: float) -> dict[str, float]:
    return {"latency_p50_ms": p50, "latency_p50_ci_low_ms": low, "latency_p50_ci_high_ms": high}


RECORDED = _latency(1.00, 0.98, 1.02)


@pytest.mark.parametrize(("now", "verdict"), [
    (_latency(1.30, 1.25, 1.35), "regressed"),   # +30 %, intervals apart
    (_latency(1.05, 1.04, 1.06), "pass"),        # significant, but inside the 10 % tolerance
    (_latency(1.30, 0.90, 1.70), "pass"),        # +30 %, but the intervals overlap: noise
    (_latency(0.70, 0.68, 0.72), "improved"),
    ({"latency_p50_ms": 1.5}, "regressed"),       # no interval now: the point itself
])
def test_a_latency_regresses_only_beyond_the_tolerance_and_both_intervals(
        now: dict[str, float], verdict: str) -> None:
    check = compare_latency("latency_p50_ms", RECORDED, now, tolerance=0.10)
    assert check.verdict == verdict, check.why
    assert check.change_pct == pytest.approx(100 * (now["latency_p50_ms"] - 1))


def test_a_latency_missing_on_either_side_is_unchecked_not_passed() -> None:
    check = compare_latency("latency_p99_ms", RECORDED, {"latency_p99_ms": 2.0}, 0.10)
    assert (check.verdict, check.why) == ("unchecked", "no value recorded")


def test_the_campaigns_latency_objectives_are_checked_beside_the_median() -> None:
    assert checked_latencies(["accuracy", "latency_p99_ms"]) == ["latency_p50_ms",
                                                                 "latency_p99_ms"]
    assert checked_latencies(["throughput_sps"]) == ["latency_p50_ms"]


def test_accuracy_drops_beyond_the_tolerance_regress() -> None:
    assert compare_accuracy("accuracy", 0.95, 0.93, 0.01).verdict == "regressed"
    assert compare_accuracy("accuracy", 0.95, 0.945, 0.01).verdict == "pass"


def test_one_regression_decides_the_whole() -> None:
    found = Comparison(
        latency_checks(RECORDED, _latency(0.5, 0.49, 0.51), ["latency_p50_ms"], DEFAULT_TOLERANCE)
        + score_checks({"accuracy": (0.95, 0.90)}, DEFAULT_ACCURACY_TOLERANCE))
    assert [c.verdict for c in found.checks] == ["improved", "regressed"]
    assert found.verdict == "regressed"


def test_the_manifest_names_an_altered_and_a_missing_file(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "model.onnx").write_bytes(b"graph")
    (tmp_path / "run.py").write_text("print(1)\n")
    write_manifest(tmp_path)
    assert manifest_problems(tmp_path) == []
    # sha256sum reads the same file.
    assert subprocess.run(["sha256sum", "--quiet", "-c", "MANIFEST.sha256"],
                          cwd=tmp_path).returncode == 0
    (tmp_path / "verify").mkdir()
    (tmp_path / "verify" / "report.json").write_text("{}")  # reports are not checked
    (tmp_path / "model" / "model.onnx").write_bytes(b"grapH")
    (tmp_path / "run.py").unlink()
    assert manifest_problems(tmp_path) == [
        "model/model.onnx was altered (its SHA-256 is not the manifest's)", "run.py is missing"]
    (tmp_path / "MANIFEST.sha256").write_text("not a manifest line\n")
    assert manifest_problems(tmp_path) == [
        "MANIFEST.sha256 line 1 is not '<sha256>  <file>': 'not a manifest line'"]


def test_requirements_pin_the_exported_versions_and_torch_s_own_index() -> None:
    text = requirements_text(("executorch", "torch", "numpy", "absent-here"),
                             {"executorch": "1.5.1", "torch": "2.13.0+cpu", "numpy": "2.4.6"})
    assert text.splitlines() == ["--extra-index-url https://download.pytorch.org/whl/cpu",
                                 "executorch==1.5.1", "torch==2.13.0+cpu", "numpy==2.4.6",
                                 "absent-here"]


def _verified(flags: str, p50_now: float, pid: str = "1") -> VerifiedModel:
    """What a worker hands back of one run, with these quality flags and this p50."""
    from dse.core.measurement import Measurement
    from dse.deploy.exported import VerifiedModel

    now = _latency(p50_now, p50_now * 0.99, p50_now * 1.01)
    quality = flags.split(",")[0] or "ok"
    measurement = Measurement("c", "ok", metrics=now,
                              provenance={"measurement_flags": flags, "disturbed":
                                          str("disturbed" in flags), "pid": pid,
                                          "measurement_quality": quality,
                                          "disturbance": "other processes used 50%"})
    return VerifiedModel(measurement, 0.0, 1.0, {})


def _judged(results: list[VerifiedModel], needed: int = 1) -> VerifyReport:
    """The report ``dse verify`` gives these runs."""
    import numpy as np

    from dse.app.bundle_verify import _judged as judged
    from dse.deploy.bundle_read import Bundle
    from dse.deploy.exported import CarriedData
    from dse.spec import HardwareProfile

    zeros = np.zeros((2, 3), dtype=np.float32)
    bundle = Bundle(Path("b"), {"deployment": {"backend": "onnxruntime"},
                                "artifact": {"file": "model/model.onnx"},
                                "device": {"fingerprint": {}}},
                    {"metrics": RECORDED, "objectives": ["latency_p50_ms"]}, b"",
                    CarriedData(zeros, None, zeros, zeros))
    profile = HardwareProfile(name="local-cpu", kind="cpu", backends=["onnxruntime"],
                              precisions=["fp32"])
    return judged(bundle, profile, results, 0.10, 0.01, needed=needed)


def test_a_disturbed_window_cannot_certify_a_pass() -> None:
    """Other work took the device's CPU even after re-measuring: a pass would certify nothing
    (the measured figure may hide a regression), so the verdict is inconclusive, exit 1; a
    regression measured on a busy device is still reported as one."""
    found = _judged([_verified("disturbed", 1.0)])
    assert found.verdict == "inconclusive" and "other processes used 50%" in found.reason
    assert _judged([_verified("disturbed", 2.0)]).verdict == "regressed"
    found = _judged([_verified("underpowered", 1.0)])
    assert (found.verdict, found.reason) == ("pass", "")
    assert any(note.startswith("run 1 was measured underpowered") for note in found.notes)


def test_the_report_says_what_the_fresh_runs_found() -> None:
    """A first run 50 % slower, a fresh one as recorded: pass, each run in the report with its
    worker process, the confirmation in one line."""
    found = _judged([_verified("", 1.5, pid="11"), _verified("", 1.0, pid="12")], needed=3)
    assert (found.verdict, found.exit_code) == ("pass", 0)
    assert found.confirmation == ("suspected 50% slower (latency_p50_ms), confirmed in 0 of 1 "
                                  "fresh run (+0.0%)")
    assert [(run.run, run.pid, run.checks[0].verdict) for run in found.runs] == [
        (1, "11", "regressed"), (2, "12", "pass")]
    assert found.to_dict()["runs"][1]["checks"][0]["measured"] == 1.0
