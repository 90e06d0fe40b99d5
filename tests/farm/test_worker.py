"""The device worker measures a candidate end to end: scenarios, telemetry, provenance."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from dse.core.candidate import Candidate
from dse.farm.worker import DeviceWorker
from dse.spec import HardwareProfile, MeasureSpec, TrainingSpec
from tests.conftest import LOCAL_CPU, REPO

TINY_ARCH = {"num_stages": 1, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2}


def test_offline_and_sustained_runs_add_their_metrics(tmp_path: Path) -> None:
    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    worker = DeviceWorker(profile, str(tmp_path))
    candidate = Candidate("cnn", TINY_ARCH, "fp32", 4, "onnxruntime", {"intra_op_threads": 1})
    measure = MeasureSpec(min_seconds=0.05, max_seconds=0.3, warmup_max_seconds=0.05,
                          offline_concurrency=2, offline_seconds=0.2, sustained_seconds=0.3)
    result = worker.evaluate(candidate, TrainingSpec(epochs=1, batch_size=256), measure)

    assert result.status == "ok", result.reason
    m = result.metrics
    assert m["offline_throughput_sps"] > 0
    assert abs(m["latency_drift_pct"]) < 1000
    assert m["latency_p50_ci_low_ms"] <= m["latency_p50_ms"] <= m["latency_p50_ci_high_ms"]
    assert m["first_call_ms"] > 0
    assert m["process_rss_peak_mb"] > 0
    # The telemetry window is the sustained run: at least as long as it was asked to be.
    window = float(result.provenance["window_end"]) - float(result.provenance["window_start"])
    assert window >= 0.3
    assert result.provenance["stationary"] in ("True", "False")
    assert result.samples["latency_ms"]
    times = result.samples["trace.process_memory.time_s"]
    assert len(times) >= 2
    assert len(result.samples["trace.process_memory.rss_mb [MB]"]) == len(times)
    for name in ("power_mean_w", "temperature_peak_c"):
        assert name in m or result.missing[name]
    # The graph's FLOPs per call over the median call's time.
    assert m["achieved_gflops"] == (
        m["flops_m"] * 1e6 * 4 / (m["latency_p50_ms"] / 1e3) / 1e9)


def test_a_candidate_the_device_cannot_run_is_infeasible_not_an_error(tmp_path: Path) -> None:
    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    worker = DeviceWorker(profile, str(tmp_path))
    candidate = Candidate("cnn", TINY_ARCH, "int8", 1, "torch", {"num_threads": 1})
    result = worker.evaluate(candidate, TrainingSpec(epochs=1), MeasureSpec())
    assert result.status == "infeasible"
    assert "int8" in result.reason
    assert result.metrics == {}


def test_a_runner_crashing_mid_window_stops_the_probes(tmp_path: Path) -> None:
    import numpy as np

    from dse.backends import Runner
    from dse.trial.prepare import PreparedCandidate

    class CrashingRunner(Runner):
        """Fails on its 50th call, inside the timed window (a device lost mid-measurement)."""

        batch_size = 1

        def __init__(self) -> None:
            self.calls = 0

        def run(self, x: np.ndarray) -> np.ndarray:
            self.calls += 1
            if self.calls == 50:
                raise RuntimeError("device lost")
            return np.zeros((len(x), 10), dtype=np.float32)

        def describe(self) -> dict[str, str]:
            return {}

        def close(self) -> None:
            pass

    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    worker = DeviceWorker(profile, str(tmp_path))
    prepared = PreparedCandidate(CrashingRunner(), np.zeros((1, 1, 8, 8), np.float32), {}, {})
    candidate = Candidate("cnn", TINY_ARCH, "fp32", 1, "onnxruntime", {})
    measure = MeasureSpec(warmup_max_seconds=0.0, min_seconds=1.0, max_seconds=2.0)
    try:
        worker._measure(candidate, prepared, measure, {})
    except RuntimeError as exc:
        assert "device lost" in str(exc)
    else:
        raise AssertionError("the crash did not surface")
    assert all(probe._thread is None for probe in worker.probes)


def test_the_first_listed_probe_wins_a_shared_metric() -> None:
    from dse.measure.telemetry import Probe, ProbeResult, Trace, Window
    from dse.trial.telemetry_window import TelemetryWindow

    class Fixed(Probe):
        provides = ("power_mean_w",)

        def __init__(self, name: str, watts: float | None, why: str = "") -> None:
            super().__init__(interval_s=1.0)
            self.name, self.watts, self.why = name, watts, why

        def available(self) -> tuple[bool, str]:
            return True, ""

        def read(self) -> dict[str, float]:
            return {}

        def summarize(self, trace: Trace, window: Window) -> ProbeResult:
            if self.watts is None:
                return ProbeResult(missing={"power_mean_w": self.why})
            return ProbeResult(metrics={"power_mean_w": self.watts})

    missing: dict[str, str] = {}
    window = TelemetryWindow([Fixed("absent", None, "no counter"), Fixed("gpu", 200.0),
                              Fixed("cpu", 15.0)], missing)
    window.mark(True)
    window.mark(False)
    assert window.summarize(10) == {"power_mean_w": 200.0}
    assert "power_mean_w" not in missing
    assert window.provenance() == {"cpu.shadowed.power_mean_w": "15"}


def test_blocks_reach_the_metrics_and_the_provenance(tmp_path: Path) -> None:
    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    worker = DeviceWorker(profile, str(tmp_path))
    candidate = Candidate("cnn", TINY_ARCH, "fp32", 2, "onnxruntime", {"intra_op_threads": 1})
    training = TrainingSpec(epochs=1, batch_size=256)
    # A loose precision: a run the busy machine leaves imprecise would be re-measured with twice
    # the blocks (tests/measure/test_remeasure.py); here the blocks asked for are the point.
    base = {"min_seconds": 0.0, "max_seconds": 0.6, "warmup_max_seconds": 0.05,
            "precision": {"p50": 50.0, "p99": 50.0}}
    blocked = worker.evaluate(candidate, training, MeasureSpec(**base, blocks=4))
    assert blocked.status == "ok", blocked.reason
    assert blocked.provenance["blocks"] == "4"
    medians = [float(v) for v in blocked.provenance["block_p50_ms"].split()]
    assert len(medians) == 4
    assert blocked.metrics["between_run_cv"] >= 0
    assert len(blocked.samples["latency_ms"]) == int(blocked.provenance["timed_iters"])

    single = worker.evaluate(candidate, training, MeasureSpec(**base, blocks=1))
    assert single.provenance["blocks"] == "1" and single.provenance["block_p50_ms"] == ""
    assert "between_run_cv" not in single.metrics
    assert single.missing["between_run_cv"] == "measured in one block (measurement.blocks = 1)"


def test_a_worker_is_ready_only_once_its_runtimes_are_loaded(tmp_path: Path) -> None:
    """The dispatcher's readiness call loads torch and the profile's runtimes, so a restarted
    worker's first trial does not pay for them inside its timeout. A fresh process: the test
    process has them loaded already."""
    code = (
        "import sys, yaml\n"
        "from dse.farm.worker import DeviceWorker\n"
        "from dse.spec import HardwareProfile\n"
        "from tests.conftest import LOCAL_CPU\n"
        f"worker = DeviceWorker(HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU)), "
        f"{str(tmp_path)!r})\n"
        "before = [m in sys.modules for m in ('torch', 'onnxruntime')]\n"
        "worker.identity()\n"
        "print(before, [m in sys.modules for m in ('torch', 'onnxruntime')])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[False, False] [True, True]", done.stdout


def test_a_campaigns_worker_loads_only_the_campaigns_runtimes(tmp_path: Path) -> None:
    """On a profile that lists ONNX Runtime and torch: a torch-only campaign's worker leaves ONNX
    Runtime unloaded but warms torch's ONNX exporter (onnxscript), which every fixed-shape
    candidate uses for its graph; a language-model campaign's worker loads no exporter (the
    test above: a worker told nothing loads every runtime of its profile)."""
    code = (
        "import sys, yaml\n"
        "from dse.farm.worker import DeviceWorker\n"
        "from dse.spec import HardwareProfile\n"
        "from tests.conftest import LOCAL_CPU\n"
        f"worker = DeviceWorker(HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU)), "
        f"{str(tmp_path)!r})\n"
        "worker.identity(sys.argv[1].split(','), sys.argv[2] == 'generative')\n"
        "print([m in sys.modules for m in ('torch', 'onnxruntime', 'onnxscript')])\n")
    seen = {}
    for backends, kind in (("torch", "fixed"), ("torch", "generative")):
        done = subprocess.run([sys.executable, "-c", code, backends, kind], capture_output=True,
                              text=True, cwd=REPO, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        seen[backends, kind] = done.stdout.strip().splitlines()[-1]
    assert seen == {("torch", "fixed"): "[True, False, True]",
                    ("torch", "generative"): "[True, False, False]"}
