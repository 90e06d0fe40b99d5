"""The torch backends' ``attention_kernel`` knob: every ``scaled_dot_product_attention`` call of
the module runs under ``sdpa_kernel`` with the one backend the knob names.

This is the runtime counterpart of the transformer family's ``attention`` arch parameter, for
models dse does not build (a ``module:function`` factory, a Hugging Face model): the weights stay
as trained and only the kernel changes, so no candidate retrains for it. A kernel that cannot run
raises (``sdpa_kernel`` with one backend allows no other), and a knob that would change nothing
is refused when the runner is compiled (:func:`check_module_honours`): a model that never calls
``scaled_dot_product_attention``, or one that picks its own kernel inside (the family's
``attention: math|flash|efficient``), would otherwise be measured as if the knob applied.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from dse.core import BuildError

if TYPE_CHECKING:
    import torch

KNOB = "attention_kernel"
# "default" leaves torch's own choice (no sdpa_kernel context): the knob's absence.
ATTENTION_KERNELS = ("default", "math", "flash", "efficient")
# Kernels torch (2.13) has no implementation of on a device kind: refused before anything is built.
MISSING_ON = {"efficient": frozenset({"cpu"})}


def attention_kernel(knobs: Mapping[str, Any]) -> str:
    """The knob's value, checked; BuildError naming the allowed values."""
    value = knobs.get(KNOB, "default")
    if not isinstance(value, str) or value not in ATTENTION_KERNELS:
        raise BuildError(f"knob {KNOB!r} must be one of {list(ATTENTION_KERNELS)}, got {value!r}")
    return value


def check_kernel_device(knobs: Mapping[str, Any], device_kind: str) -> None:
    """BuildError when the knob names a kernel torch has none of on ``device_kind``."""
    kernel = attention_kernel(knobs)
    if device_kind in MISSING_ON.get(kernel, ()):
        runs = [k for k in ATTENTION_KERNELS if device_kind not in MISSING_ON.get(k, ())]
        raise BuildError(f"knob {KNOB!r} {kernel!r}: torch has no {kernel} SDPA kernel for a "
                         f"{device_kind} device (it is CUDA-only); allowed there: {', '.join(runs)}")


def _backend(kernel: str) -> Any:
    from torch.nn.attention import SDPBackend

    return {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}[kernel]


def kernel_context(kernel: str) -> contextlib.AbstractContextManager[object]:
    """``sdpa_kernel`` restricted to ``kernel``'s backend; a no-op context for "default" (entered
    on every timed call of a torch runner: no generator, no torch import)."""
    if kernel == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import sdpa_kernel

    return sdpa_kernel(_backend(kernel))


def _enabled_backends() -> tuple[bool, bool, bool]:
    import torch

    # torch.backends.cuda holds the global SDPA flags for every device, the CPU's too.
    flags: Any = torch.backends.cuda
    return (bool(flags.math_sdp_enabled()), bool(flags.flash_sdp_enabled()),
            bool(flags.mem_efficient_sdp_enabled()))


def check_module_honours(module: Callable[[torch.Tensor], torch.Tensor], example: torch.Tensor,
                         kernel: str) -> None:
    """Run ``module`` once on ``example`` under the knob's kernel and refuse (BuildError) a knob
    that changes nothing: no ``scaled_dot_product_attention`` call, or a call made under other
    enabled backends than the knob's (the model set its own ``sdpa_kernel`` inside)."""
    import torch
    from torch.nn import functional
    from torch.overrides import TorchFunctionMode

    seen: list[tuple[bool, bool, bool]] = []

    class _Watch(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            if func is functional.scaled_dot_product_attention:
                seen.append(_enabled_backends())
            return func(*args, **(kwargs or {}))

    with torch.inference_mode(), kernel_context(kernel):
        wanted = _enabled_backends()
        with _Watch():
            module(example)
    if not seen:
        raise BuildError(f"knob {KNOB!r} {kernel!r} would change nothing: the model calls no "
                         f"torch.nn.functional.scaled_dot_product_attention")
    if any(flags != wanted for flags in seen):
        raise BuildError(f"knob {KNOB!r} {kernel!r} would change nothing: the model chooses its "
                         f"own SDPA kernel (an sdpa_kernel context inside its forward, as the "
                         f"transformer family's attention arch parameter does); set one or the "
                         f"other")
