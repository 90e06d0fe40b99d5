"""Bring-your-own model factories that ship with dse, as examples of ``model.factory``.

A factory is called with the architecture parameters (a dict, as the search space draws them) and
returns a ``torch.nn.Module``, or ``(module, example)`` where ``example`` is an input batch (batch
axis first) or one sample's shape. Weights are never downloaded: dse trains them on the space's
dataset, or deploys them as built when the space names none.

- :func:`hf_bert_encoder`: Hugging Face transformers' BERT encoder (a public-library
  architecture, built from a config) on dse's sequence task (``search_spaces/byo-hf-bert.yaml``).
- :func:`digits_mlp`: a plain multi-layer perceptron, the smallest possible factory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# An examples module, imported only when a space names one of its factories: torch at the top.
import torch

DIGITS_SHAPE = (1, 8, 8)


def hf_bert_encoder(arch: Mapping[str, Any]) -> tuple[torch.nn.Module, tuple[int, ...]]:
    """Hugging Face transformers' ``BertModel`` (a public-library architecture, built from a
    ``BertConfig``: nothing is downloaded) as a classifier of dse's ``sequences`` task.

    The float feature vectors enter through ``inputs_embeds`` after a linear projection to the
    hidden size (the task has no token ids), and the mean of the last hidden states feeds a linear
    classifier. Attention is BERT's "eager" implementation: plain MatMul/Softmax in the ONNX graph.

    Arch parameters: ``hidden`` (a multiple of ``heads``), ``layers``, ``heads``,
    ``intermediate`` (the MLP width), ``seq_len`` (the length of the sequences).
    """
    from transformers import BertConfig, BertModel

    from dse.accuracy import DEFAULT_NUM_CLASSES, FEATURES

    hidden, heads = int(arch.get("hidden", 32)), int(arch.get("heads", 2))
    seq_len = int(arch.get("seq_len", 16))
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
    config = BertConfig(
        vocab_size=2, hidden_size=hidden, num_hidden_layers=int(arch.get("layers", 2)),
        num_attention_heads=heads, intermediate_size=int(arch.get("intermediate", 2 * hidden)),
        max_position_embeddings=max(seq_len, 8))
    # The config's own attribute (what `attn_implementation=` of from_pretrained sets): an explicit
    # choice, not the library's default, which may pick SDPA.
    config._attn_implementation = "eager"
    return EmbeddedEncoder(BertModel(config, add_pooling_layer=False), FEATURES, hidden,
                           DEFAULT_NUM_CLASSES), (seq_len, FEATURES)


class EmbeddedEncoder(torch.nn.Module):
    """Float sequences -> a library encoder (through ``inputs_embeds``) -> mean -> logits."""

    def __init__(self, encoder: torch.nn.Module, features: int, hidden: int,
                 classes: int) -> None:
        super().__init__()
        self.project = torch.nn.Linear(features, hidden)
        self.encoder = encoder
        self.classify = torch.nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        states = self.encoder(inputs_embeds=self.project(x)).last_hidden_state
        logits: torch.Tensor = self.classify(states.mean(dim=1))
        return logits


def digits_mlp(arch: Mapping[str, Any]) -> tuple[torch.nn.Module, torch.Tensor]:
    """A ReLU perceptron on flattened 1x8x8 digits: ``layers`` hidden layers of ``hidden`` units.

    Returns an example batch rather than a shape, to show that form of the contract.
    """
    hidden, layers = int(arch.get("hidden", 64)), int(arch.get("layers", 1))
    if hidden < 1 or layers < 0:
        raise ValueError(f"hidden must be >= 1 and layers >= 0, got {hidden=}, {layers=}")
    parts: list[torch.nn.Module] = [torch.nn.Flatten()]
    width = 64
    for _ in range(layers):
        parts += [torch.nn.Linear(width, hidden), torch.nn.ReLU()]
        width = hidden
    parts.append(torch.nn.Linear(width, 10))
    return torch.nn.Sequential(*parts), torch.zeros((2, *DIGITS_SHAPE))


def write_digits_onnx(path: str) -> None:
    """Train a small cnn on digits and export it: how ``search_spaces/models/digits-cnn.onnx``
    (the example of bringing an ONNX file) was made. ``python -c "from dse.examples.models import
    write_digits_onnx; write_digits_onnx('search_spaces/models/digits-cnn.onnx')"``"""
    import tempfile
    from pathlib import Path

    from dse.accuracy import train_or_load
    from dse.artifacts import export_onnx
    from dse.spec import TrainingSpec

    arch = {"num_stages": 2, "depth": 1, "width_mult": 1.0, "kernel_size": 3, "expand_ratio": 4}
    with tempfile.TemporaryDirectory() as cache:
        trained = train_or_load("cnn", arch, TrainingSpec(epochs=10, seed=0), Path(cache))
    export_onnx(trained.module, trained.input_shape, Path(path))
