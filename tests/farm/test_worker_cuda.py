"""A campaign trial's work on a CUDA GPU through the device worker (the path `dse run` takes on a
GPU device: train, build, compile on the GPU, measure under NVML and the CUDA memory probe), timed
on the host's clock and with CUDA events (``measurement.timer``). Skips without a CUDA device
visible to torch; ``DSE_REQUIRE_GPU=1`` turns that skip into a failure."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dse.core.candidate import Candidate
from dse.farm.worker import DeviceWorker
from dse.spec import HardwareProfile, MeasureSpec, TrainingSpec

CUDA_PROFILE = """\
name: test-cuda
kind: cuda
backends: [torch, onnxruntime]
precisions: [fp32, fp16]
telemetry: [process_memory, nvml, cuda_memory]
"""
TINY_ARCH = {"num_stages": 1, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2}


def _cuda_or_skip() -> None:
    torch = pytest.importorskip("torch", reason="needs torch with CUDA")
    if not torch.cuda.is_available():
        pytest.skip(f"needs a CUDA device visible to torch (torch {torch.__version__}, "
                    f"CUDA build {torch.version.cuda})")


@pytest.mark.gpu
@pytest.mark.parametrize("timer", ["host", "cuda"])
def test_a_trial_measures_on_the_gpu_through_the_device_worker(tmp_path: Path, timer: str) -> None:
    _cuda_or_skip()
    profile = HardwareProfile.model_validate(yaml.safe_load(CUDA_PROFILE))
    worker = DeviceWorker(profile, str(tmp_path))
    worker.identity()  # the readiness call: loads torch and the runtimes first
    candidate = Candidate("cnn", TINY_ARCH, "fp16", 8, "torch", {"num_threads": 1})
    measure = MeasureSpec(min_seconds=0.05, max_seconds=0.5, warmup_max_seconds=0.1,
                          blocks=2, timer=timer)  # type: ignore[arg-type]
    result = worker.evaluate(candidate, TrainingSpec(epochs=1, batch_size=256), measure)

    assert result.status == "ok", result.reason
    assert result.provenance["timer"] == timer
    m = result.metrics
    assert m["latency_p50_ci_low_ms"] <= m["latency_p50_ms"] <= m["latency_p50_ci_high_ms"]
    assert 0 < m["latency_p50_ms"] < 1000
    assert 0 <= m["accuracy"] <= 1
    # The GPU's own sensors: NVML's power (or its reason) and the CUDA allocator's peak.
    assert "power_mean_w" in m or result.missing["power_mean_w"]
    assert m["cuda_allocated_peak_mb"] > 0, result.missing
    assert result.provenance.get("gpu_name") or result.provenance.get("nvidia_driver"), \
        result.provenance


def test_cuda_events_are_refused_for_a_cpu_device_at_validate(tmp_path: Path) -> None:
    from dse.app.api import load_experiment
    from dse.core.exceptions import SpecError
    from tests.conftest import LOCAL_CPU, TINY_SPACE

    for folder, name, text in [("search_spaces", "tiny.yaml", TINY_SPACE),
                               ("hw_profiles", "local-cpu.yaml", LOCAL_CPU)]:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / name).write_text(text)
    experiment = tmp_path / "timer.yaml"
    experiment.write_text("name: timer\nsearch_space: search_spaces/tiny.yaml\n"
                          "devices: [hw_profiles/local-cpu.yaml]\nbudget: {trials: 2}\n"
                          "measurement: {timer: cuda}\n")
    with pytest.raises(SpecError) as refused:
        load_experiment(experiment)
    assert refused.value.problems == [
        f"{experiment}: measurement.timer: cuda times with CUDA events, and devices[0] "
        f"('local-cpu') is a cpu device; allowed: host, or cuda with only cuda and jetson devices"]
