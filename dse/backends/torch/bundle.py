"""What a torch bundle's ``run.py`` loads (``dse export``): the module as the runner computed with
it, saved with ``torch.export``, and the settings that apply around each call.

The torch artifact has no file: it is the trained fp32 module, which each runner converts to its
placement (:func:`dse.backends.torch.common.placed_module`). The bundle's program is exported
from that placed module, on the runner's device and in its dtype, at the candidate's batch size
(the shapes the runner ran): a program exported in fp32 and cast afterwards would keep any tensor
the forward makes with a dtype or device of its own (``torch.zeros(..., dtype=x.dtype)``) as it
was traced, in float32 on the CPU. ``torch.export`` keeps the ATen operators the module calls
(``aten.linear``, ``aten.scaled_dot_product_attention``) rather than their kernels, so
``torch.autocast`` (``precision_mode: autocast``) and ``sdpa_kernel`` (the ``attention_kernel``
knob) still act on them at run time, as they did on the runner, and ``run.py`` applies them.

What the program loses is Python state the forward set around its own calls: an ``sdpa_kernel``
context inside the model (the transformer family's ``attention`` arch parameter) is not in the
graph. So the model is run once under a watch first, and the one SDPA kernel it restricts its
calls to is recorded for ``run.py`` to restore; a model that restricts different calls to
different kernels cannot be exported that way and is a BuildError.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from dse.backends.base import Runner, first_error_line
from dse.backends.bundle_extras import BundleExtras
from dse.backends.torch.common import TorchRunner, input_dtype, placed_module
from dse.core import BuildError

if TYPE_CHECKING:
    import torch

    from dse.artifacts import Artifact

# The bundle's program file, under its model/ folder.
PROGRAM = "model.pt2"
# SDPA backends in the order torch.backends.cuda reports their flags (math, flash, efficient).
_KERNELS = ("math", "flash", "efficient")


def torch_bundle_extras(runner: Runner, artifact: Artifact, backend: str,
                        **settings: Any) -> BundleExtras:
    """The runner's module exported (:data:`PROGRAM`) and the settings ``run.py`` applies around
    it: device, dtype, precision mode and the SDPA kernel; ``settings`` adds the backend's own
    (torch.compile's mode, eager torch's CUDA graph)."""
    import torch

    if not isinstance(runner, TorchRunner) or artifact.module is None:
        raise BuildError(f"{backend} exports the runners it compiled from a torch module, got a "
                         f"{type(runner).__name__} for a {artifact.format!r} artifact")
    place = runner.placement
    module = placed_module(artifact, place)
    example = torch.zeros((runner.batch_size, *artifact.input_shape), device=place.device,
                          dtype=getattr(torch, input_dtype(place)))
    kernel = runner.kernel if runner.kernel != "default" else _own_kernel(module, example)
    try:
        program = torch.export.export(module, (example,))
        buffer = io.BytesIO()
        torch.export.save(program, buffer)
    # Export fails in many ways (data-dependent control flow, unsupported Python, an op without
    # a meta kernel), with torch's own exception types; each is reported in one line.
    except Exception as exc:
        raise BuildError(f"{backend}: torch.export could not export the module at batch "
                         f"{runner.batch_size} ({place.precision}, {place.device}) for the "
                         f"bundle: {type(exc).__name__}: {first_error_line(exc)}") from exc
    return BundleExtras(
        settings={"device": place.device, "dtype": place.dtype,
                  "precision_mode": place.precision_mode, "sdpa_kernel": kernel, **settings},
        files={PROGRAM: buffer.getvalue()}, model_file=PROGRAM)


def _own_kernel(module: torch.nn.Module, example: torch.Tensor) -> str:
    """The SDPA kernel the model restricts its ``scaled_dot_product_attention`` calls to itself
    ("default" for none, or for a model that makes no such call); BuildError for a restriction
    ``run.py`` cannot restore around the whole forward."""
    import torch
    from torch.nn import functional
    from torch.overrides import TorchFunctionMode

    def enabled() -> tuple[bool, bool, bool]:
        # torch.backends.cuda holds the global SDPA flags for every device, the CPU's too.
        flags: Any = torch.backends.cuda
        return (bool(flags.math_sdp_enabled()), bool(flags.flash_sdp_enabled()),
                bool(flags.mem_efficient_sdp_enabled()))

    seen: set[tuple[bool, bool, bool]] = set()

    class _Watch(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            if func is functional.scaled_dot_product_attention:
                seen.add(enabled())
            return func(*args, **(kwargs or {}))

    outside = enabled()
    with torch.inference_mode(), _Watch():
        module(example)
    restricted = seen - {outside}
    if not restricted:
        return "default"
    kernels = [[name for name, on in zip(_KERNELS, flags, strict=True) if on]
               for flags in restricted]
    if len(seen) > 1 or len(kernels[0]) != 1:
        raise BuildError(f"the model restricts its scaled_dot_product_attention calls to "
                         f"{sorted('+'.join(k) or 'none' for k in kernels)} itself (sdpa_kernel "
                         f"inside its forward), which an exported program does not keep and "
                         f"run.py can only restore as one kernel around the whole forward")
    return kernels[0][0]
