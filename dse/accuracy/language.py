"""What a generative model is given and scored on: its prompts, cut to the workload's length, and
the quality of a deployed format against the fp32 reference on dse's held-out text.

Both texts ship with dse (``dse/accuracy/texts/``, written for it, under the project's licence):
``prompts.txt`` (24 everyday prompts, one per line) and ``heldout.txt`` (a 470-word story no
model was trained on). A model without a tokenizer (a config model with random weights) gets
stand-in token ids drawn from a seeded generator instead: its agreement with the reference is
still meaningful, its perplexity is not (random weights model no language).

Quality of a deployed format, from its next-token logits over the held-out tokens beside the
fp32 reference's on the same tokens:

- ``perplexity``: exp of the mean negative log-likelihood of each next token;
- ``perplexity_ratio``: that over the reference's (1 = no change; 1.01 = 1% worse);
- ``quality_retained``: the reference's perplexity over the format's, the share of the reference's
  quality kept (MLPerf's accuracy gate reads ``quality_retained >= 0.99``: 99% of the reference);
- ``token_agreement``: the share of positions whose most likely next token is the reference's;
- ``token_kl``: the mean KL divergence of the format's next-token distribution from the
  reference's, in nats.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

TEXTS = Path(__file__).with_name("texts")
BUILTIN_PROMPTS = "builtin"


def prompt_lines(prompts: str) -> list[str]:
    """The prompts of a workload's prompt set: dse's own (``builtin``) or a text file's
    non-empty lines. ValueError when the file cannot be read or holds none."""
    path = TEXTS / "prompts.txt" if prompts == BUILTIN_PROMPTS else Path(prompts)
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the prompts {path}: {exc}") from None
    lines = [line for line in lines if line]
    if not lines:
        raise ValueError(f"the prompt file {path} holds no prompt")
    return lines


def prompt_ids(tokenizer: Any | None, vocab_size: int, prompts: str, batch: int,
               prompt_tokens: int, seed: int = 0) -> np.ndarray:
    """One request's prompts as token ids, (batch, prompt_tokens): sequence ``i`` starts at
    prompt ``i`` and runs on through the next ones (a newline between) until it holds exactly
    ``prompt_tokens`` tokens, so every sequence prefills the same work and none is padded.
    Without a tokenizer: ids drawn uniformly from the vocabulary by ``seed``."""
    if tokenizer is None:
        return np.random.default_rng(seed).integers(0, vocab_size, (batch, prompt_tokens),
                                                    dtype=np.int64)
    encoded = [_encode(tokenizer, line) for line in prompt_lines(prompts)]
    newline = _encode(tokenizer, "\n")
    rows = []
    for row in range(batch):
        ids: list[int] = []
        index = row
        while len(ids) < prompt_tokens:
            ids += encoded[index % len(encoded)] + newline
            index += 1
        rows.append(ids[:prompt_tokens])
    return np.asarray(rows, dtype=np.int64)


def heldout_ids(tokenizer: Any | None, vocab_size: int, tokens: int, seed: int = 0) -> np.ndarray:
    """The held-out tokens the quality is scored on, (1, n): the first ``tokens`` of dse's
    held-out text (all of it, n < ``tokens``, when it is shorter), or ``tokens`` stand-in ids."""
    if tokenizer is None:
        return np.random.default_rng(seed + 1).integers(0, vocab_size, (1, tokens),
                                                        dtype=np.int64)
    text = (TEXTS / "heldout.txt").read_text(encoding="utf-8")
    return np.asarray([_encode(tokenizer, text)[:tokens]], dtype=np.int64)


def _encode(tokenizer: Any, text: str) -> list[int]:
    return [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    data = logits.astype(np.float64)
    shifted = data - data.max(axis=-1, keepdims=True)
    result: np.ndarray = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return result


def language_quality(logits: np.ndarray, reference: np.ndarray,
                     ids: np.ndarray) -> dict[str, float]:
    """``perplexity``, ``perplexity_ratio``, ``quality_retained``, ``token_agreement`` and
    ``token_kl`` of ``logits``
    (rows, tokens, vocabulary) against ``reference`` (the same shape) on the token ids ``ids``
    (rows, tokens): position t predicts token t + 1. ValueError for mismatched shapes, fewer than
    two tokens, or logits that are not finite."""
    if logits.shape != reference.shape or logits.shape[:2] != ids.shape:
        raise ValueError(f"logits {logits.shape}, reference {reference.shape} and ids "
                         f"{ids.shape} do not match")
    if ids.shape[1] < 2:
        raise ValueError("quality needs at least two tokens")
    if not (np.isfinite(logits).all() and np.isfinite(reference).all()):
        raise ValueError("the logits are not finite")
    own, ref = _log_softmax(logits[:, :-1]), _log_softmax(reference[:, :-1])
    targets = ids[:, 1:, None]
    nll = -np.take_along_axis(own, targets, axis=-1).mean()
    ref_nll = -np.take_along_axis(ref, targets, axis=-1).mean()
    kl = (np.exp(ref) * (ref - own)).sum(axis=-1).mean()
    agreement = (own.argmax(axis=-1) == ref.argmax(axis=-1)).mean()
    return {"perplexity": float(np.exp(nll)),
            "perplexity_ratio": float(np.exp(nll - ref_nll)),
            "quality_retained": float(np.exp(ref_nll - nll)),
            "token_agreement": float(agreement),
            "token_kl": float(max(kl, 0.0))}
