"""The backend conformance suite: what every backend and its runners must do, checked on a tiny
cnn trained on the digits. dse's own backends pass it (``tests/backends/test_conformance.py``),
and a plugin's backend proves itself with the same suite, as Optuna's samplers do with
``optuna.testing.pytest_samplers``: its test subclasses :class:`BackendSuite` and supplies the
fixture ``backend_name``.

    import pytest
    from dse.testing import BackendSuite

    class TestMyRuntime(BackendSuite):
        @pytest.fixture
        def backend_name(self) -> str:
            return "myruntime"

Run it where the plugin is loaded, as ``dse run`` loads it:
``DSE_PLUGINS=mylab.myruntime pytest tests/test_myruntime.py``.

This module needs pytest (dse's ``dev`` extra; a plugin's test environment has it), which
``import dse.testing`` does not import. The checks it is made of (:func:`check_runner`,
:func:`check_bound_call`, :data:`TOLERANCES`, ...) and :class:`BackendBench`, the trained model and
its runners, are usable on their own, as dse's tests of GPU runners use them.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dse.accuracy import DigitsSplit, TrainedModel, load_digits_split, train_or_load
from dse.artifacts import Artifact, ArtifactCache, build_artifact
from dse.backends import PROVENANCE_KEYS, Backend, Runner, get_backend, supports
from dse.core import BuildError, Candidate
from dse.plugins import DEVICE_KINDS, PRECISIONS, declaration
from dse.spec import HardwareProfile, TrainingSpec

__all__ = [
    "ARCH",
    "TOLERANCES",
    "TRAINING",
    "BackendBench",
    "BackendSuite",
    "Tolerance",
    "assert_decisions_agree",
    "bound_results",
    "check_bound_call",
    "check_runner",
    "cpu_profile",
    "run_in_batches",
]


@dataclass(frozen=True)
class Tolerance:
    """How close a precision's logits must come to the fp32 torch reference.

    ``atol`` bounds the largest absolute logit difference (None: not compared, as for int8, whose
    logits are rescaled by quantization). The predicted class must agree on every image whose
    fp32 top-2 margin exceeds :attr:`decisive_margin`: ``flip_margin`` where given, else twice
    ``atol`` (an error within ``atol`` cannot move a class that leads by more).

    Images nearer a decision boundary are not judged. Which of them flip depends on the last bits
    of the trained weights, and those differ from one CPU to the next (oneDNN and MKL pick their
    kernels by instruction set): a share-of-images threshold on the tiny, briefly trained test
    cnn (top-2 margins down to 0.004, a tenth of them below 0.15) passes on one machine and may
    fail on another.
    """

    atol: float | None
    flip_margin: float | None = None

    @property
    def decisive_margin(self) -> float:
        if self.flip_margin is not None:
            return self.flip_margin
        assert self.atol is not None, "a tolerance without atol needs a flip_margin"
        return 2 * self.atol


# The one place tolerances live. The tiny test cnn's logits reach ~8: bf16 keeps 8 significant bits
# (~0.4%), fp16 11 bits; the worst cases seen are ~0.06 (bf16) and ~0.011 (fp16).
TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(atol=1e-4),
    "fp16": Tolerance(atol=5e-2),
    "bf16": Tolerance(atol=2.5e-1),
    # ONNX Runtime's int8 logits move by up to 0.65 (every flip seen was at a margin below 0.02):
    # a class leading by 1.5 flips only if two logits err by 0.75 in opposite directions.
    "int8": Tolerance(atol=None, flip_margin=1.5),
    # e4m3 keeps 3 mantissa bits: logits move by up to ~1.1 under some instruction sets, so
    # twice the int8 bound.
    "fp8": Tolerance(atol=None, flip_margin=3.0),
}


def assert_decisions_agree(logits: np.ndarray, reference: np.ndarray, tolerance: Tolerance,
                           label: str) -> None:
    """The predicted class of ``logits`` is the reference's on every image whose reference top-2
    margin exceeds ``tolerance.decisive_margin``."""
    top2 = np.sort(reference, axis=1)[:, -2:]
    decisive = top2[:, 1] - top2[:, 0] > tolerance.decisive_margin
    flipped = decisive & (logits.argmax(1) != reference.argmax(1))
    assert not flipped.any(), (
        f"{label}: the predicted class changed on {int(flipped.sum())} of {int(decisive.sum())} "
        f"images whose fp32 class leads by more than {tolerance.decisive_margin:g} (images "
        f"{np.flatnonzero(flipped).tolist()})")


def run_in_batches(runner: Runner, images: np.ndarray) -> np.ndarray:
    """Logits for ``images``, fed in chunks of the runner's batch size (the last may be smaller)."""
    step = runner.batch_size
    return np.concatenate([runner.run(images[i:i + step]) for i in range(0, len(images), step)])


