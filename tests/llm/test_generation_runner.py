"""Eager torch as a generation runtime, on small random-weight models transformers builds from a
config (Llama, Qwen2): the same greedy tokens as transformers' own generate(), logits, the KV
cache read back, refused combinations named; and the quality measures on known values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dse.accuracy import heldout_ids, language_quality, prompt_ids
from dse.accuracy.language import prompt_lines
from dse.backends import get_backend, supports_device
from dse.core import BuildError
from dse.models import load_language_model
from dse.spec.loading import load_profile

pytest.importorskip("transformers", reason="needs transformers (pip install 'dse[llm]')")

PROFILE = load_profile(Path(__file__).resolve().parents[2] / "hw_profiles" / "local-cpu.yaml")
CONFIGS = {
    "llama": {"vocab_size": 96, "hidden_size": 32, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48},
    "qwen2": {"vocab_size": 96, "hidden_size": 32, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 1, "intermediate_size": 48},
}


def _model(model_type: str, seed: int = 0):  # type: ignore[no-untyped-def]
    return load_language_model({"kind": "config", "config": model_type,
                                "base": CONFIGS[model_type], "seed": seed}, {})


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_greedy_tokens_are_generates(model_type: str) -> None:
    import torch

    model = _model(model_type)
    prompts = prompt_ids(None, model.vocab_size, "builtin", 3, 7)
    with get_backend("torch").compile_generator(model, "fp32", {"num_threads": 1}, PROFILE,
                                                3) as runner:
        tokens = runner.generate(prompts, 6)
        with torch.inference_mode():
            expected = model.module.generate(torch.as_tensor(prompts), max_new_tokens=6,
                                             min_new_tokens=6, do_sample=False)
        assert tokens.shape == (3, 6)
        assert np.array_equal(tokens, expected[:, 7:].numpy())
        # The cache at the end holds prompt + output - 1 positions of every layer's keys and
        # values: 2 x layers x batch x kv heads x positions x head dim x 4 bytes.
        config = CONFIGS[model_type]
        head_dim = config["hidden_size"] // config["num_attention_heads"]
        assert runner.kv_cache_bytes() == (2 * config["num_hidden_layers"] * 3
                                           * config["num_key_value_heads"] * (7 + 6 - 1)
                                           * head_dim * 4)
        logits = runner.logits(prompts)
        assert logits.shape == (3, 7, 96) and logits.dtype == np.float32
        assert runner.weights_bytes == 4 * model.parameters
    assert model.module is not None  # closing the runner leaves the shared model alone


def test_bf16_runs_on_a_copy_and_agrees_mostly() -> None:
    model = _model("llama")
    ids = heldout_ids(None, model.vocab_size, 64)
    with get_backend("torch").compile_generator(model, "fp32", {}, PROFILE, 1) as fp32, \
            get_backend("torch").compile_generator(model, "bf16", {}, PROFILE, 1) as bf16:
        quality = language_quality(bf16.logits(ids), fp32.logits(ids), ids)
        assert bf16.weights_bytes == 2 * model.parameters
        assert bf16.describe()["dtype"] == "bfloat16"
    assert next(model.module.parameters()).dtype.is_floating_point
    assert str(next(model.module.parameters()).dtype) == "torch.float32"
    assert 0.8 <= quality["token_agreement"] <= 1.0
    assert 0.98 < quality["perplexity_ratio"] < 1.02 and quality["token_kl"] < 0.01


def test_refusals_name_the_reason() -> None:
    ok, why = supports_device("torch", "int8", "cpu", None, generative=True)
    assert not ok and "set the knob weights: int8 or int4" in why
    ok, why = supports_device("onnxruntime", "fp32", "cpu", None, generative=True)
    assert not ok and "runs no generative language model" in why
    with pytest.raises(BuildError, match="not for a generative model"):
        get_backend("torch").compile_generator(_model("llama"), "fp32", {"cuda_graph": True},
                                               PROFILE, 1)
    with pytest.raises(BuildError, match="runs no generative language model"):
        get_backend("onnxruntime").compile_generator(_model("llama"), "fp32", {}, PROFILE, 1)


def test_a_config_transformers_refuses_is_one_line() -> None:
    with pytest.raises(ValueError, match="notamodel") as caught:
        load_language_model({"kind": "config", "config": "notamodel", "base": {}}, {})
    assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="not a multiple of num_key_value_heads"):
        load_language_model({"kind": "config", "config": "llama", "base": CONFIGS["llama"]},
                            {"num_key_value_heads": 3})


def test_loaded_models_are_kept_and_seeded() -> None:
    first, again = _model("llama"), _model("llama")
    assert again.module is first.module and again.load_seconds == 0.0
    other = _model("llama", seed=1)
    assert other.key != first.key
    assert not np.allclose(next(other.module.parameters()).detach().numpy(),
                           next(first.module.parameters()).detach().numpy())


def test_quality_on_known_logits() -> None:
    ids = np.array([[0, 1, 2, 1]])
    reference = np.log(np.array([[[0.1, 0.8, 0.1], [0.1, 0.1, 0.8], [0.1, 0.8, 0.1],
                                  [1 / 3, 1 / 3, 1 / 3]]]))
    same = language_quality(reference, reference, ids)
    assert same["perplexity"] == pytest.approx(1 / 0.8)
    assert same["perplexity_ratio"] == pytest.approx(1.0)
    assert same["token_agreement"] == 1.0 and same["token_kl"] == pytest.approx(0.0, abs=1e-12)
    flat = np.zeros_like(reference)  # uniform: every next token has probability 1/3
    worse = language_quality(flat, reference, ids)
    assert worse["perplexity"] == pytest.approx(3.0)
    assert worse["perplexity_ratio"] == pytest.approx(3.0 * 0.8)
    assert worse["quality_retained"] == pytest.approx(1 / (3.0 * 0.8))
    expected_kl = float(np.sum(0.8 * np.log(0.8 * 3) + 2 * 0.1 * np.log(0.1 * 3)))
    assert worse["token_kl"] == pytest.approx(expected_kl)
    with pytest.raises(ValueError, match="not finite"):
        language_quality(flat + np.nan, reference, ids)


class _Words:
    """A tokenizer of whitespace-separated words, each its own id (what prompt_ids asks)."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [len(word) for word in text.split(" ")]}


