"""`import dse` is fast: no torch, onnxruntime or ray at import."""

from __future__ import annotations

import subprocess
import sys
import time


def test_import_is_light_and_fast() -> None:
    code = ("import sys, time; t = time.perf_counter(); import dse; d = time.perf_counter() - t; "
            "heavy = [m for m in ('torch', 'onnxruntime', 'ray', 'optuna', 'pandas') "
            "if m in sys.modules]; print(d, heavy)")
    best = float("inf")
    for _ in range(3):  # the best of three, so a busy machine does not fail the test
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True).stdout.split(maxsplit=1)
        best = min(best, time.perf_counter() - start)
        assert out[1].strip() == "[]"
    assert best < 0.5


def test_dir_lists_the_public_api() -> None:
    import dse

    listed = dir(dse)
    assert set(dse.__all__) <= set(listed)
    assert "run_campaign" in listed and "CampaignStorage" in listed


def test_checking_a_profiles_probes_loads_no_measurement_stack() -> None:
    # The probe registry imports dse.measure.telemetry to learn the names: that must not bring
    # the harness and scipy into `dse validate` or a driver loading its experiment.
    code = ("import sys, yaml\nfrom dse.spec import HardwareProfile\n"
            "HardwareProfile.model_validate(yaml.safe_load('name: p\\nkind: cpu\\nbackends: "
            "[onnxruntime]\\nprecisions: [fp32]\\ntelemetry: [process_memory, "
            "{thermal_zones: {interval_s: 1.0}}, nvml]'))\n"
            "print('dse.measure.telemetry.nvml' in sys.modules, "
            "[m for m in ('scipy', 'dse.measure.harness', 'torch') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True []"


def test_dse_testing_imports_no_pytest_until_a_suite_is_used() -> None:
    # pytest is a dev extra: the trial-record helpers work without it, the suites load it.
    code = ("import sys\nimport dse.testing\nfrom dse.testing import record_trial\n"
            "print([m for m in ('pytest', 'torch') if m in sys.modules])\n"
            "from dse.testing import BackendSuite, ProbeSuite\nprint('pytest' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["[]", "True"]
