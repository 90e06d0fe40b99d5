"""The one-architecture search space the benchmarks' short campaigns measure (a quick mode's, the
first hour's): a CNN of one stage trained one epoch on digits, ONNX Runtime fp32 on one thread.
A helper the benchmarks import; it measures nothing itself."""

from __future__ import annotations

from collections.abc import Sequence


def tiny_space(name: str, batch_sizes: Sequence[int]) -> str:
    """The space's YAML text, named ``name``, at ``batch_sizes``."""
    return f"""\
name: {name}
model:
  family: cnn
  dataset: digits
  arch: {{num_stages: [1], depth: [1], width_mult: [0.5], kernel_size: [3], expand_ratio: [2]}}
training: {{epochs: 1, batch_size: 128, seed: 0}}
deployment:
  backends:
    onnxruntime: {{knobs: {{intra_op_threads: [1]}}}}
  precisions: [fp32]
  batch_sizes: [{", ".join(str(b) for b in batch_sizes)}]
objectives:
  - metric: accuracy
  - metric: latency_p50_ms
"""
