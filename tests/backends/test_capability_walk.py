"""Every entry of the capability table, walked: what it promises holds on this machine.

Supported CPU entries compile and pass the conformance check (with the session's pooled runners,
so torch.compile runs once per precision); supported GPU entries do the same on the GPU, or are
skipped naming the missing device; unsupported entries are refused by ``supports()`` and by
``prepare_candidate`` before anything is trained or built.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dse.accuracy.digits import DigitsSplit
from dse.backends import CAPABILITIES, get_backend, supports
from dse.core.candidate import Candidate
from dse.core.exceptions import BuildError
from dse.spec import HardwareProfile
from dse.testing.backends import check_runner
from dse.trial.prepare import prepare_candidate
from tests.backends._devices import NO_CUDA, NO_JETSON, has_cuda, has_jetson, missing_runtime
from tests.backends.conftest import (
    COMPARED_IMAGES,
    FAST,
    POOL_BATCH,
    TINY,
    ArtifactFor,
    RunnerFor,
)


def _param(key: tuple[str, str, str]) -> object:
    gpu = CAPABILITIES[key].supported and key[2] != "cpu"
    return pytest.param(key, id="-".join(key), marks=[pytest.mark.gpu] if gpu else [])


ENTRIES = [_param(key) for key in sorted(CAPABILITIES)]


def _profile(backend: str, precision: str, kind: str) -> HardwareProfile:
    # A device that lists the backend and precision, so only the capability table can refuse.
    return HardwareProfile.model_validate({"name": f"walk-{kind}", "kind": kind,
                                           "backends": [backend], "precisions": [precision],
                                           "max_threads": 2})


@pytest.mark.parametrize("key", ENTRIES)
def test_entry_holds(key: tuple[str, str, str], request: pytest.FixtureRequest,
                     tmp_path: Path) -> None:
    backend, precision, kind = key
    entry = CAPABILITIES[key]
    assert entry.reason
    assert entry.requires
    assert supports(*key) == (entry.supported, entry.reason)
    if not entry.supported:
        candidate = Candidate("cnn", TINY, precision, POOL_BATCH, backend)
        with pytest.raises(BuildError) as refused:
            prepare_candidate(candidate, FAST, _profile(*key), tmp_path)
        assert str(refused.value) == entry.reason
        assert list(tmp_path.iterdir()) == [], "refused, yet something was trained or built"
        return
    split: DigitsSplit = request.getfixturevalue("backends_split")
    reference: np.ndarray = request.getfixturevalue("reference_logits")
    images = split.x_test[:COMPARED_IMAGES]
    if kind == "cpu":
        runner_pool: RunnerFor = request.getfixturevalue("runner_pool")
        check_runner(runner_pool(backend, precision), precision, images, reference)
        return
    if kind == "jetson" and not has_jetson():
        pytest.skip(NO_JETSON)
    if not has_cuda():
        pytest.skip(NO_CUDA)
    missing = missing_runtime(backend)
    if missing:
        pytest.skip(missing)
    artifact_for: ArtifactFor = request.getfixturevalue("artifact_for")
    with get_backend(backend).compile(artifact_for(backend, precision), {}, _profile(*key),
                                      POOL_BATCH) as runner:
        assert runner.describe()["device"] == "cuda"
        check_runner(runner, precision, images, reference)
