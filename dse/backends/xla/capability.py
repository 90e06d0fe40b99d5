"""Where XLA (through jax) deploys a precision, and why not elsewhere: the XLA backend's
capability entries."""

from __future__ import annotations

from dse.backends.capabilities import BF16_CC
from dse.plugins import Capability


def xla_capability(precision: str, kind: str) -> Capability:
    if precision == "int8":
        return Capability(False, "dse's int8 artifact is a QDQ graph: XLA would run its Quantize/"
                                 "DequantizeLinear pairs as float arithmetic, with no int8 kernels: "
                                 "an fp32 model with extra work, not an int8 deployment; use "
                                 "onnxruntime or tensorrt for int8", "an int8-aware runtime")
    if precision == "fp8":
        return Capability(False, "XLA would run fp8 Q/DQ as float arithmetic; fp8 runs on TensorRT "
                                 "(tensorrt backend)", "a GPU with fp8 tensor cores")
    if kind == "jetson":
        return Capability(False, "jax's CUDA wheels are built for x86-64 and server ARM (SBSA) "
                                 "CUDA, not for JetPack's L4T, and NVIDIA ships no JetPack jax: "
                                 "there is no XLA to deploy to a Jetson", "a JetPack build of jax")
    if kind == "cuda":
        floor = BF16_CC if precision == "bf16" else None
        needs = "jax with its CUDA plugin (pip install 'jax[cuda12]')"
        if floor is not None:
            needs += f", on a CUDA device with compute capability >= {floor} for bf16"
        return Capability(True, f"XLA (jax) on the CUDA GPU, {precision}", needs, floor)
    if precision == "fp32":
        return Capability(True, "XLA (jax) CPU backend, fp32", "jax and jaxlib")
    # Measured (jax 0.10.2, x86 with AVX512-FP16 and AMX-BF16): the graph lowers and agrees with
    # fp32 within fp16/bf16 rounding, but every Conv and dot in the optimised HLO is f32, with
    # converts around it (the shipped CNN: fp16 0.348 ms, bf16 0.782 ms, fp32 0.337 ms).
    return Capability(False, f"XLA's CPU backend computes {precision} Conv and dot in fp32, "
                             f"converting around them: an fp32 model with extra work, not a "
                             f"{precision} deployment; use torch for {precision} on a CPU",
                      f"an XLA backend with {precision} kernels (a GPU)")
