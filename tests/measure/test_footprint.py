"""The model's own memory (memory_model_mb): readings, and a real runner through the worker."""

from __future__ import annotations

from pathlib import Path

import yaml

from dse.core.candidate import Candidate
from dse.farm.worker import DeviceWorker
from dse.measure.footprint import RESOLUTION_BYTES, model_footprint_mb, rss_bytes, trim_heap
from dse.spec import HardwareProfile, MeasureSpec, TrainingSpec
from tests.conftest import LOCAL_CPU

MB = 1_000_000
TINY_ARCH = {"num_stages": 1, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2}


def test_the_footprint_is_the_rss_the_runner_added_plus_what_it_borrowed() -> None:
    assert model_footprint_mb(100 * MB, 130 * MB, 5 * MB) == (35.0, "")
    # Readings of one live set differ by the allocator's pages: a small drop is "nothing added".
    assert model_footprint_mb(100 * MB, 100 * MB - RESOLUTION_BYTES, 2 * MB) == (2.0, "")
    value, why = model_footprint_mb(100 * MB, 90 * MB, 0)
    assert value is None
    assert why == ("the process released 10.0 MB more than the runner took between the "
                   "readings; its footprint cannot be read from RSS")


def test_trimming_the_heap_hands_freed_memory_back() -> None:
    # Every other 32 kB block freed: the holes sit inside the heap, where the allocator keeps
    # them (RSS unchanged) until malloc_trim hands their pages back.
    trim_heap()
    blocks = [bytearray(b"x" * 32768) for _ in range(2000)]
    del blocks[::2]
    kept = rss_bytes()
    trim_heap()
    assert kept - rss_bytes() >= 20 * MB
    assert len(blocks) == 1000


def test_a_real_runner_reports_its_own_memory_apart_from_the_process(tmp_path: Path) -> None:
    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    worker = DeviceWorker(profile, str(tmp_path))
    measure = MeasureSpec(min_seconds=0.0, max_seconds=0.5, warmup_max_seconds=0.05)
    training = TrainingSpec(epochs=1, batch_size=256)
    footprints = {}
    for batch in (1, 256):
        candidate = Candidate("cnn", TINY_ARCH, "fp32", batch, "onnxruntime",
                              {"intra_op_threads": 1})
        result = worker.evaluate(candidate, training, measure)
        assert result.status == "ok", result.reason
        footprints[batch] = result.metrics["memory_model_mb"]
        # The process holds Python, torch and the runtimes: hundreds of MB whatever the model.
        assert result.metrics["process_rss_peak_mb"] > 10 * footprints[batch]
    # Batch 256 holds 256 times the activations of batch 1 (several MB here).
    activations = 256 * 1 * 8 * 8 * 4 * 16 / MB  # at least one 16-channel map per image
    assert footprints[256] > footprints[1] + activations
