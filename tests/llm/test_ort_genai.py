"""ONNX Runtime GenAI as a generation runtime, on a small random-weight Llama: its model builder's
folder made once and kept, the same greedy tokens as the fp32 torch reference where the reference
is not within rounding of a tie, logits and the KV cache read back, int4 weights smaller, and the
combinations it does not run refused with the reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dse.accuracy import heldout_ids, language_quality, prompt_ids
from dse.backends import get_backend, supports_device
from dse.core import BuildError
from dse.models import LanguageModel, load_language_model
from dse.spec.loading import load_profile

pytest.importorskip("onnxruntime_genai", reason="needs onnxruntime-genai (pip install 'dse[llm]')")
pytest.importorskip("transformers", reason="needs transformers (pip install 'dse[llm]')")

PROFILE = load_profile(Path(__file__).resolve().parents[2] / "hw_profiles" / "local-cpu.yaml")
# The vocabulary differs from the MLP's width: with a vocabulary of 128 beside an intermediate size of
# 128, ONNX Runtime GenAI 0.18's builder made a graph whose logits were not the model's (docs/llm.md).
CONFIG = {"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
          "max_position_embeddings": 128, "initializer_range": 0.2}


@pytest.fixture(scope="module")
def model() -> LanguageModel:
    # A wide initialisation: logits far apart, so greedy choices are no coin flips of rounding.
    return load_language_model({"kind": "config", "config": "llama", "base": CONFIG,
                                "seed": 3}, {})


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("genai-cache")


def test_fp32_is_the_torch_reference(model: LanguageModel, cache: Path) -> None:
    backend = get_backend("onnxruntime_genai")
    prompts = prompt_ids(None, model.vocab_size, "builtin", 2, 10)
    ids = heldout_ids(None, model.vocab_size, 40)
    with backend.compile_generator(model, "fp32", {"num_threads": 1}, PROFILE, 2,
                                   cache_dir=cache) as runner, \
            get_backend("torch").compile_generator(model, "fp32", {}, PROFILE, 2) as reference:
        ours, theirs = runner.logits(ids), reference.logits(ids)
        assert ours.shape == theirs.shape == (1, 40, 256)
        np.testing.assert_allclose(ours, theirs, atol=2e-3, rtol=1e-3)
        tokens, expected = runner.generate(prompts, 6), reference.generate(prompts, 6)
        assert tokens.shape == (2, 6)
        assert np.array_equal(tokens, expected)
        # The runtime's cache buffer spans the request's whole length: 2 x layers x batch x KV
        # heads x (10 + 6) positions x head dim x 4 bytes.
        assert runner.kv_cache_bytes() == 2 * 2 * 2 * 2 * 16 * 16 * 4
        described = runner.describe()
        assert described["backend"] == "onnxruntime_genai" and described["threads"] == "1"
    folders = list((cache / "onnxruntime_genai").iterdir())
    assert len(folders) == 1  # built once ...
    stamp = (folders[0] / "model.onnx").stat().st_mtime_ns
    with backend.compile_generator(model, "fp32", {}, PROFILE, 1, cache_dir=cache):
        pass
    assert (folders[0] / "model.onnx").stat().st_mtime_ns == stamp  # ... and kept


def test_int4_weights_are_smaller_and_close(model: LanguageModel, cache: Path) -> None:
    backend = get_backend("onnxruntime_genai")
    ids = heldout_ids(None, model.vocab_size, 40)
    with backend.compile_generator(model, "fp32", {"weights": "int4", "weight_group_size": 32},
                                   PROFILE, 1, cache_dir=cache) as int4, \
            backend.compile_generator(model, "fp32", {}, PROFILE, 1, cache_dir=cache) as fp32:
        assert int4.weights_bytes is not None and fp32.weights_bytes is not None
        assert int4.weights_bytes < 0.6 * fp32.weights_bytes
        assert int4.describe()["weight_group_size"] == "32"
        ours, theirs = int4.logits(ids), fp32.logits(ids)
        quality = language_quality(ours, theirs, ids)
    # 4-bit weights move a random model's close calls, yet keep its logits: far above chance
    # (1 in 256) in agreement, and closely correlated.
    assert quality["token_agreement"] >= 0.25
    assert np.corrcoef(ours.ravel(), theirs.ravel())[0, 1] > 0.9


def test_what_it_does_not_run_is_refused_with_why(model: LanguageModel) -> None:
    ok, why = supports_device("onnxruntime_genai", "bf16", "cpu", None, generative=True)
    assert not ok and "compute in fp32" in why
    ok, why = supports_device("onnxruntime_genai", "fp32", "cuda", None, generative=True)
    assert not ok and "CPU only so far" in why
    ok, why = supports_device("onnxruntime_genai", "fp32", "cpu", None)
    assert not ok and "generative language models only" in why
    with pytest.raises(BuildError, match="'weights' must be one of"):
        get_backend("onnxruntime_genai").compile_generator(model, "fp32", {"weights": "fp8"},
                                                           PROFILE, 1)
