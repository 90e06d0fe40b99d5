"""The interface a runtime implements to run a generative language model: a
:class:`GenerationRunner`, made by :meth:`dse.backends.Backend.compile_generator`.

A request is one call of a bound stream: the runtime prefills the batch's prompts and decodes
greedily, yielding once per step as soon as the step's tokens exist on the host (one token per
sequence, something ``numpy.asarray`` takes), exactly ``output_tokens`` steps, never stopping at an
end-of-sequence token. :mod:`dse.measure.generation` holds the clock; the runner only streams.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

import numpy as np


class GenerationRunner(ABC):
    """A generative model deployed on its device.

    Life cycle: made by :meth:`dse.backends.Backend.compile_generator`; then :meth:`bound_stream`
    (the prompts bound once, then one request per call of what it returns), :meth:`logits` (the
    quality pass) and :meth:`describe`, in any order; :meth:`close` last, once. One thread.

    Attributes:
        batch_size: sequences per request.
        compile_seconds: time the runtime spent compiling on the device, or None.
        weights_bytes: bytes of the weights as deployed (at the deployed precision), or None
            when the runtime does not say.
        borrowed_bytes: bytes of host memory the runner runs from that were resident before it
            was built (the loaded fp32 module used as is).
    """

    batch_size: int
    compile_seconds: float | None = None
    weights_bytes: int | None = None
    borrowed_bytes: int = 0

    @abstractmethod
    def bound_stream(self, prompt_ids: np.ndarray,
                     output_tokens: int) -> Callable[[], Iterator[Any]]:
        """A call that runs one request over ``prompt_ids`` ((batch, prompt tokens), int64):
        prefill, then greedy decode, yielding each step's tokens, ``output_tokens`` steps."""

    @abstractmethod
    def logits(self, ids: np.ndarray) -> np.ndarray:
        """The next-token logits at every position of ``ids`` ((rows, tokens), int64) in one
        forward pass without a cache: (rows, tokens, vocabulary), float32."""

    @abstractmethod
    def describe(self) -> dict[str, str]:
        """Provenance: backend, version, device, precision, threads and the runtime's settings."""

    def kv_cache_bytes(self) -> int | None:
        """Bytes of the KV cache at the end of the last request (the workload's longest
        context), read from the runtime's own cache; None when it does not expose it."""
        return None

    def generate(self, prompt_ids: np.ndarray, output_tokens: int) -> np.ndarray:
        """The greedy tokens of one request: (batch, output_tokens), int64."""
        steps = [np.asarray(step).reshape(len(prompt_ids))
                 for step in self.bound_stream(prompt_ids, output_tokens)()]
        return np.stack(steps, axis=1).astype(np.int64)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free the runtime's session; the runner is not used again."""

    def __enter__(self) -> GenerationRunner:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
