"""ONNX Runtime GenAI's generator loop as a :class:`dse.backends.GenerationRunner`: a request is a
new ``Generator`` (greedy, exactly the asked tokens: ``min_length`` = ``max_length``), its prompts
appended (the prefill), then one ``generate_next_token`` per step, each step's tokens read back to
the host."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dse.backends.generation_runner import GenerationRunner


class GenAIRunner(GenerationRunner):
    """A model folder of ONNX Runtime GenAI's builder, loaded with ``threads`` intra-op threads."""

    def __init__(self, folder: Path, batch_size: int, threads: int,
                 described: dict[str, str]) -> None:
        import onnxruntime_genai as og

        self.og = og
        self.folder = folder  # what an exported bundle copies (dse export)
        config = og.Config(str(folder))
        # The session's threads, over the builder's genai_config.json (left unchanged on disk).
        config.overlay(json.dumps({"model": {"decoder": {"session_options": {
            "intra_op_num_threads": threads, "inter_op_num_threads": 1}}}}))
        self.model: Any = og.Model(config)
        self.batch_size = batch_size
        self.described = described
        self.layers = int(json.loads((folder / "genai_config.json").read_text())
                          ["model"]["decoder"]["num_hidden_layers"])
        self.weights_bytes = sum(f.stat().st_size for f in folder.glob("model.onnx*"))

    def _generator(self, rows: int, max_length: int) -> Any:
        self.check_open()
        params = self.og.GeneratorParams(self.model)
        params.set_search_options(max_length=max_length, min_length=max_length,
                                  do_sample=False, batch_size=rows)
        return self.og.Generator(self.model, params)

    def bound_stream(self, prompt_ids: np.ndarray,
                     output_tokens: int) -> Callable[[], Iterator[Any]]:
        ids = np.ascontiguousarray(prompt_ids, dtype=np.int32)
        rows, length = ids.shape
        read: list[int] = []

        def stream() -> Iterator[Any]:
            generator = self._generator(rows, length + output_tokens)
            generator.append_tokens(ids)
            for _ in range(output_tokens):
                generator.generate_next_token()
                yield generator.get_next_tokens()
            if not read:
                # The cache as the runtime holds it (a buffer of the request's whole length),
                # read after the binding's first request only (the warm-up one): reading it
                # copies every layer's buffer, which no timed request should pay for.
                read.append(sum(
                    int(np.asarray(generator.get_output(f"present.{layer}.{part}")).nbytes)
                    for layer in range(self.layers) for part in ("key", "value")))
                self.cache_bytes = read[0]

        return stream

    def logits(self, ids: np.ndarray) -> np.ndarray:
        data = np.ascontiguousarray(ids, dtype=np.int32)
        generator = self._generator(data.shape[0], data.shape[1] + 1)
        generator.append_tokens(data)
        logits: np.ndarray = np.asarray(generator.get_output("logits"), dtype=np.float32)
        return logits

    def close(self) -> None:
        super().close()
        self.model = None