def test_prompts_fill_every_sequence_exactly() -> None:
    lines = prompt_lines("builtin")
    assert len(lines) == 24 and lines[0] == "The capital of France is"
    ids = prompt_ids(_Words(), 1000, "builtin", 30, 50)
    assert ids.shape == (30, 50)
    assert ids[0, :5].tolist() == [3, 7, 2, 6, 2]  # "The capital of France is"
    assert not np.array_equal(ids[0], ids[1])  # each sequence starts at its own prompt
    assert np.array_equal(ids[0], prompt_ids(_Words(), 1000, "builtin", 30, 50)[0])
    stand_in = prompt_ids(None, 50, "builtin", 2, 9, seed=4)
    assert stand_in.shape == (2, 9) and stand_in.max() < 50


@pytest.mark.parametrize(("precision", "knobs", "element"), [
    ("fp32", {"weights": "int8"}, 4), ("bf16", {"weights": "int4", "weight_group_size": 16}, 2)])
def test_weight_only_formats_shrink_the_weights_and_keep_the_tokens(
        precision: str, knobs: dict[str, object], element: int) -> None:
    pytest.importorskip("torchao", reason="weight-only formats need torchao (dse[llm])")
    model = _model("llama")
    ids = heldout_ids(None, model.vocab_size, 48)
    torch_backend = get_backend("torch")
    with torch_backend.compile_generator(model, "fp32", {}, PROFILE, 2) as reference, \
            torch_backend.compile_generator(model, precision, {}, PROFILE, 2) as same, \
            torch_backend.compile_generator(model, precision, knobs, PROFILE, 2) as runner:
        described = runner.describe()
        assert described["weights"] == knobs["weights"]
        assert "torchao" in described["weights_quantizer"]
        # The linear layers' weights are stored one byte per value (int4 unpacked), plus
        # scales; the embedding stays at the compute precision.
        linear = sum(p.numel() for name, p in model.module.named_parameters()
                     if "proj" in name)
        assert runner.weights_bytes is not None and reference.weights_bytes is not None
        assert runner.weights_bytes < reference.weights_bytes - 2 * linear
        # Against the same compute precision unquantized (``element`` bytes a value): each
        # linear weight went down to one byte and a little of scales, whatever the cast did.
        assert same.weights_bytes is not None
        assert runner.weights_bytes <= same.weights_bytes - linear * (element - 1.25)
        prompts = prompt_ids(None, model.vocab_size, "builtin", 2, 8)
        assert runner.generate(prompts, 4).shape == (2, 4)
        quality = language_quality(runner.logits(ids), reference.logits(ids), ids)
    assert 0.9 < quality["perplexity_ratio"] < 1.1


def test_weight_knobs_are_checked_where_they_apply() -> None:
    backend = get_backend("torch")
    with pytest.raises(BuildError, match="'weights' must be one of"):
        backend.check_knob_values({"weights": "int2"})
    assert backend.check_knob_values({"weights": "int8", "weight_group_size": 32}) is None
    with pytest.raises(BuildError, match="'weight_group_size' must be one of"):
        backend.check_knob_values({"weights": "int4", "weight_group_size": 48})
    # A fixed-shape model refuses them before it looks at its artifact.
    with pytest.raises(BuildError, match="are for generative language models"):
        backend.compile(None, {"weights": "int8"}, PROFILE, 1)  # type: ignore[arg-type]


def test_the_prefill_computes_the_last_positions_logits_only() -> None:
    model = _model("llama")
    prompts = prompt_ids(None, model.vocab_size, "builtin", 2, 9)
    positions: list[int] = []
    hook = model.module.lm_head.register_forward_hook(
        lambda _module, inputs, _output: positions.append(int(inputs[0].shape[1])))
    try:
        with get_backend("torch").compile_generator(model, "fp32", {"num_threads": 1}, PROFILE,
                                                    2) as runner:
            runner.generate(prompts, 3)
    finally:
        hook.remove()
    # One position at the prefill (not the prompt's 9), one at each later step, as generate().
    assert positions == [1, 1, 1]
