"""Greedy generation in torch as a stream of steps (dse.backends.torch.generation): the same tokens
as transformers' own ``generate``, for more than one architecture, padded batches included, and
timed by the generation protocol. Small random-weight models built from a config: nothing is
downloaded."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from dse.backends.torch.generation import greedy_stream, left_pad  # noqa: E402
from dse.measure import measure_generation  # noqa: E402

SIZES = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}


def _model(kind: str) -> Any:
    torch.manual_seed(0)
    config = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[kind](**SIZES)
    model_class = {"llama": transformers.LlamaForCausalLM,
                   "qwen2": transformers.Qwen2ForCausalLM}[kind]
    return model_class(config).eval()


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_greedy_stream_gives_generates_tokens_and_each_row_decodes_as_alone(kind: str) -> None:
    model = _model(kind)
    prompts = [[5, 6, 7, 8, 9], [3, 4, 10]]
    ids, mask = left_pad(prompts)
    streamed = torch.cat(list(greedy_stream(model, ids, mask, 6)), dim=-1)
    expected = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6,
                              min_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(streamed, expected[:, ids.shape[1]:])
    for row, prompt in enumerate(prompts):
        alone_ids, alone_mask = left_pad([prompt])
        alone = torch.cat(list(greedy_stream(model, alone_ids, alone_mask, 6)), dim=-1)
        assert torch.equal(alone[0], streamed[row])


def test_a_timed_generation_counts_every_step_of_every_request() -> None:
    model = _model("llama")
    ids, mask = left_pad([[1, 2, 3, 4], [5, 6, 7, 8]])
    stats = measure_generation(lambda: greedy_stream(model, ids, mask, 5), batch=2,
                               prompt_tokens=4, output_tokens=5, min_requests=4)
    assert (stats.requests, len(stats.tpot_ms)) == (4, 16)
    found = stats.metrics()
    assert found["device_decode_tokens_per_s"] == pytest.approx(2 * found["decode_tokens_per_s"])


def test_an_empty_prompt_and_no_output_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one token"):
        left_pad([[1, 2], []])
    ids, mask = left_pad([[1, 2]])
    with pytest.raises(ValueError, match="output_tokens must be at least 1"):
        next(greedy_stream(_model("llama"), ids, mask, 0))