def check_runner(runner: Runner, precision: str, images: np.ndarray,
                 reference: np.ndarray) -> None:
    """The conformance check of a runner's results: shapes and dtype at the candidate batch and
    at batch 1, and logits within ``TOLERANCES[precision]`` of ``reference`` (the fp32 torch
    logits of ``images``), through :meth:`Runner.run` and :meth:`Runner.bound_call`."""
    batch = runner.batch_size
    tolerance = TOLERANCES[precision]
    logits = runner.run(images[:batch])
    assert isinstance(logits, np.ndarray)
    assert logits.shape == (batch, reference.shape[1])
    assert logits.dtype == np.float32
    assert np.isfinite(logits).all()
    one = runner.run(images[:1])
    assert one.shape == (1, reference.shape[1])
    assert one.dtype == np.float32
    # Batch 1 and the candidate batch compute the same first row.
    np.testing.assert_allclose(one[0], logits[0],
                               atol=tolerance.atol if tolerance.atol is not None else 1e-3)
    # Repeatable: the same batch gives the same logits.
    np.testing.assert_array_equal(runner.run(images[:batch]), logits)

    everything = run_in_batches(runner, images)
    if tolerance.atol is not None:
        worst = float(np.abs(everything - reference).max())
        assert worst <= tolerance.atol, f"{precision}: max |logit - fp32| = {worst:.3g}"
    assert_decisions_agree(everything, reference, tolerance, precision)
    check_bound_call(runner, images[:batch], logits)


def check_bound_call(runner: Runner, batch: np.ndarray, logits: np.ndarray) -> None:
    """The timed call (``Runner.bound_call``) on ``batch`` gives ``logits``, ``run``'s for it,
    as float32 of the same shape, on its first call and on later ones."""
    call = runner.bound_call(batch)
    for _ in range(3):
        got = np.array(call())
        assert got.dtype == np.float32
        assert got.shape == logits.shape
        np.testing.assert_array_equal(got, logits)


def bound_results(runner: Runner, batches: list[np.ndarray], calls: int) -> list[np.ndarray]:
    """``calls`` rounds over one bound call per batch, each round calling every binding in turn
    and ``run`` on the first batch between them (a binding shares the runtime's input tensor with
    ``run`` and the other bindings in some runtimes); every result, copied."""
    bound = [runner.bound_call(batch) for batch in batches]
    results = []
    for _ in range(calls):
        for call in bound:
            results.append(np.array(call()))
            runner.run(batches[0])
    return results


# The model the suite runs: the tiny cnn, two epochs on the digits (seconds on one core).
ARCH: dict[str, Any] = {"num_stages": 2, "depth": 1, "width_mult": 0.5, "kernel_size": 3,
                        "expand_ratio": 2}
TRAINING = TrainingSpec(epochs=2, batch_size=64, learning_rate=0.02, seed=0, threads=1)
# A backend of each loadable format dse builds itself: the source of a foreign artifact.
_FORMAT_SOURCES = {"onnx": "onnxruntime", "torch": "torch"}


def cpu_profile(backends: Sequence[str], max_threads: int = 2) -> HardwareProfile:
    """A cpu device that lists ``backends`` and every precision, with ``max_threads`` threads:
    only a backend's capability decides what it runs there."""
    return HardwareProfile(name="suite-cpu", kind="cpu", backends=list(backends),
                           precisions=["fp32", "fp16", "bf16", "int8"], max_threads=max_threads)


