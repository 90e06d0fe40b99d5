"""OpenVINO running a language model's stateful IR (:mod:`.llm_ir`) as a
:class:`dse.backends.GenerationRunner`: a request resets the infer request's state, prefills the
batch's prompts in one inference, then runs one inference per step on the step's tokens; the next
token is the argmax of the last position's logits, read on the host.

The loop is dse's own over OpenVINO's infer request rather than OpenVINO GenAI's pipelines: their
streamers take one sequence at a time, and the batch is a searched dimension. The IR and the
properties are the ones GenAI's stateful path compiles (inference precision, KV-cache precision).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dse.backends.generation_runner import GenerationRunner

# Bytes per element of each KV-cache precision OpenVINO's CPU plugin reports.
_ELEMENT_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "u8": 1, "i8": 1}


def _type_name(value: Any) -> str:
    """An element type read back from a compiled model (``openvino.Type``) as OpenVINO writes it
    in properties: f32, bf16, u8."""
    name = getattr(value, "get_type_name", None)
    return str(name()) if callable(name) else str(value)


class OpenVinoGenerationRunner(GenerationRunner):
    """The IR in ``folder`` compiled for the CPU with ``config`` (OpenVINO properties)."""

    def __init__(self, core: Any, folder: Path, config: dict[str, Any], batch_size: int,
                 described: dict[str, str]) -> None:
        import time

        model = core.read_model(str(folder / "openvino_model.xml"))
        # What an exported bundle copies and compiles again (dse export).
        self.folder, self.properties = folder, dict(config)
        start = time.perf_counter()
        self.compiled: Any = core.compile_model(model, "CPU", config)
        self.compile_seconds = time.perf_counter() - start
        self.batch_size = batch_size
        self.kv_precision = _type_name(self.compiled.get_property("KV_CACHE_PRECISION"))
        self.described = {
            **described,
            "inference_precision": _type_name(
                self.compiled.get_property("INFERENCE_PRECISION_HINT")),
            "kv_cache_precision": self.kv_precision}
        self.weights_bytes = sum(path.stat().st_size for path in folder.glob("*.bin"))

    def _infer(self, request: Any, ids: np.ndarray, mask: np.ndarray, positions: np.ndarray,
               keep: np.ndarray) -> np.ndarray:
        """One inference; the logits of the positions ``keep`` holds, (rows, len(keep), vocab)."""
        request.infer({"input_ids": ids, "attention_mask": mask, "position_ids": positions,
                       "logits_to_keep": keep})
        logits: np.ndarray = request.get_tensor("logits").data
        return logits

    def bound_stream(self, prompt_ids: np.ndarray,
                     output_tokens: int) -> Callable[[], Iterator[Any]]:
        self.check_open()
        ids = np.ascontiguousarray(prompt_ids, dtype=np.int64)
        rows, length = ids.shape
        request = self.compiled.create_infer_request()
        # Built once per binding: a request only slices them.
        mask = np.ones((rows, length + output_tokens), dtype=np.int64)
        prompt_positions = np.ascontiguousarray(np.broadcast_to(np.arange(length), (rows, length)))
        step_positions = [np.full((rows, 1), length + step, dtype=np.int64)
                          for step in range(output_tokens)]
        # A step needs its last position's logits only: the prefill computes the head there,
        # not over the whole prompt (as torch's logits_to_keep=1 and GenAI's graphs do).
        last_prompt, last_step = (np.array([length - 1], dtype=np.int64),
                                  np.zeros(1, dtype=np.int64))
        read: list[int] = []

        def stream() -> Iterator[Any]:
            self.check_open()
            request.reset_state()
            logits = self._infer(request, ids, mask[:, :length], prompt_positions, last_prompt)
            token = logits[:, -1].argmax(axis=-1)
            yield token
            for step in range(output_tokens - 1):
                logits = self._infer(request, token[:, None].astype(np.int64),
                                     mask[:, :length + step + 1], step_positions[step],
                                     last_step)
                token = logits[:, -1].argmax(axis=-1)
                yield token
            if not read:
                # The states' shapes at the request's end, read after the binding's first request
                # only (the warm-up one: query_state copies every state out, dequantized).
                read.append(self._cache_bytes(request))
                self.cache_bytes = read[0]

        return stream

    def _cache_bytes(self, request: Any) -> int:
        """Every state's elements at the KV-cache precision the plugin applied (query_state
        returns the states dequantized, so their own byte sizes would not show a u8 cache; u8's
        per-token scales are not counted)."""
        elements = sum(int(np.prod(tuple(state.state.shape))) for state in request.query_state())
        return elements * _ELEMENT_BYTES.get(self.kv_precision, 4)

    def logits(self, ids: np.ndarray) -> np.ndarray:
        self.check_open()
        data = np.ascontiguousarray(ids, dtype=np.int64)
        rows, length = data.shape
        request = self.compiled.create_infer_request()
        request.reset_state()
        logits = self._infer(request, data, np.ones((rows, length), dtype=np.int64),
                             np.ascontiguousarray(np.broadcast_to(np.arange(length),
                                                                  (rows, length))),
                             np.arange(length, dtype=np.int64))
        return np.array(logits, dtype=np.float32)

    def close(self) -> None:
        super().close()
        self.compiled = None
