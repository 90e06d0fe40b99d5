"""Eager PyTorch: the trained module itself, in fp32, fp16 or bf16, on the CPU or a CUDA GPU."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dse.backends._torch_common import (
    TorchRunner,
    borrowed_bytes,
    check_torch_knobs,
    place_module,
    resolve_placement,
    settings,
    torch_capability,
)
from dse.backends.base import Backend, Runner
from dse.backends.registry import register_backend
from dse.parts.backends import BackendDeclaration

if TYPE_CHECKING:
    from dse.build import Artifact
    from dse.spec import HardwareProfile


@register_backend
class TorchEagerBackend(Backend):
    """Runs the trained module as it is, at the artifact's precision.

    Knobs: ``num_threads`` (default: the profile's ``max_threads``, else every core) is set once,
    here in ``compile``, not before every ``run``: torch's intra-op pool is process-wide, the
    device worker runs one runner at a time and compiles right before measuring, and a call per
    run would add its own cost to every timed iteration. ``precision_mode`` ("dtype", default:
    module and inputs cast to the precision's dtype; "autocast": the fp32 module under
    ``torch.autocast``) chooses how fp16/bf16 are applied.
    """

    declaration = BackendDeclaration(
        name="torch", artifact_format="torch",
        capability=functools.partial(torch_capability, "torch"),
        knobs=frozenset({"num_threads", "precision_mode"}), thread_knob="num_threads",
        libraries=("torch",), extra="torch",
        summary="eager PyTorch")

    def check_knob_values(self, knobs: Mapping[str, Any]) -> None:
        check_torch_knobs(self, knobs)

    def compile(self, artifact: Artifact, knobs: Mapping[str, Any], profile: HardwareProfile,
                batch_size: int) -> Runner:
        placement = resolve_placement(self, artifact, knobs, profile)
        module = place_module(artifact, placement)
        runner = TorchRunner(module, placement, batch_size,
                             {**settings(self.name, placement), "mode": "eager"})
        runner.borrowed_bytes = borrowed_bytes(module, artifact)
        return runner
