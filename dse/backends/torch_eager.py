"""Eager PyTorch on the CPU, fp32."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.backends.base import Backend, Runner, default_threads, thread_knob
from dse.backends.registry import register_backend
from dse.exceptions import BuildError

if TYPE_CHECKING:
    import torch

    from dse.build import Artifact
    from dse.spec import HardwareProfile


class TorchEagerRunner(Runner):
    """Calls the module under ``torch.inference_mode`` and returns numpy logits."""

    def __init__(self, module: torch.nn.Module, batch_size: int, threads: int,
                 precision: str) -> None:
        self._module: torch.nn.Module | None = module
        self._threads = threads
        self._precision = precision
        self.batch_size = batch_size

    def run(self, x: np.ndarray) -> np.ndarray:
        import torch

        if self._module is None:
            raise RuntimeError("run() on a closed torch runner")
        feed = np.ascontiguousarray(x, dtype=np.float32)
        if not feed.flags.writeable:
            # torch.from_numpy warns on read-only memory; a copy is cheaper than the warning.
            feed = feed.copy()
        with torch.inference_mode():
            logits: np.ndarray = self._module(torch.from_numpy(feed)).numpy()
        return logits

    def describe(self) -> dict[str, str]:
        import torch

        return {
            "backend": "torch",
            "backend_version": torch.__version__,
            "device": "cpu",
            "precision": self._precision,
            "threads": str(self._threads),
            "mode": "eager",
            # Read back, not echoed: shows if something changed torch's global pool since compile.
            "torch_num_threads": str(torch.get_num_threads()),
        }

    def close(self) -> None:
        self._module = None


@register_backend
class TorchEagerBackend(Backend):
    """Runs the trained module itself. fp32 only.

    Knob ``num_threads`` (default: the profile's ``max_threads``, else every core) is set once,
    here in ``compile``, not before every ``run``: torch's intra-op pool is process-wide, the
    device worker runs one runner at a time and compiles right before measuring, and a call per
    run would add its own cost to every timed iteration.
    """

    name = "torch"
    knobs = frozenset({"num_threads"})
    thread_knob = "num_threads"

    def compile(self, artifact: Artifact, knobs: Mapping[str, Any], profile: HardwareProfile,
                batch_size: int) -> Runner:
        self.check_knobs(knobs)
        threads = thread_knob(knobs, "num_threads", default_threads(profile))
        if artifact.format != "torch" or artifact.module is None:
            raise BuildError(f"torch eager runs a torch module, got a {artifact.format!r} artifact")
        if artifact.precision != "fp32":
            raise BuildError(f"torch eager runs fp32 modules only, got {artifact.precision!r}")
        import torch

        torch.set_num_threads(threads)
        artifact.module.eval()
        return TorchEagerRunner(artifact.module, batch_size, threads, artifact.precision)
