"""The conformance bench's reference on a fresh bench: its first use trains the weights, and must
do so with gradients (it once trained inside the reference's inference mode, and failed whenever
a test asked for the reference before anything else had trained the weights)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dse.testing.backends import BackendBench


def test_the_reference_of_a_fresh_bench_trains_first(tmp_path: Path) -> None:
    bench = BackendBench(tmp_path)
    reference = bench.reference
    assert reference.shape == (bench.compared_images, 10)
    assert np.isfinite(reference).all()
    assert bench.trained.train_seconds > 0  # trained here, not loaded
