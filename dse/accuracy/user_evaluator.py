"""The user's accuracy evaluator (``model.evaluator: module:function``), handed the deployed model.

This is how a user plugs in their own validation set: the function receives a
:class:`DeployedModel` — the very runner that is timed, so an int8 or fp16 candidate is scored on
what the device computes — and returns ``{metric: value}`` (``accuracy`` or any metric the search
space declares under ``metrics:``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dse.accuracy.agreement import predict_batches


@dataclass(frozen=True)
class DeployedModel:
    """A candidate as deployed on its device.

    ``run(batch)`` is the runner's own call: up to ``batch_size`` samples of ``input_shape``
    (float32, batch axis first) in, the model's first output out, as a host array.
    ``predict(x)`` feeds any number of samples through it, ``batch_size`` at a time.
    ``candidate`` is the candidate as plain data (family, arch, backend, precision, ...).

    Attributes:
        run: The runner's own call: a batch in, the model's first output out.
        batch_size: The most samples ``run`` takes at once.
        input_shape: One sample's shape, without the batch axis.
        candidate: The candidate as plain data.

    Examples:
        >>> import numpy as np
        >>> from dse import DeployedModel
        >>> deployed = DeployedModel(run=lambda batch: batch.sum(axis=1, keepdims=True),
        ...                          batch_size=4, input_shape=(3,))
        >>> out = deployed.predict(np.ones((10, 3)))  # three calls: 4, 4 and 2 samples
        >>> out.shape, out.dtype.name, float(out[0, 0])
        ((10, 1), 'float64', 3.0)
    """

    run: Callable[[np.ndarray], np.ndarray]
    batch_size: int
    input_shape: tuple[int, ...]
    candidate: dict[str, Any] = field(default_factory=dict)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The model's outputs for ``x``, fed through ``run`` ``batch_size`` samples at a time.

        Args:
            x: Any number of samples, batch axis first (converted to float32).

        Returns:
            The outputs of every batch, concatenated, as float64.

        Raises:
            ValueError: When ``x`` holds no sample, ``batch_size`` < 1, or ``run`` returns
                another number of rows than it was given.
        """
        return predict_batches(self.run, np.asarray(x, dtype=np.float32), self.batch_size)


def run_user_evaluator(function: Callable[[DeployedModel], object], reference: str,
                       deployed: DeployedModel) -> dict[str, float]:
    """``function(deployed)`` as metrics; ValueError naming ``reference`` when it raised or
    returned something other than a mapping of metric names to finite numbers."""
    try:
        result = function(deployed)
    except Exception as exc:  # the user's code: its failure is the candidate's, in one line
        raise ValueError(f"evaluator {reference} failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(result, Mapping):
        raise ValueError(f"evaluator {reference} returned {type(result).__name__}; it must "
                         f"return a dict of metric name -> number")
    metrics: dict[str, float] = {}
    for name, value in result.items():
        if not isinstance(name, str) or isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"evaluator {reference} returned {name!r}: {value!r}; metrics are "
                             f"name -> number")
        if not math.isfinite(value):
            raise ValueError(f"evaluator {reference} returned {name} = {value}; a metric must be "
                             f"finite")
        metrics[name] = float(value)
    return metrics
