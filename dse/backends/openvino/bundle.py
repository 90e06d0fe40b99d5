"""What an OpenVINO bundle's ``run.py`` needs beyond the ONNX artifact and the knobs (``dse
export``): the device and the compile properties the runner was compiled with, as
:mod:`dse.backends.openvino.backend` resolved them (the precision's ``INFERENCE_PRECISION_HINT``, threads,
performance hint and streams, less those the device's plugin does not have), so ``run.py``
passes them to ``compile_model`` as they are rather than deciding them again."""

from __future__ import annotations

from dse.backends.base import Runner
from dse.backends.bundle_extras import BundleExtras
from dse.core import BuildError


def openvino_bundle_extras(runner: Runner) -> BundleExtras:
    """The device and compile properties of an OpenVINO runner (its ``properties``)."""
    properties = getattr(runner, "properties", None)
    if properties is None:
        raise BuildError(f"openvino exports the runners it compiled, got a "
                         f"{type(runner).__name__} without its compile properties")
    device, config = properties
    return BundleExtras(settings={"device": device, "properties": dict(config)})
