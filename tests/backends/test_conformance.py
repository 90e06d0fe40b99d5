"""One suite every registered backend passes (as Optuna ships one for its samplers), at every
precision the capability table supports on the CPU.

A new backend joins :data:`dse.backends.BACKENDS` and its CPU entries in the capability table, and
is tested here without a line added. Runners come from the session's ``runner_pool`` (one compile
per backend and precision); knob errors are raised before any compile, so those tests are cheap.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from dse.backends import BACKENDS, CAPABILITIES, PROVENANCE_KEYS, Backend, Runner
from dse.build import Artifact
from dse.exceptions import BuildError
from dse.quality.digits import DigitsSplit
from dse.spec import HardwareProfile
from tests.backends._suite import bound_results, check_runner
from tests.backends.conftest import COMPARED_IMAGES, POOL_BATCH, RunnerFor

CPU_COMBINATIONS = sorted((backend, precision) for (backend, precision, kind), entry
                          in CAPABILITIES.items() if kind == "cpu" and entry.supported)


CPU_BACKENDS = sorted({backend for backend, _ in CPU_COMBINATIONS})
GPU_ONLY_BACKENDS = sorted(set(BACKENDS) - set(CPU_BACKENDS))


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> Backend:
    return BACKENDS[request.param]


@pytest.fixture(params=CPU_BACKENDS)
def cpu_backend(request: pytest.FixtureRequest) -> Backend:
    return BACKENDS[request.param]


@pytest.fixture(params=CPU_COMBINATIONS, ids="-".join)
def combination(request: pytest.FixtureRequest) -> tuple[str, str]:
    backend, precision = request.param
    return str(backend), str(precision)


@pytest.fixture
def runner(combination: tuple[str, str], runner_pool: RunnerFor) -> Runner:
    return runner_pool(*combination)


@pytest.fixture(autouse=True)
def _keep_torch_threads() -> Iterator[None]:
    import torch

    # The torch backends set the process-wide pool on compile; leave it as found for other tests.
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_every_cpu_backend_runs_fp32_on_the_cpu(cpu_backend: Backend) -> None:
    assert (cpu_backend.name, "fp32") in CPU_COMBINATIONS


@pytest.mark.parametrize("name", GPU_ONLY_BACKENDS)
def test_gpu_only_backends_have_no_cpu_entry_and_refuse_a_cpu_device(
        name: str, fp32_artifacts: dict[str, Artifact], cpu_profile: HardwareProfile) -> None:
    assert name in {"onnxruntime_cuda", "onnxruntime_tensorrt", "tensorrt"}
    with pytest.raises(BuildError):
        BACKENDS[name].compile(fp32_artifacts[name], {}, cpu_profile, 2)


def test_registered_under_its_name(backend: Backend) -> None:
    assert BACKENDS[backend.name] is backend
    assert backend.thread_knob in backend.knobs


def test_runs_batches_to_reference_logits(runner: Runner, combination: tuple[str, str],
                                          backends_split: DigitsSplit,
                                          reference_logits: np.ndarray) -> None:
    assert runner.batch_size == POOL_BATCH
    check_runner(runner, combination[1], backends_split.x_test[:COMPARED_IMAGES],
                 reference_logits)


def test_accepts_float64_non_contiguous_and_read_only_input(runner: Runner,
                                                            backends_split: DigitsSplit) -> None:
    x = backends_split.x_test[:2 * POOL_BATCH]
    want = runner.run(np.ascontiguousarray(x[::2], dtype=np.float32))
    np.testing.assert_array_equal(runner.run(x[::2]), want)
    np.testing.assert_array_equal(runner.run(np.ascontiguousarray(x[::2], np.float64)), want)
    readonly = np.array(x[::2])
    readonly.flags.writeable = False
    np.testing.assert_array_equal(runner.run(readonly), want)


def test_concurrent_runs_give_the_sequential_results(runner: Runner,
                                                     backends_split: DigitsSplit) -> None:
    # The offline scenario keeps several calls in flight from several threads: each must still
    # get its own batch's logits (a runner may run them at once or take them in turn).
    batches = [backends_split.x_test[i:i + POOL_BATCH] for i in range(0, 8 * POOL_BATCH, POOL_BATCH)]
    alone = [runner.run(batch) for batch in batches]
    with ThreadPoolExecutor(max_workers=4) as pool:
        together = list(pool.map(runner.run, batches))
    for expected, result in zip(alone, together, strict=True):
        np.testing.assert_array_equal(result, expected)


def test_bound_calls_keep_their_batch_across_calls_and_runs(runner: Runner,
                                                           backends_split: DigitsSplit) -> None:
    # Two bindings and run() between them, many times over: each binding gives its own batch's
    # logits every time, however the runtime shares its input tensor among them.
    batches = [backends_split.x_test[i:i + POOL_BATCH] for i in (0, POOL_BATCH)]
    want = [runner.run(batch) for batch in batches]
    results = bound_results(runner, batches, calls=50)
    assert len(results) == 100
    for index, result in enumerate(results):
        np.testing.assert_array_equal(result, want[index % 2])


def test_a_bound_call_holds_its_own_copy_of_the_batch(runner: Runner,
                                                      backends_split: DigitsSplit) -> None:
    # The binding copies the batch once: a caller reusing its array for the next request does
    # not change what the bound call computes.
    batch = np.array(backends_split.x_test[:POOL_BATCH], dtype=np.float32)
    want = runner.run(batch)
    call = runner.bound_call(batch)
    np.testing.assert_array_equal(np.array(call()), want)
    batch[:] = backends_split.x_test[POOL_BATCH:2 * POOL_BATCH]
    np.testing.assert_array_equal(np.array(call()), want)


def test_a_bound_call_takes_one_batch_of_the_batch_size(runner: Runner,
                                                        backends_split: DigitsSplit) -> None:
    with pytest.raises(ValueError, match=f"one batch of {POOL_BATCH}"):
        runner.bound_call(backends_split.x_test[:POOL_BATCH - 1])


def test_concurrent_bound_calls_give_the_sequential_results(runner: Runner,
                                                            backends_split: DigitsSplit) -> None:
    # The offline scenario calls the timed call from several threads at once: every call must
    # still return its binding's logits (a barrier starts the threads together; fixed counts).
    batches = [backends_split.x_test[i:i + POOL_BATCH] for i in (0, POOL_BATCH)]
    want = [runner.run(batch) for batch in batches]
    bound = [runner.bound_call(batch) for batch in batches]
    threads = 4
    barrier = threading.Barrier(threads)

    def worker(slot: int) -> list[bool]:
        barrier.wait()
        return [bool(np.array_equal(np.array(bound[(slot + i) % 2]()), want[(slot + i) % 2]))
                for i in range(40)]

    with ThreadPoolExecutor(max_workers=threads) as pool:
        agreed = [ok for oks in pool.map(worker, range(threads)) for ok in oks]
    assert agreed == [True] * (threads * 40)


def test_describe_gives_provenance(runner: Runner, combination: tuple[str, str],
                                   cpu_profile: HardwareProfile) -> None:
    backend, precision = combination
    info = runner.describe()
    assert set(PROVENANCE_KEYS) <= set(info)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in info.items())
    assert info["backend"] == backend
    assert info["precision"] == precision
    assert info["backend_version"]
    # The pool compiles fp32 without knobs (the profile's thread budget), the rest with 1 thread.
    assert info["threads"] == (str(cpu_profile.max_threads) if precision == "fp32" else "1")


def test_thread_knob_is_honoured(cpu_backend: Backend, runner_pool: RunnerFor,
                                 fp32_artifacts: dict[str, Artifact],
                                 cpu_profile: HardwareProfile) -> None:
    others = [p for b, p in CPU_COMBINATIONS if b == cpu_backend.name and p != "fp32"]
    if others:
        assert runner_pool(cpu_backend.name, others[0]).describe()["threads"] == "1"
        return
    # A backend that runs only fp32 on a CPU (tvm): a runner of its own, on one thread.
    with cpu_backend.compile(fp32_artifacts[cpu_backend.name], {cpu_backend.thread_knob: 1},
                             cpu_profile, 2) as runner:
        assert runner.describe()["threads"] == "1"


def test_unknown_knob_is_a_build_error(backend: Backend, fp32_artifacts: dict[str, Artifact],
                                       cpu_profile: HardwareProfile) -> None:
    allowed = str(sorted(backend.knobs)).replace("[", r"\[").replace("]", r"\]")
    with pytest.raises(BuildError, match=rf"no knob\(s\) \['turbo'\]; allowed: {allowed}"):
        backend.compile(fp32_artifacts[backend.name], {"turbo": True}, cpu_profile, 2)


@pytest.mark.parametrize("value", [0, -1, 1.5, "2", True])
def test_bad_thread_count_is_a_build_error(backend: Backend, fp32_artifacts: dict[str, Artifact],
                                           cpu_profile: HardwareProfile, value: object) -> None:
    with pytest.raises(BuildError, match=rf"{backend.thread_knob}' must be an integer >= 1"):
        backend.compile(fp32_artifacts[backend.name], {backend.thread_knob: value}, cpu_profile, 2)


def test_foreign_artifact_is_a_build_error(backend: Backend, fp32_artifacts: dict[str, Artifact],
                                           cpu_profile: HardwareProfile) -> None:
    for other in fp32_artifacts.values():
        if other.format != fp32_artifacts[backend.name].format:
            with pytest.raises(BuildError, match=f"got a '{other.format}' artifact"):
                backend.compile(other, {}, cpu_profile, 2)


def test_close_is_idempotent_and_final(runner: Runner, backends_split: DigitsSplit) -> None:
    # close() drops what the runner holds; a shallow copy shares the session, so closing the copy
    # tests the contract on the real class without a second compile of the pooled runner.
    doomed = copy.copy(runner)
    bound = doomed.bound_call(backends_split.x_test[:POOL_BATCH])
    bound()
    doomed.close()
    doomed.close()
    with pytest.raises(RuntimeError, match="closed"):
        doomed.run(backends_split.x_test[:1])
    with pytest.raises(RuntimeError, match="closed"):
        bound()
    assert runner.run(backends_split.x_test[:1]).shape == (1, 10)
