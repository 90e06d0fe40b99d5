"""A causal language model's greedy generation in torch, as the stream of steps that
:mod:`dse.measure.generation` times: the prompt in one forward pass (prefill), then one forward
pass per token over the model's own KV cache (decode).

Any causal LM that transformers builds takes this loop (Llama, Qwen2, Gemma, Phi, ...): it passes
``input_ids``, ``attention_mask``, ``position_ids`` and ``past_key_values`` only, and picks the
next token by argmax, as ``generate(do_sample=False)`` does. It never stops at an end-of-sequence
token: every request decodes exactly ``output_tokens`` steps, so every request times the same
work. Prompts of unequal length are left-padded (``left_pad``); positions count real tokens
only, so a padded sequence decodes as it would alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int = 0
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-id prompts as one batch, padded on the left: (input_ids, attention_mask)."""
    import torch
    from torch.nn.utils.rnn import pad_sequence

    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    rows = [torch.tensor(list(prompt), dtype=torch.long) for prompt in prompts]
    ids = pad_sequence(rows, batch_first=True, padding_value=pad_id, padding_side="left")
    mask = pad_sequence([torch.ones_like(row) for row in rows], batch_first=True,
                        padding_value=0, padding_side="left")
    return ids, mask


def greedy_stream(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  output_tokens: int,
                  on_done: Callable[[Any], None] | None = None) -> Iterator[torch.Tensor]:
    """Prefill ``input_ids`` and decode greedily, yielding each step's tokens (one per sequence,
    shape (batch, 1)) as soon as they exist: ``output_tokens`` steps. ``on_done`` is handed the
    KV cache after the last step (its size is the workload's longest context's)."""
    import torch

    if output_tokens < 1:
        raise ValueError(f"output_tokens must be at least 1, got {output_tokens}")
    mask = attention_mask
    # Positions count the real tokens of each row (left padding has none).
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    # A batch without padding needs neither: the model's own causal mask and positions are
    # these, and building them each step is work a deployment of unpadded prompts does not do.
    padded = not bool(mask.all())
    # The prefill needs the last position's logits only, as generate() asks for them: the output
    # layer over every prompt position is work no deployment does (for SmolLM2's 49,152-token
    # vocabulary, a fifth of a 64-token prefill).
    last_only = {"logits_to_keep": 1} if _keeps_logits(model) else {}
    with torch.inference_mode():
        out = model(input_ids=input_ids, use_cache=True, **last_only,
                    **({"attention_mask": mask, "position_ids": positions} if padded else {}))
        token = out.logits[:, -1, :].argmax(-1, keepdim=True)
        yield token
        past = out.past_key_values
        position = positions[:, -1:]
        for _ in range(output_tokens - 1):
            extra = {}
            if padded:
                mask = torch.cat([mask, torch.ones_like(token)], dim=-1)
                position = position + 1
                extra = {"attention_mask": mask, "position_ids": position}
            out = model(input_ids=token, past_key_values=past, use_cache=True, **extra)
            past = out.past_key_values
            token = out.logits[:, -1, :].argmax(-1, keepdim=True)
            yield token
        if on_done is not None:
            on_done(past)


def _keeps_logits(model: Any) -> bool:
    """Whether the model's forward takes ``logits_to_keep`` (transformers' causal LMs do)."""
    model_class: Any = type(model)
    return _forward_keeps_logits(model_class)


@functools.cache
def _forward_keeps_logits(model_class: Any) -> bool:
    # Read once per class: a signature costs tens of microseconds, which a request of a small
    # model would otherwise pay in its time to first token.
    import inspect

    return "logits_to_keep" in inspect.signature(model_class.forward).parameters


def cache_nbytes(cache: Any) -> int:
    """Bytes of the tensors a KV cache holds: transformers' cache objects (their ``layers``'
    ``keys`` and ``values``, or any other tensor a layer keeps) and the older tuples of
    tensors alike."""
    import torch

    if isinstance(cache, torch.Tensor):
        return cache.numel() * cache.element_size()
    if isinstance(cache, (tuple, list)):
        return sum(cache_nbytes(item) for item in cache)
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return sum(cache_nbytes(layer) for layer in layers)
    return sum(cache_nbytes(value) for value in vars(cache).values()
               if isinstance(value, (torch.Tensor, tuple, list))) if hasattr(cache, "__dict__") \
        else 0
