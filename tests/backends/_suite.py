"""What every compiled runner must do, shared by the conformance suite and the capability walk."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.backends import Runner


@dataclass(frozen=True)
class Tolerance:
    """How close a precision's logits must come to the fp32 torch reference.

    ``atol`` bounds the largest absolute logit difference (None: not compared, as for int8, whose
    logits are rescaled by quantization); ``min_top1`` is the least share of images on which the
    predicted class agrees.
    """

    atol: float | None
    min_top1: float


# The one place tolerances live. The tiny test cnn's logits reach ~8: bf16 keeps 8 significant bits
# (~0.4%), fp16 11 bits; measured worst cases are ~0.06 (bf16) and ~0.011 (fp16).
TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(atol=1e-4, min_top1=1.0),
    "fp16": Tolerance(atol=5e-2, min_top1=0.95),
    "bf16": Tolerance(atol=2.5e-1, min_top1=0.95),
    "int8": Tolerance(atol=None, min_top1=0.9),
    # e4m3 keeps 3 mantissa bits: on the tiny, weakly trained test cnn (top-2 margins down to
    # 0.004) the fp8 Q/DQ graph agrees with fp32 on 0.89 of 64 images (reference evaluator).
    "fp8": Tolerance(atol=None, min_top1=0.85),
}


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
    top1 = float((everything.argmax(1) == reference.argmax(1)).mean())
    assert top1 >= tolerance.min_top1, f"{precision}: top-1 agreement {top1:.3f}"
