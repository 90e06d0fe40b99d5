"""torch.compile (inductor) of the trained module, in fp32, fp16 or bf16, on the CPU or a CUDA GPU."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.backends.backend_registry import register_backend
from dse.backends.base import Backend, Runner, first_error_line
from dse.backends.torch.common import (
    TORCH_STANDALONE,
    Placement,
    TorchRunner,
    borrowed_bytes,
    check_torch_knob_device,
    check_torch_knobs,
    place_module,
    probe_batch,
    resolve_placement,
    settings,
    torch_capability,
)
from dse.backends.torch.profiler import PROFILER as TORCH_PROFILER
from dse.backends.torch.profiler import profile_torch_runner
from dse.backends.torch.sdpa_knob import attention_kernel, check_module_honours
from dse.core import BuildError
from dse.plugins import BackendDeclaration

if TYPE_CHECKING:
    import torch

    from dse.artifacts import Artifact
    from dse.backends.bundle_extras import BundleExtras
    from dse.backends.op_profile import OpProfile, ProfileRequest
    from dse.spec import HardwareProfile

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
# Modes that cannot work without a CUDA device, and why; the capability table is keyed by
# (backend, precision, device kind), so knob-level limits live with the backend.
_CUDA_ONLY_MODES = {"reduce-overhead": "it records CUDA graphs, which need a CUDA device"}


class TorchCompileRunner(TorchRunner):
    """A compiled module, specialised (``dynamic=False``) to the candidate's batch size.

    Attributes:
        compile_seconds: wall time of the compile, i.e. of the first call, which is when torch
            compiles; measured in :meth:`TorchCompileBackend.compile`.
        mode: the ``torch.compile`` mode it was compiled with.
    """

    def __init__(self, module: Callable[[torch.Tensor], torch.Tensor], placement: Placement,
                 batch_size: int, settings: dict[str, str], kernel: str = "default",
                 mode: str = "default") -> None:
        super().__init__(module, placement, batch_size, settings, kernel)
        self.compile_seconds = 0.0
        self.mode = mode

    def run(self, x: np.ndarray) -> np.ndarray:
        rows = len(x)
        if rows >= self.batch_size:
            return super().run(x)
        # A smaller batch (the tail of an accuracy pass) is padded to the compiled shape: the
        # static graph would otherwise recompile for it. Eval-mode rows are independent, so the
        # padding changes no real row's logits.
        padded = np.zeros((self.batch_size, *x.shape[1:]), dtype=np.float32)
        padded[:rows] = x
        return super().run(padded)[:rows]

    def describe(self) -> dict[str, str]:
        return {**super().describe(), "compile_seconds": f"{self.compile_seconds:.3f}"}


@register_backend
class TorchCompileBackend(Backend):
    """Compiles the trained module with ``torch.compile(mode=..., dynamic=False)``.

    Knobs: ``num_threads`` and ``precision_mode`` as for eager torch (inductor's CPU kernels take
    their thread count from torch's pool at compile time); ``mode`` ("default",
    "reduce-overhead", "max-autotune"); ``attention_kernel`` as for eager torch (the compile's
    first call runs under it too, so the graph is traced with that kernel). ``compile`` includes
    the compile: it calls the compiled module once on a zero batch of the candidate's batch size
    and records the time on the runner (:attr:`TorchCompileRunner.compile_seconds`), so warm-up
    and timing never see it.
    """

    declaration = BackendDeclaration(
        name="torch_compile", artifact_format="torch",
        capability=functools.partial(torch_capability, "torch_compile"),
        knobs=frozenset({"num_threads", "precision_mode", "mode", "attention_kernel"}),
        thread_knob="num_threads",
        libraries=("torch",), extra="torch",
        summary="torch.compile (inductor)",
        profiler=TORCH_PROFILER, standalone=TORCH_STANDALONE)

    def profile_ops(self, request: ProfileRequest) -> OpProfile:
        return profile_torch_runner(request)

    def bundle_extras(self, runner: Runner, artifact: Artifact) -> BundleExtras:
        """The runner's module saved with ``torch.export`` (see
        :mod:`dse.backends.torch.bundle`), which ``run.py`` compiles with the runner's mode."""
        from dse.backends.torch.bundle import torch_bundle_extras

        if not isinstance(runner, TorchCompileRunner):
            raise BuildError(f"torch_compile exports the runners it compiled, got a "
                             f"{type(runner).__name__}")
        return torch_bundle_extras(runner, artifact, self.name, compile_mode=runner.mode)

    def check_knob_values(self, knobs: Mapping[str, Any]) -> None:
        check_torch_knobs(self, knobs)
        mode = knobs.get("mode", "default")
        if not isinstance(mode, str) or mode not in COMPILE_MODES:
            raise BuildError(f"knob 'mode' must be one of {list(COMPILE_MODES)}, got {mode!r}")

    def check_knob_device(self, knobs: Mapping[str, Any], device_kind: str) -> None:
        check_torch_knob_device(knobs, device_kind)

    def compile(self, artifact: Artifact, knobs: Mapping[str, Any], profile: HardwareProfile,
                batch_size: int) -> Runner:
        placement = resolve_placement(self, artifact, knobs, profile)
        mode = knobs.get("mode", "default")
        if placement.device != "cuda" and mode in _CUDA_ONLY_MODES:
            raise BuildError(f"torch.compile mode {mode!r} cannot run on {profile.kind} device "
                             f"{profile.name!r}: {_CUDA_ONLY_MODES[mode]}")
        import torch

        module = place_module(artifact, placement)
        kernel = attention_kernel(knobs)
        if kernel != "default":  # on the eager module: dynamo and a function mode do not mix
            check_module_honours(module, probe_batch(artifact, placement), kernel)
        compiled = torch.compile(module, mode=mode, dynamic=False)
        runner = TorchCompileRunner(compiled, placement, batch_size,
                                    {**settings(self.name, placement), "mode": str(mode)}, kernel,
                                    str(mode))
        # Inductor runs from the module's own parameters (no freezing): they stay shared.
        runner.borrowed_bytes = borrowed_bytes(module, artifact)
        zeros = np.zeros((batch_size, *artifact.input_shape), dtype=np.float32)
        start = time.perf_counter()
        try:
            runner.run(zeros)
        # Dynamo and inductor failures (unsupported op, C++ compiler missing or failing) are all
        # RuntimeErrors; OSError covers a compiler that cannot be started at all.
        except (RuntimeError, OSError) as exc:
            raise BuildError(f"torch.compile (mode {mode!r}, {placement.precision}) failed: "
                             f"{type(exc).__name__}: {first_error_line(exc)}") from exc
        runner.compile_seconds = time.perf_counter() - start
        return runner