class BackendBench:
    """What the suite runs a backend on: the tiny cnn (:data:`ARCH`) trained on the digits
    (:data:`TRAINING`), the fp32 torch logits of the first :attr:`compared_images` test images
    (the reference every runner matches), the artifact of any backend and precision, and runners
    compiled once each. Everything is made on first use and cached under ``folder``;
    :meth:`close` closes the runners it keeps.

    Args:
        folder: where the trained weights and the artifacts are written.
    """

    #: The batch size runners are compiled for.
    batch_size = 4
    #: How many test images are compared with the reference.
    compared_images = 64

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._cache = ArtifactCache(self.folder / "artifacts")
        self._artifacts: dict[tuple[str, str], Artifact] = {}
        self._runners: dict[tuple[str, str, str, str], Runner] = {}

    @functools.cached_property
    def split(self) -> DigitsSplit:
        """The digits, split as every campaign of :data:`TRAINING`'s seed splits them."""
        return load_digits_split(TRAINING.seed)

    @functools.cached_property
    def trained(self) -> TrainedModel:
        return train_or_load("cnn", ARCH, TRAINING, self.folder / "trained")

    @functools.cached_property
    def images(self) -> np.ndarray:
        """The compared test images, contiguous float32."""
        return np.ascontiguousarray(self.split.x_test[:self.compared_images], dtype=np.float32)

    @functools.cached_property
    def reference(self) -> np.ndarray:
        """The fp32 torch logits of :attr:`images`."""
        import torch

        # Trained (on first use) before inference mode: training inside it has no gradients.
        module = self.trained.module
        with torch.inference_mode():
            logits: np.ndarray = module(torch.from_numpy(self.images)).numpy()
        return logits

    def artifact(self, backend: str, precision: str) -> Artifact:
        """The artifact ``backend`` loads at ``precision``, at :attr:`batch_size`."""
        if (backend, precision) not in self._artifacts:
            candidate = Candidate("cnn", ARCH, precision, self.batch_size, backend)
            self._artifacts[backend, precision], _ = build_artifact(
                candidate, self.trained, self._cache, self.split.x_train[:64])
        return self._artifacts[backend, precision]

    def foreign_artifacts(self, backend: str) -> dict[str, Artifact]:
        """fp32 artifacts of the formats dse builds itself (ONNX, the torch module) that
        ``backend`` does not load, by format."""
        own = declaration(backend).artifact_format
        return {form: self.artifact(source, "fp32")
                for form, source in _FORMAT_SOURCES.items() if form != own}

    def compile(self, backend: str, precision: str, profile: HardwareProfile,
                knobs: Mapping[str, Any] | None = None) -> Runner:
        """A new runner of ``backend`` at ``precision`` for ``profile``; the caller closes it.
        Compiling may set torch's process-wide thread pool (the torch backends): it is left as
        found."""
        import torch

        threads = torch.get_num_threads()
        try:
            return get_backend(backend).compile(self.artifact(backend, precision), dict(knobs or {}),
                                                profile, self.batch_size)
        finally:
            torch.set_num_threads(threads)

    def runner(self, backend: str, precision: str, profile: HardwareProfile,
               knobs: Mapping[str, Any] | None = None) -> Runner:
        """The runner :meth:`compile` makes, compiled once per backend, precision, profile and
        knobs and kept until :meth:`close`."""
        key = (backend, precision, profile.model_dump_json(),
               json.dumps(dict(knobs or {}), sort_keys=True, default=str))
        if key not in self._runners:
            self._runners[key] = self.compile(backend, precision, profile, knobs)
        return self._runners[key]

    def close(self) -> None:
        """Close every runner :meth:`runner` kept."""
        for runner in self._runners.values():
            runner.close()
        self._runners.clear()


