"""Which (backend, precision, device kind) combinations exist, and why the others do not.

Consulted before anything heavy is imported or built, so impossible candidates are never proposed
(search) and never built (farm). The key is (backend, precision, device kind) only: runtime knobs
(a torch.compile mode, a thread count) are validated by the backend when it compiles, and
``min_compute_capability`` is checked there too, because a profile does not name its GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product


@dataclass(frozen=True)
class Capability:
    """One entry of the table.

    Attributes:
        supported: whether dse can build and run the combination.
        reason: what runs it, or why nothing does; shown to the user as a trial's reason.
        requires: what the combination needs on the device (libraries, hardware features).
        min_compute_capability: the lowest CUDA compute capability it runs on; None where no
            GPU is involved or any CUDA GPU will do.
    """

    supported: bool
    reason: str
    requires: str = ""
    min_compute_capability: float | None = None


BACKEND_NAMES = ("onnxruntime", "torch", "torch_compile")
PRECISIONS = ("fp32", "fp16", "bf16", "int8")
DEVICE_KINDS = ("cpu", "cuda", "jetson")

# bf16 arithmetic arrived with Ampere (8.0); Triton, inductor's GPU code generator, needs Volta (7.0).
_BF16_CC = 8.0
_TRITON_CC = 7.0
_TORCH_FLOATS = ("fp32", "fp16", "bf16")
_TORCH_RUNS = {"torch": "eager PyTorch", "torch_compile": "torch.compile (inductor)"}


def _onnxruntime(precision: str, kind: str) -> Capability:
    if kind != "cpu":
        # The installed onnxruntime is the CPU build: on a GPU box it would measure the host CPU.
        return Capability(False, "dse has no CUDA runner for onnxruntime yet",
                          "onnxruntime-gpu with the CUDA or TensorRT execution provider")
    if precision == "fp32":
        return Capability(True, "ONNX Runtime CPU execution provider", "onnxruntime")
    if precision == "int8":
        return Capability(
            True, "ONNX Runtime static int8 quantization (QDQ) on the CPU execution provider",
            "onnxruntime (with its quantization tools)")
    return Capability(False, "dse builds no fp16/bf16 ONNX artifact yet (ONNX precision transforms "
                             "arrive with the TensorRT/CUDA providers)",
                      "an fp16/bf16 ONNX precision transform")


def _torch(backend: str, precision: str, kind: str) -> Capability:
    if precision == "int8":
        reason = ("torch eager int8 needs a quantized torch module; use onnxruntime for int8"
                  if backend == "torch" else
                  "torch.compile int8 needs a quantized torch module; use onnxruntime for int8")
        return Capability(False, reason, "a quantized torch module")
    runs = _TORCH_RUNS[backend]
    if kind == "cpu":
        needs = "torch" if backend == "torch" else "torch with inductor and a C++ compiler (gcc)"
        if precision == "bf16":
            needs += "; fast only on CPUs with AVX512-BF16 or AMX"
        elif precision == "fp16":
            needs += "; fast only on CPUs with AVX512-FP16 or AMX-FP16"
        return Capability(True, f"{runs} on the CPU, {precision}", needs)
    floor = _BF16_CC if precision == "bf16" else (_TRITON_CC if backend == "torch_compile" else None)
    gpu = "a CUDA build of torch" if kind == "cuda" else "a JetPack (CUDA) build of torch"
    if backend == "torch_compile":
        gpu += " with triton"
    if floor is not None:
        gpu += f", on a CUDA device with compute capability >= {floor}"
        if precision == "bf16":
            gpu += " for bf16"
    return Capability(True, f"{runs} on the {kind} GPU, {precision}", gpu, floor)


def _entry(backend: str, precision: str, kind: str) -> Capability:
    if backend == "onnxruntime":
        return _onnxruntime(precision, kind)
    return _torch(backend, precision, kind)


CAPABILITIES: dict[tuple[str, str, str], Capability] = {
    (backend, precision, kind): _entry(backend, precision, kind)
    for backend, precision, kind in product(BACKEND_NAMES, PRECISIONS, DEVICE_KINDS)
}


def supports(backend: str, precision: str, device_kind: str) -> tuple[bool, str]:
    """Whether ``backend`` can run ``precision`` on a ``device_kind`` device, and why (not)."""
    entry = CAPABILITIES.get((backend, precision, device_kind))
    if entry is None:
        return False, (f"no capability entry for {backend=}, {precision=}, {device_kind=}; "
                       f"known backends: {sorted({key[0] for key in CAPABILITIES})}, "
                       f"precisions: {sorted({key[1] for key in CAPABILITIES})}, "
                       f"device kinds: {sorted({key[2] for key in CAPABILITIES})}")
    return entry.supported, entry.reason
