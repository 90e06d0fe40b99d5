"""ONNX Runtime fp32 and eager torch compute the same logits from the same trained weights."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from dse.accuracy.digits import DigitsSplit
from dse.artifacts import Artifact
from dse.backends import get_backend
from dse.spec import HardwareProfile


@pytest.fixture(autouse=True)
def _keep_torch_threads() -> Iterator[None]:
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("batch", [1, 7, 64])
def test_onnxruntime_matches_torch(fp32_artifacts: dict[str, Artifact], backends_split: DigitsSplit,
                                   cpu_profile: HardwareProfile, batch: int) -> None:
    x = backends_split.x_test[:batch]
    with get_backend("onnxruntime").compile(fp32_artifacts["onnxruntime"], {}, cpu_profile,
                                            batch) as ort_runner:
        ort_logits = ort_runner.run(x)
    with get_backend("torch").compile(fp32_artifacts["torch"], {}, cpu_profile,
                                      batch) as torch_runner:
        torch_logits = torch_runner.run(x)
    assert ort_logits.shape == torch_logits.shape == (batch, 10)
    np.testing.assert_allclose(ort_logits, torch_logits, rtol=1e-4, atol=1e-4)
    assert np.array_equal(ort_logits.argmax(1), torch_logits.argmax(1))