class BackendSuite:
    """The tests every backend passes; subclass it in a test module and supply ``backend_name``.

    Fixtures a subclass supplies:
        backend_name: the registered name of the backend under test (required).
        precision: the precision the runner tests compile at ("fp32"; parametrise it to test
            several, as ``@pytest.fixture(params=["fp32", "int8"])``). A precision the backend's
            capability refuses on the device is skipped, with the capability's reason.

    Fixtures it may override:
        device_profile: the device compiled for (:func:`cpu_profile` of the backend).
        backend_bench: the :class:`BackendBench` (one per test class).
        runner: the runner under test (the bench's, with default knobs).
        one_thread_runner: a runner compiled with the thread knob at 1.
        disposable_runner: a runner the test closes (a new one).

    The backend-level tests (registration, capability entries, knob and artifact errors) use
    ``backend_name`` only; the runner tests run once per ``precision``.
    """

    # --- fixtures ----------------------------------------------------------------------------

    @pytest.fixture
    def backend_name(self) -> str:
        pytest.fail(f"{type(self).__name__} supplies the fixture backend_name: the registered "
                    "name of the backend under test")

    @pytest.fixture
    def precision(self) -> str:
        return "fp32"

    @pytest.fixture
    def backend(self, backend_name: str) -> Backend:
        return get_backend(backend_name)

    @pytest.fixture
    def device_profile(self, backend_name: str) -> HardwareProfile:
        return cpu_profile([backend_name])

    @pytest.fixture(scope="class")
    @classmethod
    def backend_bench(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackendBench]:
        bench = BackendBench(tmp_path_factory.mktemp("backend-suite"))
        yield bench
        bench.close()

    @pytest.fixture
    def supported(self, backend_name: str, precision: str,
                  device_profile: HardwareProfile) -> None:
        """Skips a runner test at a precision the backend does not run on the device."""
        ok, reason = supports(backend_name, precision, device_profile.kind)
        if not ok:
            pytest.skip(f"{backend_name} runs no {precision} on a {device_profile.kind} device: "
                        f"{reason}")

    @pytest.fixture
    def runner(self, supported: None, backend_name: str, precision: str,
               device_profile: HardwareProfile, backend_bench: BackendBench) -> Runner:
        return backend_bench.runner(backend_name, precision, device_profile)

    @pytest.fixture
    def one_thread_runner(self, supported: None, backend: Backend, precision: str,
                          device_profile: HardwareProfile,
                          backend_bench: BackendBench) -> Runner:
        return backend_bench.runner(backend.name, precision, device_profile,
                                    {backend.thread_knob: 1})

    @pytest.fixture
    def disposable_runner(self, supported: None, backend_name: str, precision: str,
                          device_profile: HardwareProfile,
                          backend_bench: BackendBench) -> Iterator[Runner]:
        runner = backend_bench.compile(backend_name, precision, device_profile)
        yield runner
        runner.close()

    # --- the backend -------------------------------------------------------------------------

    def test_registered_under_its_name(self, backend_name: str, backend: Backend) -> None:
        assert isinstance(backend, Backend)
        assert backend.name == backend_name == backend.declaration.name
        assert declaration(backend_name) is backend.declaration
        assert backend.thread_knob in backend.knobs

    def test_every_capability_entry_says_why(self, backend: Backend) -> None:
        for precision in PRECISIONS:
            for kind in DEVICE_KINDS:
                entry = backend.declaration.capability(precision, kind)
                where = f"{backend.name} at {precision} on {kind}"
                assert isinstance(entry.supported, bool), where
                assert entry.reason, f"{where}: no reason"
                assert entry.requires, f"{where}: requires nothing named"

    def test_unknown_knob_is_a_build_error(self, backend: Backend, backend_bench: BackendBench,
                                           device_profile: HardwareProfile) -> None:
        with pytest.raises(BuildError, match="turbo"):
            backend.check_knob_values({"turbo": True})
        with pytest.raises(BuildError, match="turbo"):
            backend.compile(backend_bench.artifact(backend.name, "fp32"), {"turbo": True},
                            device_profile, 2)

    @pytest.mark.parametrize("value", [0, -1, 1.5, "2", True])
    def test_bad_thread_count_is_a_build_error(self, backend: Backend, value: object,
                                               backend_bench: BackendBench,
                                               device_profile: HardwareProfile) -> None:
        # Refused at validate time (no runtime, no device) and by compile, naming knob and value.
        knobs = {backend.thread_knob: value}
        for refuse in (lambda: backend.check_knob_values(knobs),
                       lambda: backend.compile(backend_bench.artifact(backend.name, "fp32"),
                                               knobs, device_profile, 2)):
            with pytest.raises(BuildError) as refused:
                refuse()
            assert backend.thread_knob in str(refused.value) and repr(value) in str(refused.value)

    def test_foreign_artifact_is_a_build_error(self, backend: Backend, backend_bench: BackendBench,
                                               device_profile: HardwareProfile) -> None:
        for form, artifact in backend_bench.foreign_artifacts(backend.name).items():
            with pytest.raises(BuildError, match=form):
                backend.compile(artifact, {}, device_profile, 2)

    # --- its runners -------------------------------------------------------------------------

    def test_runs_batches_to_reference_logits(self, runner: Runner, precision: str,
                                              backend_bench: BackendBench) -> None:
        assert runner.batch_size == backend_bench.batch_size
        check_runner(runner, precision, backend_bench.images, backend_bench.reference)

    def test_accepts_float64_non_contiguous_and_read_only_input(
            self, runner: Runner, backend_bench: BackendBench) -> None:
        x = backend_bench.images[:2 * runner.batch_size]
        want = runner.run(np.ascontiguousarray(x[::2], dtype=np.float32))
        np.testing.assert_array_equal(runner.run(x[::2]), want)
        np.testing.assert_array_equal(runner.run(np.ascontiguousarray(x[::2], np.float64)), want)
        readonly = np.array(x[::2])
        readonly.flags.writeable = False
        np.testing.assert_array_equal(runner.run(readonly), want)

    def test_concurrent_runs_give_the_sequential_results(self, runner: Runner,
                                                         backend_bench: BackendBench) -> None:
        # The offline scenario keeps several calls in flight from several threads: each must
        # still get its own batch's logits (a runner may run them at once or take them in turn).
        batches = _batches(runner, backend_bench, 8)
        alone = [runner.run(batch) for batch in batches]
        with ThreadPoolExecutor(max_workers=4) as pool:
            together = list(pool.map(runner.run, batches))
        for expected, result in zip(alone, together, strict=True):
            np.testing.assert_array_equal(result, expected)

    def test_bound_calls_keep_their_batch_across_calls_and_runs(
            self, runner: Runner, backend_bench: BackendBench) -> None:
        # Two bindings and run() between them, many times over: each binding gives its own
        # batch's logits every time, however the runtime shares its input tensor among them.
        batches = _batches(runner, backend_bench, 2)
        want = [runner.run(batch) for batch in batches]
        results = bound_results(runner, batches, calls=50)
        assert len(results) == 100
        for index, result in enumerate(results):
            np.testing.assert_array_equal(result, want[index % 2])

    def test_a_bound_call_holds_its_own_copy_of_the_batch(self, runner: Runner,
                                                          backend_bench: BackendBench) -> None:
        # The binding copies the batch once: a caller reusing its array for the next request
        # does not change what the bound call computes.
        first, second = _batches(runner, backend_bench, 2)
        batch = np.array(first)
        want = runner.run(batch)
        call = runner.bound_call(batch)
        np.testing.assert_array_equal(np.array(call()), want)
        batch[:] = second
        np.testing.assert_array_equal(np.array(call()), want)

    def test_a_bound_call_takes_one_batch_of_the_batch_size(self, runner: Runner,
                                                            backend_bench: BackendBench) -> None:
        size = runner.batch_size
        with pytest.raises(ValueError, match=rf"\b{size}\b"):
            runner.bound_call(backend_bench.images[:size - 1])

    def test_concurrent_bound_calls_give_the_sequential_results(
            self, runner: Runner, backend_bench: BackendBench) -> None:
        # The offline scenario calls the timed call from several threads at once: every call
        # must still return its binding's logits (a barrier starts the threads together).
        batches = _batches(runner, backend_bench, 2)
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

    def test_describe_gives_provenance(self, runner: Runner, backend_name: str,
                                       precision: str) -> None:
        info = runner.describe()
        assert set(PROVENANCE_KEYS) <= set(info)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in info.items())
        assert info["backend"] == backend_name
        assert info["precision"] == precision
        assert all(info[key] for key in PROVENANCE_KEYS), info

    def test_thread_knob_is_honoured(self, one_thread_runner: Runner) -> None:
        assert one_thread_runner.describe()["threads"] == "1"

    def test_close_is_idempotent_and_final(self, disposable_runner: Runner,
                                           backend_bench: BackendBench) -> None:
        batch = _batches(disposable_runner, backend_bench, 1)[0]
        bound = disposable_runner.bound_call(batch)
        bound()
        disposable_runner.close()
        disposable_runner.close()
        with pytest.raises(RuntimeError, match="closed"):
            disposable_runner.run(batch)
        with pytest.raises(RuntimeError, match="closed"):
            bound()


def _batches(runner: Runner, bench: BackendBench, count: int) -> list[np.ndarray]:
    """``count`` consecutive batches of the runner's batch size from the bench's images."""
    size = runner.batch_size
    return [bench.images[i * size:(i + 1) * size] for i in range(count)]
