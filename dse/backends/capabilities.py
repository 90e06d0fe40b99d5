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


BACKEND_NAMES = ("onnxruntime", "onnxruntime_cuda", "onnxruntime_tensorrt", "tensorrt", "torch",
                 "torch_compile")
PRECISIONS = ("fp32", "fp16", "bf16", "int8", "fp8")
DEVICE_KINDS = ("cpu", "cuda", "jetson")

# bf16 arithmetic arrived with Ampere (8.0); Triton, inductor's GPU code generator, needs Volta (7.0);
# fp8 tensor cores arrived with Ada/Hopper (8.9). Jetson Orin is 8.7: bf16 yes, fp8 no.
_BF16_CC = 8.0
_TRITON_CC = 7.0
_FP8_CC = 8.9
_TORCH_FLOATS = ("fp32", "fp16", "bf16")
_TORCH_RUNS = {"torch": "eager PyTorch", "torch_compile": "torch.compile (inductor)"}
_NO_GPU = "needs a CUDA device; a cpu profile has none"


def _gpu_runtime(kind: str, what: str) -> str:
    return f"{what} ({'JetPack build' if kind == 'jetson' else 'CUDA build'})"


def _onnxruntime(precision: str, kind: str) -> Capability:
    if kind != "cpu":
        return Capability(False, "the onnxruntime backend is ONNX Runtime's CPU execution provider: "
                                 "on a GPU device it would measure the host CPU; use "
                                 "onnxruntime_cuda or onnxruntime_tensorrt",
                          "a cpu device profile")
    if precision == "fp32":
        return Capability(True, "ONNX Runtime CPU execution provider", "onnxruntime")
    if precision == "int8":
        return Capability(
            True, "ONNX Runtime static int8 quantization (QDQ) on the CPU execution provider",
            "onnxruntime (with its quantization tools)")
    if precision == "fp8":
        return Capability(False, "CPUs have no fp8 arithmetic: ONNX Runtime's CPU provider would run "
                                 "fp8 Q/DQ as fp32; fp8 runs on TensorRT (tensorrt backend, compute "
                                 f"capability >= {_FP8_CC})", "a GPU with fp8 tensor cores")
    if precision == "fp16":
        # Measured (onnxruntime 1.32, x86): the fp16 graph loads, but ORT inserts casts and runs
        # every Conv/Gemm in fp32 — 1.9x slower than the fp32 graph, and not an fp16 result.
        return Capability(False, "ONNX Runtime's CPU execution provider has no fp16 Conv/Gemm "
                                 "kernels on x86: it inserts casts and computes in fp32; use torch "
                                 "for fp16 on a CPU", "an execution provider with fp16 kernels")
    return Capability(False, "ONNX Runtime's CPU execution provider has no bf16 Conv kernel (the "
                             "bf16 graph does not load); use torch for bf16 on a CPU",
                      "an execution provider with bf16 kernels")


def _onnxruntime_cuda(precision: str, kind: str) -> Capability:
    needs = _gpu_runtime(kind, "onnxruntime-gpu with the CUDA execution provider")
    if kind == "cpu":
        return Capability(False, f"onnxruntime_cuda {_NO_GPU}", needs)
    if precision in ("fp32", "fp16"):
        return Capability(True, f"ONNX Runtime CUDA execution provider, {precision} ONNX graph "
                                "(float32 inputs and outputs)", needs)
    if precision == "bf16":
        return Capability(False, "ONNX Runtime's CUDA execution provider has no bf16 Conv kernel; "
                                 "use tensorrt or torch for bf16", needs)
    return Capability(False, f"ONNX Runtime's CUDA execution provider runs {precision} Q/DQ "
                             "graphs dequantized in fp32; use onnxruntime_tensorrt or tensorrt for "
                             f"{precision}", needs)


def _onnxruntime_tensorrt(precision: str, kind: str) -> Capability:
    needs = _gpu_runtime(kind, "onnxruntime-gpu with the TensorRT execution provider and TensorRT")
    if kind == "cpu":
        return Capability(False, f"onnxruntime_tensorrt {_NO_GPU}", needs)
    if precision in ("fp32", "fp16"):
        return Capability(True, f"ONNX Runtime TensorRT execution provider, {precision}", needs)
    if precision == "int8":
        return Capability(True, "ONNX Runtime TensorRT execution provider, int8 from the Q/DQ graph "
                                "(explicit quantization)", needs)
    return Capability(False, f"dse does not build {precision} through ONNX Runtime's TensorRT "
                             f"provider; the tensorrt backend builds {precision} engines", needs)


def _tensorrt(precision: str, kind: str) -> Capability:
    needs = _gpu_runtime(kind, "TensorRT 10 or 11 (Python bindings) and torch with CUDA")
    if kind == "cpu":
        return Capability(False, f"tensorrt {_NO_GPU}", needs)
    if precision == "fp8":
        if kind == "jetson":
            return Capability(False, "Jetson GPUs (Orin: compute capability 8.7) have no fp8 tensor "
                                     f"cores; fp8 needs >= {_FP8_CC}", needs)
        return Capability(True, "TensorRT engine from the fp8 Q/DQ graph", needs + ", fp8 tensor cores",
                          _FP8_CC)
    floor = _BF16_CC if precision == "bf16" else None
    how = "from the int8 Q/DQ graph" if precision == "int8" else f"{precision}"
    return Capability(True, f"TensorRT engine, {how}", needs, floor)


def _torch(backend: str, precision: str, kind: str) -> Capability:
    if precision in ("int8", "fp8"):
        engine = "torch eager" if backend == "torch" else "torch.compile"
        return Capability(False, f"{engine} {precision} needs a quantized torch module; use "
                                 f"{'onnxruntime or ' if precision == 'int8' else ''}tensorrt for "
                                 f"{precision}", "a quantized torch module")
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
    if backend == "onnxruntime_cuda":
        return _onnxruntime_cuda(precision, kind)
    if backend == "onnxruntime_tensorrt":
        return _onnxruntime_tensorrt(precision, kind)
    if backend == "tensorrt":
        return _tensorrt(precision, kind)
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


def supports_device(backend: str, precision: str, device_kind: str,
                    compute_capability: float | None) -> tuple[bool, str]:
    """:func:`supports`, plus the entry's compute-capability floor when the device's profile
    names its GPU's compute capability (a profile that does not is checked when compiling)."""
    ok, reason = supports(backend, precision, device_kind)
    floor = CAPABILITIES[backend, precision, device_kind].min_compute_capability if ok else None
    if floor is not None and compute_capability is not None and compute_capability < floor:
        return False, (f"{backend} {precision} needs compute capability >= {floor:g}; the device's "
                       f"GPU has {compute_capability:g}")
    return ok, reason
