"""Eager PyTorch and torch.compile: the two backends, what they share (knobs, placement, the runner),
CUDA-graph replay, the attention-kernel knob, ``torch.profiler``, the exported program of a bundle
and its run script.

Importing this package registers its backend(s); the runtime itself is imported on first use.
"""

from dse.backends.torch.compiled import TorchCompileBackend
from dse.backends.torch.eager import TorchEagerBackend

__all__ = ["TorchCompileBackend", "TorchEagerBackend"]
