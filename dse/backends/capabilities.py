"""Which (backend, precision, device kind) combinations exist, and why the others do not.

Consulted before anything heavy is imported or built, so impossible candidates are never proposed
(search) and never built (farm).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capability:
    supported: bool
    reason: str


_NO_GPU_RUNNER = ("dse has no {kind} runner for {backend} yet; its CPU-only build runs on the CPU "
                  "and would not measure the {kind} device")

CAPABILITIES: dict[tuple[str, str, str], Capability] = {
    ("onnxruntime", "fp32", "cpu"): Capability(True, "ONNX Runtime CPU execution provider"),
    ("onnxruntime", "int8", "cpu"): Capability(
        True, "ONNX Runtime static int8 quantization (QDQ) on the CPU execution provider"),
    ("torch", "fp32", "cpu"): Capability(True, "eager PyTorch on the CPU"),
    ("torch", "int8", "cpu"): Capability(
        False, "torch eager int8 needs a quantized torch module; use onnxruntime for int8"),
}
for _kind in ("cuda", "jetson"):
    for _backend in ("onnxruntime", "torch"):
        for _precision in ("fp32", "int8"):
            CAPABILITIES[(_backend, _precision, _kind)] = Capability(
                False, _NO_GPU_RUNNER.format(kind=_kind, backend=_backend))


def supports(backend: str, precision: str, device_kind: str) -> tuple[bool, str]:
    """Whether ``backend`` can run ``precision`` on a ``device_kind`` device, and why (not)."""
    entry = CAPABILITIES.get((backend, precision, device_kind))
    if entry is None:
        return False, (f"no capability entry for {backend=}, {precision=}, {device_kind=}; "
                       f"known backends: {sorted({key[0] for key in CAPABILITIES})}, "
                       f"precisions: {sorted({key[1] for key in CAPABILITIES})}, "
                       f"device kinds: {sorted({key[2] for key in CAPABILITIES})}")
    return entry.supported, entry.reason
