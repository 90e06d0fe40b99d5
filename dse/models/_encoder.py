"""The torch layers of the ``transformer`` family: a small pre-LayerNorm encoder classifier.

Attention is written out with Linear, matmul and softmax rather than
``torch.nn.MultiheadAttention``: that module's inference fast path and its export are fragile,
and spelled out the ONNX graph is plain MatMul/Softmax nodes, which int8 QDQ quantization and
fp16/bf16 conversion handle like any other. That is the default, ``attention="explicit"``; the
other values call ``scaled_dot_product_attention`` under ``sdpa_kernel`` with one backend, which
raises where that kernel cannot run instead of silently picking another. The ONNX exporter lowers
the call to plain MatMul/Softmax nodes as well (see tests/models/test_transformer.py), so every
ONNX backend runs the same graph for "math", "flash" and "efficient".
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from torch.nn.attention import SDPBackend


def _sdpa_backend(attention: str, device_type: str) -> SDPBackend:
    """The one SDPA backend ``attention`` names, for tensors on ``device_type``.

    "efficient" has no CPU kernel: on CPU tensors it computes with the math kernel. That happens
    only in the CPU-side work of a candidate measured on a GPU (training, zero-cost proxies, the
    fp32 reference logits, ONNX tracing all run on the host): a cpu device refuses "efficient"
    before anything is trained (``TransformerFamily.device_problem``), so no measurement runs it.
    """
    from torch.nn.attention import SDPBackend

    if attention == "efficient" and device_type == "cpu":
        return SDPBackend.MATH
    backends = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    return backends[attention]


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention over (batch, length, hidden)."""

    def __init__(self, hidden: int, num_heads: int, attention: str = "explicit") -> None:
        super().__init__()
        if hidden % num_heads:
            raise ValueError(f"hidden ({hidden}) must be divisible by num_heads ({num_heads})")
        if attention not in ("explicit", "math", "flash", "efficient"):
            raise ValueError(f"unknown attention kernel {attention!r}")
        self.attention = attention
        self.num_heads = num_heads
        self.head_dim = hidden // num_heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape
        # (batch, length, 3, heads, head_dim) -> three of (batch, heads, length, head_dim)
        qkv = self.qkv(x).reshape(batch, length, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        if self.attention == "explicit":
            weights = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * self.scale, dim=-1)
            heads = torch.matmul(weights, v)
        else:
            from torch.nn.attention import sdpa_kernel

            # The default scale of scaled_dot_product_attention is 1/sqrt(head_dim): self.scale.
            with sdpa_kernel(_sdpa_backend(self.attention, q.device.type)):
                heads = nn.functional.scaled_dot_product_attention(q, k, v)
        mixed = heads.transpose(1, 2).reshape(batch, length, hidden)
        out: torch.Tensor = self.out(mixed)
        return out


class EncoderBlock(nn.Module):
    """Pre-LayerNorm block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))`` with a GELU MLP."""

    def __init__(self, hidden: int, num_heads: int, mlp_hidden: int,
                 attention: str = "explicit") -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(hidden)
        self.attn = SelfAttention(hidden, num_heads, attention)
        self.mlp_norm = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, mlp_hidden), nn.GELU(),
                                 nn.Linear(mlp_hidden, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        out: torch.Tensor = x + self.mlp(self.mlp_norm(x))
        return out


class EncoderClassifier(nn.Module):
    """(batch, seq_len, features) float32 -> (batch, num_classes) logits.

    A Linear projection of each token to ``hidden`` plus a learned positional embedding, the
    encoder blocks, a final LayerNorm, the mean over positions, and a Linear classifier. The
    positional embedding fixes the sequence length: inputs must have exactly ``seq_len`` tokens.
    """

    def __init__(self, *, features: int, seq_len: int, hidden: int, num_heads: int,
                 num_layers: int, mlp_hidden: int, num_classes: int,
                 attention: str = "explicit") -> None:
        super().__init__()
        self.embed = nn.Linear(features, hidden)
        # Small, as in BERT/ViT: at the default init's scale the positions would drown the tokens.
        self.position = nn.Parameter(torch.randn(1, seq_len, hidden) * 0.02)
        self.blocks = nn.Sequential(*(EncoderBlock(hidden, num_heads, mlp_hidden, attention)
                                      for _ in range(num_layers)))
        self.norm = nn.LayerNorm(hidden)
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.blocks(self.embed(x) + self.position)
        logits: torch.Tensor = self.classifier(self.norm(tokens).mean(dim=1))
        return logits
