"""What every compiled runner must do, shared by the conformance suite and the capability walk."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.backends import Runner


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
    cnn (top-2 margins down to 0.004, a tenth of them below 0.15) passed by one image on one
    machine and could fail on another.
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
# (~0.4%), fp16 11 bits; measured worst cases are ~0.06 (bf16) and ~0.011 (fp16).
TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(atol=1e-4),
    "fp16": Tolerance(atol=5e-2),
    "bf16": Tolerance(atol=2.5e-1),
    # ONNX Runtime's int8 logits move by up to 0.65 here (every flip seen was at a margin below
    # 0.02): a class leading by 1.5 flips only if two logits err by 0.75 in opposite directions.
    "int8": Tolerance(atol=None, flip_margin=1.5),
    # e4m3 keeps 3 mantissa bits: logits move by up to ~1.1 (0.90 here, 1.10 seen under other
    # instruction sets), so twice the 1.5 bound that tests/build/test_onnx_precision.py holds.
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
    """The conformance check: shapes and dtype at the candidate batch and at batch 1, and logits
    within ``TOLERANCES[precision]`` of ``reference`` (the fp32 torch logits of ``images``)."""
    batch = runner.batch_size
    tolerance = TOLERANCES[precision]
    logits = runner.run(images[:batch])
    assert isinstance(logits, np.ndarray)
    assert logits.shape == (batch, 10)
    assert logits.dtype == np.float32
    assert np.isfinite(logits).all()
    one = runner.run(images[:1])
    assert one.shape == (1, 10)
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
