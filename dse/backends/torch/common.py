"""What the torch backends share: knob checks, precision and device placement, and the runner.

The torch artifact is the trained fp32 module, shared by every candidate of an arch; the precision
and device are applied here, on a copy, so the artifact stays fp32 and on the CPU.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.artifacts import TORCH_DTYPES
from dse.backends.base import Backend, Runner, bound_batch, default_threads, thread_knob
from dse.backends.capabilities import BF16_CC, CAPABILITIES, TRITON_CC
from dse.backends.torch.sdpa_knob import attention_kernel, check_kernel_device, kernel_context
from dse.core import BuildError
from dse.plugins import Capability, Standalone

if TYPE_CHECKING:
    import torch

    from dse.artifacts import Artifact
    from dse.spec import HardwareProfile

PRECISION_MODES = ("dtype", "autocast")
# A torch bundle's run.py (both backends): the runner's module saved with torch.export, run by
# torch alone (see dse.backends.torch.bundle).
TORCH_STANDALONE = Standalone("dse.backends.torch.run_script", ("torch", "numpy"))


@dataclass(frozen=True)
class Placement:
    """Where and how a torch runner computes.

    ``precision_mode`` "dtype" casts module and inputs to ``dtype``; "autocast" keeps the fp32
    module and lets ``torch.autocast`` pick per operator. fp32 is fp32 either way.
    """

    precision: str
    dtype: str
    precision_mode: str
    device: str
    threads: int

    @property
    def autocast(self) -> bool:
        return self.precision_mode == "autocast" and self.dtype != "float32"


def check_torch_knobs(backend: Backend, knobs: Mapping[str, Any]) -> None:
    """The knob rules both torch backends share (names, thread count, precision_mode,
    attention_kernel)."""
    backend.check_knobs(knobs)
    thread_knob(knobs, backend.thread_knob, 1)
    mode = knobs.get("precision_mode", "dtype")
    if not isinstance(mode, str) or mode not in PRECISION_MODES:
        raise BuildError(f"knob 'precision_mode' must be one of {list(PRECISION_MODES)}, "
                         f"got {mode!r}")
    attention_kernel(knobs)


def check_torch_knob_device(knobs: Mapping[str, Any], device_kind: str) -> None:
    """The device-kind rules both torch backends share: no CUDA-only SDPA kernel on a cpu."""
    check_kernel_device(knobs, device_kind)


def resolve_placement(backend: Backend, artifact: Artifact, knobs: Mapping[str, Any],
                      profile: HardwareProfile) -> Placement:
    """Check knobs, artifact and device for a torch backend; BuildError naming what is wrong."""
    backend.check_knob_values(knobs)
    backend.check_knob_device(knobs, profile.kind)
    threads = thread_knob(knobs, backend.thread_knob, default_threads(profile))
    mode = knobs.get("precision_mode", "dtype")
    if artifact.format != "torch" or artifact.module is None:
        raise BuildError(f"{backend.name} runs a torch module, got a {artifact.format!r} artifact")
    if artifact.precision not in TORCH_DTYPES:
        raise BuildError(f"{backend.name} runs precisions {sorted(TORCH_DTYPES)}, "
                         f"got {artifact.precision!r}")
    device = "cpu" if profile.kind == "cpu" else "cuda"
    if device == "cuda":
        _check_cuda(backend.name, artifact.precision, profile)
    return Placement(artifact.precision, TORCH_DTYPES[artifact.precision], str(mode), device,
                     threads)


def _check_cuda(backend: str, precision: str, profile: HardwareProfile) -> None:
    import torch

    if not torch.cuda.is_available():
        raise BuildError(f"device {profile.name!r} is a {profile.kind} device, but torch "
                         f"{torch.__version__} reports no CUDA device")
    floor = CAPABILITIES[(backend, precision, profile.kind)].min_compute_capability
    major, minor = torch.cuda.get_device_capability()
    if floor is not None and float(f"{major}.{minor}") < floor:
        raise BuildError(f"{backend} {precision} needs CUDA compute capability >= {floor}, but "
                         f"{torch.cuda.get_device_name()} has {major}.{minor}")


def place_module(artifact: Artifact, placement: Placement) -> torch.nn.Module:
    """The artifact's module in eval mode on the placement's device and dtype.

    A copy whenever the module changes, because ``Module.to`` converts in place and the artifact's
    module is shared with other candidates (and cached trained weights).
    """
    import torch

    module = placed_module(artifact, placement)
    torch.set_num_threads(placement.threads)
    return module


def placed_module(artifact: Artifact, placement: Placement) -> torch.nn.Module:
    """:func:`place_module` without setting torch's thread pool: the module as the runner
    computes with it (the artifact's own in fp32 on the CPU, else a converted copy)."""
    import torch

    module = artifact.module
    assert module is not None  # resolve_placement checked it
    cast = input_dtype(placement)
    if cast != "float32" or placement.device != "cpu":
        module = copy.deepcopy(module).to(device=placement.device, dtype=getattr(torch, cast))
    return module.eval()


def input_dtype(placement: Placement) -> str:
    """The torch dtype name inputs are cast to: the precision's, unless autocast casts."""
    return placement.dtype if placement.precision_mode == "dtype" else "float32"


def probe_batch(artifact: Artifact, placement: Placement) -> torch.Tensor:
    """One sample of zeros on the placement's device, in the dtype inputs are cast to: the
    input of a check run at compile time."""
    import torch

    return torch.zeros((1, *artifact.input_shape), device=placement.device,
                       dtype=getattr(torch, input_dtype(placement)))


def borrowed_bytes(module: torch.nn.Module, artifact: Artifact) -> int:
    """The bytes of ``module``'s parameters and buffers when it is the artifact's own module
    (on the CPU, not copied by :func:`place_module`): resident before the runner existed."""
    if module is not artifact.module:
        return 0
    tensors = [*module.parameters(), *module.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors if t.device.type == "cpu")


def settings(backend: str, placement: Placement) -> dict[str, str]:
    """The describe() entries every torch runner has."""
    import torch

    return {
        "backend": backend,
        "backend_version": torch.__version__,
        "device": placement.device,
        "precision": placement.precision,
        "threads": str(placement.threads),
        "precision_mode": placement.precision_mode,
        "dtype": placement.dtype,
    }


class TorchRunner(Runner):
    """Calls a module under ``torch.inference_mode`` (and the ``attention_kernel`` knob's
    ``sdpa_kernel``, ``kernel``) and returns float32 numpy logits.

    The timed call (:meth:`bound_call`) calls the module on an input tensor made once, in the
    dtype the module takes, as a torch deployment holds its input; ``run`` converts a numpy
    batch on every call. On a GPU the tensor stays in host memory and is copied to the device in
    every call, and the logits back, as a deployment fed from host memory pays (see
    :mod:`dse.backends.onnxruntime.gpu`)."""

    def __init__(self, module: Callable[[torch.Tensor], torch.Tensor], placement: Placement,
                 batch_size: int, settings: dict[str, str], kernel: str = "default") -> None:
        self._module: Callable[[torch.Tensor], torch.Tensor] | None = module
        self._placement = placement
        self._settings = {**settings, "attention_kernel": kernel}
        self._kernel = kernel
        self.batch_size = batch_size

    @property
    def placement(self) -> Placement:
        """Where and how the module computes."""
        return self._placement

    @property
    def input_dtype(self) -> str:
        """The torch dtype name inputs are cast to (:func:`input_dtype`)."""
        return input_dtype(self._placement)

    @property
    def kernel(self) -> str:
        """The ``attention_kernel`` knob's SDPA kernel every call runs under ("default": none)."""
        return self._kernel

    def run(self, x: np.ndarray) -> np.ndarray:
        import torch

        if self._module is None:
            raise RuntimeError(f"run() on a closed {self._settings['backend']} runner")
        feed = np.ascontiguousarray(x, dtype=np.float32)
        # A copy when torch.from_numpy would warn (read-only memory), or when a length-1 axis has
        # an odd stride (numpy calls that contiguous): compiled graphs guard on exact strides and
        # would recompile for it. A copy has the canonical strides.
        if not feed.flags.writeable or feed.strides != _c_strides(feed):
            feed = feed.copy()
        place = self._placement
        dtype = getattr(torch, self.input_dtype)
        with torch.inference_mode(), kernel_context(self._kernel), torch.autocast(
                place.device, getattr(torch, place.dtype), enabled=place.autocast):
            logits = self._module(torch.from_numpy(feed).to(place.device, dtype))
            if place.device == "cuda":
                # run() is synchronous by contract: timings must include the GPU's work.
                torch.cuda.synchronize()
            result: np.ndarray = logits.to("cpu", torch.float32).numpy()
        return result

    def bound_call(self, x: np.ndarray) -> Callable[[], np.ndarray]:
        import torch

        if self._module is None:
            raise RuntimeError(f"bound_call() on a closed {self._settings['backend']} runner")
        place = self._placement
        # Made in inference mode, as run's input is: a compiled graph guards on the kind of
        # tensor it was traced with, and would recompile for a normal one.
        with torch.inference_mode():
            tensor = torch.from_numpy(bound_batch(x, self.batch_size)).to(
                getattr(torch, self.input_dtype))
        cast = getattr(torch, place.dtype)
        autocast: Callable[[], contextlib.AbstractContextManager[object]] = (
            (lambda: torch.autocast(place.device, cast)) if place.autocast
            else contextlib.nullcontext)

        def call() -> np.ndarray:
            module = self._module
            if module is None:
                raise RuntimeError(f"a bound call on a closed {self._settings['backend']} runner")
            with torch.inference_mode(), kernel_context(self._kernel), autocast():
                logits = module(tensor.to(place.device))
                if place.device == "cuda":
                    torch.cuda.synchronize()
                result: np.ndarray = logits.to("cpu", torch.float32).numpy()
            return result

        return call

    def describe(self) -> dict[str, str]:
        import torch

        # Read back, not echoed: shows if something changed torch's global pool since compile.
        return {**self._settings, "torch_num_threads": str(torch.get_num_threads())}

    def close(self) -> None:
        self._module = None


def _c_strides(array: np.ndarray) -> tuple[int, ...]:
    """The strides of a freshly allocated C-order array of ``array``'s shape and dtype."""
    strides = []
    step = array.itemsize
    for length in reversed(array.shape):
        strides.append(step)
        step *= length
    return tuple(reversed(strides))


def torch_capability(backend: str, precision: str, kind: str) -> Capability:
    if precision in ("int8", "fp8"):
        engine = "torch eager" if backend == "torch" else "torch.compile"
        return Capability(False, f"{engine} {precision} needs a quantized torch module; use "
                                 f"{'onnxruntime or ' if precision == 'int8' else ''}tensorrt for "
                                 f"{precision}", "a quantized torch module")
    runs = {"torch": "eager PyTorch", "torch_compile": "torch.compile (inductor)"}[backend]
    if kind == "cpu":
        needs = "torch" if backend == "torch" else "torch with inductor and a C++ compiler (gcc)"
        if precision == "bf16":
            needs += "; fast only on CPUs with AVX512-BF16 or AMX"
        elif precision == "fp16":
            needs += "; fast only on CPUs with AVX512-FP16 or AMX-FP16"
        return Capability(True, f"{runs} on the CPU, {precision}", needs)
    floor = BF16_CC if precision == "bf16" else (TRITON_CC if backend == "torch_compile" else None)
    gpu = "a CUDA build of torch" if kind == "cuda" else "a JetPack (CUDA) build of torch"
    if backend == "torch_compile":
        gpu += " with triton"
    if floor is not None:
        gpu += f", on a CUDA device with compute capability >= {floor}"
        if precision == "bf16":
            gpu += " for bf16"
    return Capability(True, f"{runs} on the {kind} GPU, {precision}", gpu, floor)
