"""One suite every registered backend passes (as Optuna ships one for its samplers).

A new backend joins :data:`dse.backends.BACKENDS` and is tested here without a line added, provided
``fp32_artifacts`` (conftest) knows how to build the artifact it loads.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

from dse.backends import BACKENDS, PROVENANCE_KEYS, Backend, Runner
from dse.build import Artifact
from dse.exceptions import BuildError
from dse.quality.digits import DigitsSplit
from dse.spec import HardwareProfile


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> Backend:
    return BACKENDS[request.param]


@pytest.fixture
def artifact(backend: Backend, fp32_artifacts: dict[str, Artifact]) -> Artifact:
    return fp32_artifacts[backend.name]


@pytest.fixture(autouse=True)
def _keep_torch_threads() -> Iterator[None]:
    # Eager torch sets the process-wide pool on compile; leave it as found for other tests.
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_registered_under_its_name(backend: Backend) -> None:
    assert BACKENDS[backend.name] is backend
    assert backend.thread_knob in backend.knobs


def test_runs_a_batch_to_logits(backend: Backend, artifact: Artifact,
                                cpu_profile: HardwareProfile,
                                backends_split: DigitsSplit) -> None:
    with backend.compile(artifact, {}, cpu_profile, batch_size=4) as runner:
        assert isinstance(runner, Runner)
        assert runner.batch_size == 4
        logits = runner.run(backends_split.x_test[:4])
        assert isinstance(logits, np.ndarray)
        assert logits.shape == (4, 10)
        assert logits.dtype == np.float32
        assert np.isfinite(logits).all()
        # Smaller batches (the tail of an accuracy pass) work too, and results are repeatable.
        assert runner.run(backends_split.x_test[:1]).shape == (1, 10)
        np.testing.assert_array_equal(runner.run(backends_split.x_test[:4]), logits)


def test_accepts_float64_and_non_contiguous_input(backend: Backend, artifact: Artifact,
                                                  cpu_profile: HardwareProfile,
                                                  backends_split: DigitsSplit) -> None:
    x = backends_split.x_test[:6]
    with backend.compile(artifact, {}, cpu_profile, batch_size=3) as runner:
        want = runner.run(x[::2])
        np.testing.assert_allclose(runner.run(np.ascontiguousarray(x[::2], np.float64)), want)
        readonly = np.array(x[::2])
        readonly.flags.writeable = False
        np.testing.assert_array_equal(runner.run(readonly), want)


def test_describe_gives_provenance(backend: Backend, artifact: Artifact,
                                   cpu_profile: HardwareProfile) -> None:
    with backend.compile(artifact, {}, cpu_profile, batch_size=2) as runner:
        info = runner.describe()
    assert set(PROVENANCE_KEYS) <= set(info)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in info.items())
    assert info["backend"] == backend.name
    assert info["precision"] == "fp32"
    assert info["backend_version"]
    # No knob: the profile's thread budget.
    assert info["threads"] == str(cpu_profile.max_threads)


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_knob_is_honoured(backend: Backend, artifact: Artifact,
                                 cpu_profile: HardwareProfile, threads: int) -> None:
    with backend.compile(artifact, {backend.thread_knob: threads}, cpu_profile, 2) as runner:
        assert runner.describe()["threads"] == str(threads)


def test_unknown_knob_is_a_build_error(backend: Backend, artifact: Artifact,
                                       cpu_profile: HardwareProfile) -> None:
    allowed = str(sorted(backend.knobs)).replace("[", r"\[").replace("]", r"\]")
    with pytest.raises(BuildError, match=rf"no knob\(s\) \['turbo'\]; allowed: {allowed}"):
        backend.compile(artifact, {"turbo": True}, cpu_profile, 2)


@pytest.mark.parametrize("value", [0, -1, 1.5, "2", True])
def test_bad_thread_count_is_a_build_error(backend: Backend, artifact: Artifact,
                                           cpu_profile: HardwareProfile, value: object) -> None:
    with pytest.raises(BuildError, match=rf"{backend.thread_knob}' must be an integer >= 1"):
        backend.compile(artifact, {backend.thread_knob: value}, cpu_profile, 2)


def test_foreign_artifact_is_a_build_error(backend: Backend, fp32_artifacts: dict[str, Artifact],
                                           cpu_profile: HardwareProfile) -> None:
    for other in fp32_artifacts.values():
        if other.format != fp32_artifacts[backend.name].format:
            with pytest.raises(BuildError, match=f"got a '{other.format}' artifact"):
                backend.compile(other, {}, cpu_profile, 2)


def test_close_is_idempotent_and_final(backend: Backend, artifact: Artifact,
                                       cpu_profile: HardwareProfile,
                                       backends_split: DigitsSplit) -> None:
    runner = backend.compile(artifact, {}, cpu_profile, batch_size=1)
    runner.close()
    runner.close()
    with pytest.raises(RuntimeError, match="closed"):
        runner.run(backends_split.x_test[:1])
