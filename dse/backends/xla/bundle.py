"""What an XLA bundle's ``run.py`` loads (``dse export``): the runner's jitted function,
serialised with ``jax.export`` (StableHLO, with the ONNX lowering, the depthwise rewrite and the
matmul precision baked in), so ``run.py`` needs jax alone, not dse's ONNX-to-jax lowering. XLA
compiles it again on the user's machine, with the runner's XLA options, on a CPU pool of the
runner's thread count. With ``weights: arguments`` the weights travel beside it (``.npz``) and are
passed on every call, as the runner passes them.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.backends.bundle_extras import BundleExtras
from dse.core import BuildError
from dse.plugins import Standalone

if TYPE_CHECKING:
    from dse.backends.xla.backend import XlaSettings
    from dse.backends.xla.lowering import LoweredGraph

# jax's Exported (de)serialisation imports flatbuffers, which jax does not declare.
XLA_STANDALONE = Standalone("dse.backends.xla.run_script", ("jax", "jaxlib", "flatbuffers", "numpy"))

# The bundle's files, under its model/ folder.
EXPORTED = "model.jax_exported"
WEIGHTS = "weights.npz"


def xla_bundle_extras(graph: LoweredGraph, weights: Mapping[str, Any] | None,
                      settings: XlaSettings, input_shape: tuple[int, ...],
                      platform: str) -> BundleExtras:
    """The serialised export of ``graph`` at ``input_shape`` (the batch's, batch included) for
    ``platform`` (``cpu`` or ``cuda``): its weights as constants, or as arguments when
    ``weights`` (the runner's device arrays) is given; matmul precision and XLA options from
    the runner's ``settings``."""
    import jax

    sample = jax.ShapeDtypeStruct(input_shape, np.float32)  # type: ignore[no-untyped-call]
    files: dict[str, bytes] = {}
    try:
        with jax.default_matmul_precision(settings.matmul_precision):
            if weights is None:
                fn = functools.partial(graph.forward, dict(graph.weights))
                exported = jax.export.export(jax.jit(fn), platforms=[platform])(sample)
            else:
                specs = {name: jax.ShapeDtypeStruct(value.shape, value.dtype)  # type: ignore[no-untyped-call]
                         for name, value in weights.items()}
                exported = jax.export.export(jax.jit(graph.forward),
                                             platforms=[platform])(specs, sample)
        files[EXPORTED] = bytes(exported.serialize())
    except Exception as exc:  # jax raises its own types for a function it cannot export
        raise BuildError(f"xla: jax.export could not serialise the runner's function: "
                         f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                         ) from exc
    if weights is not None:
        packed = io.BytesIO()
        # Positional names: the ONNX initializers' own names may hold characters a zip entry
        # should not; run.py rebuilds the dict from the recorded order.
        names = sorted(weights)
        np.savez(packed, *[np.asarray(weights[name]) for name in names])
        files[WEIGHTS] = packed.getvalue()
    return BundleExtras(
        settings={"matmul_precision": settings.matmul_precision,
                  "compiler_options": dict(settings.compiler_options),
                  "weight_names": sorted(weights) if weights is not None else []},
        files=files, model_file=EXPORTED)
