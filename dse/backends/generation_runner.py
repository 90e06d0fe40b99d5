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
from pathlib import Path
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
        described: what :meth:`describe` returns (a runtime fills it when it compiles).
        cache_bytes: the KV cache's bytes a request of the latest binding ended with, where the
            runtime exposes its cache (:meth:`kv_cache_bytes`); None until then.
        closed: set by :meth:`close`; :meth:`check_open` raises RuntimeError after it.
    """

    batch_size: int
    compile_seconds: float | None = None
    weights_bytes: int | None = None
    borrowed_bytes: int = 0
    described: dict[str, str]
    cache_bytes: int | None = None
    closed: bool = False

    @abstractmethod
    def bound_stream(self, prompt_ids: np.ndarray,
                     output_tokens: int) -> Callable[[], Iterator[Any]]:
        """A call that runs one request over ``prompt_ids`` ((batch, prompt tokens), int64):
        prefill, then greedy decode, yielding each step's tokens, ``output_tokens`` steps."""

    @abstractmethod
    def logits(self, ids: np.ndarray) -> np.ndarray:
        """The next-token logits at every position of ``ids`` ((rows, tokens), int64) in one
        forward pass without a cache: (rows, tokens, vocabulary), float32."""

    def describe(self) -> dict[str, str]:
        """Provenance: backend, version, device, precision, threads and the runtime's settings."""
        return dict(self.described)

    def kv_cache_bytes(self) -> int | None:
        """Bytes of the KV cache at the end of a request (the workload's longest context), read
        from the runtime's own cache after the first request of the latest binding (the warm-up
        one: reading may copy the cache, which no timed request should pay for); None when the
        runtime does not expose it."""
        return self.cache_bytes

    def check_open(self) -> None:
        """RuntimeError once the runner is closed."""
        if self.closed:
            raise RuntimeError("the generation runner is closed")

    def generate(self, prompt_ids: np.ndarray, output_tokens: int) -> np.ndarray:
        """The greedy tokens of one request: (batch, output_tokens), int64."""
        steps = [np.asarray(step).reshape(len(prompt_ids))
                 for step in self.bound_stream(prompt_ids, output_tokens)()]
        return np.stack(steps, axis=1).astype(np.int64)

    def close(self) -> None:
        """Mark the runner closed; a runtime extends it to free its session (the runner is not
        used again)."""
        self.closed = True

    def __enter__(self) -> GenerationRunner:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def copy_model_folder(folder: Path, out: Path) -> None:
    """Copy the files of the folder a runtime runs a language model from (an IR, a model
    builder's output) into ``out``, keeping their relative paths: an exported bundle's model."""
    import shutil

    for path in sorted(folder.rglob("*")):
        if path.is_file():
            target = out / path.relative_to(folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
