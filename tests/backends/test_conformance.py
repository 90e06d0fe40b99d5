"""dse's own backends pass dse.testing's backend suite, the one a plugin's backend passes (as
Optuna's samplers pass ``optuna.testing.pytest_samplers``): the runner tests at every precision
the capability table supports on the CPU, the backend tests (registration, capability entries,
knob and artifact errors) for every backend, GPU-only ones too.

A new backend joins :data:`dse.backends.BACKENDS` and its CPU entries in the capability table, and
is tested here without a line added. Runners come from the session's ``runner_pool`` (one compile
per backend and precision); knob errors are raised before any compile, so those tests are cheap.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest

from dse.artifacts import Artifact
from dse.backends import BACKENDS, CAPABILITIES, Runner
from dse.core.exceptions import BuildError
from dse.spec import HardwareProfile
from dse.testing import BackendSuite
from dse.testing.backends import BackendBench
from tests.backends.conftest import RunnerFor, cpu_lacks

CPU_COMBINATIONS = sorted((backend, precision) for (backend, precision, kind), entry
                          in CAPABILITIES.items() if kind == "cpu" and entry.supported)


CPU_BACKENDS = sorted({backend for backend, _ in CPU_COMBINATIONS})
GPU_ONLY_BACKENDS = sorted(set(BACKENDS) - set(CPU_BACKENDS))


@pytest.fixture(autouse=True)
def _keep_torch_threads() -> Iterator[None]:
    import torch

    # The torch backends set the process-wide pool on compile; leave it as found for other tests.
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_every_cpu_backend_runs_fp32_on_the_cpu(name: str) -> None:
    assert (name, "fp32") in CPU_COMBINATIONS


@pytest.mark.parametrize("name", GPU_ONLY_BACKENDS)
def test_gpu_only_backends_have_no_cpu_entry_and_refuse_a_cpu_device(
        name: str, fp32_artifacts: dict[str, Artifact], cpu_profile: HardwareProfile) -> None:
    # A backend of language models only runs no fixed-shape model anywhere: it refuses too.
    assert name in {"onnxruntime_cuda", "onnxruntime_tensorrt", "tensorrt", "onnxruntime_genai"}
    with pytest.raises(BuildError):
        BACKENDS[name].compile(fp32_artifacts[name], {}, cpu_profile, 2)


class TestEveryBackend(BackendSuite):
    """The shipped suite over dse's backends, on the session's bench and pooled runners."""

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        # The runner tests at every supported CPU combination, the backend tests per backend.
        if "precision" in metafunc.fixturenames:
            metafunc.parametrize(("backend_name", "precision"), CPU_COMBINATIONS,
                                 ids=["-".join(pair) for pair in CPU_COMBINATIONS])
        else:
            metafunc.parametrize("backend_name", sorted(BACKENDS))

    @pytest.fixture
    def backend_bench(self, backends_bench: BackendBench) -> BackendBench:
        return backends_bench

    @pytest.fixture
    def device_profile(self, cpu_profile: HardwareProfile) -> HardwareProfile:
        return cpu_profile

    @pytest.fixture
    def runner(self, backend_name: str, precision: str, runner_pool: RunnerFor) -> Runner:
        return runner_pool(backend_name, precision)

    @pytest.fixture
    def one_thread_runner(self, backend_name: str, precision: str, runner_pool: RunnerFor,
                          backends_bench: BackendBench, cpu_profile: HardwareProfile) -> Runner:
        # The pool compiles every precision but fp32 on one thread: one of those, where the
        # backend has one this CPU runs; a runner of its own otherwise (tvm, xla: fp32 only).
        others = [other for name, other in CPU_COMBINATIONS
                  if name == backend_name and other != "fp32" and not cpu_lacks(name, other)]
        if precision != "fp32" or others:
            return runner_pool(backend_name, precision if precision != "fp32" else others[0])
        return backends_bench.runner(backend_name, "fp32", cpu_profile,
                                     {BACKENDS[backend_name].thread_knob: 1})

    @pytest.fixture
    def disposable_runner(self, runner: Runner, backends_bench: BackendBench) -> Iterator[Runner]:
        # close() drops what the runner holds; a shallow copy shares the session, so closing the
        # copy tests the contract on the real class without a second compile of the pooled
        # runner, which must run on after it.
        yield copy.copy(runner)
        assert runner.run(backends_bench.images[:1]).shape == (1, 10)

    def test_pooled_runners_run_on_the_threads_they_were_given(
            self, runner: Runner, precision: str, cpu_profile: HardwareProfile) -> None:
        # The pool compiles fp32 without knobs (the profile's thread budget), the rest on 1.
        assert runner.describe()["threads"] == (str(cpu_profile.max_threads)
                                                if precision == "fp32" else "1")
