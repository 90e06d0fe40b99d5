"""Which kernels OpenVINO ran, read from a profiled inference, and the check that the compute ran
at the precision a candidate asked for.

OpenVINO takes a precision as a hint and is free to keep any node in f32: a CPU without bf16 units,
an int8 Q/DQ pattern its low-precision transformations do not match (activations with non-zero
zero points in s8, measured below) or an operator without a low-precision kernel all end in f32
kernels, with nothing said. Each profiled node's ``exec_type`` names the kernel and, after its
last underscore, the precision it computed in (``brgconv_avx512_amx_1x1_bf16``, ``jit_avx512_i8``,
``gemm_mlas_f32``); a compute node (convolution, fully connected, matmul) in any other precision
makes the build fail instead of a float measurement being filed under the asked precision.

Measured (openvino 2026.4.1, Sapphire Rapids, dse's test cnn): the QDQ graph with asymmetric s8
activations ran every convolution in f32 (``brgconv_avx512_1x1_f32``, zero points subtracted in
f32 beforehand); with symmetric activations every convolution ran in int8 on AMX
(``brgconv_avx512_amx_1x1_i8``). Hence the backend's ``int8_symmetric=True``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dse.core import BuildError

# Node types (as OpenVINO's CPU plugin names them after its transformations; prefixes, since the
# quantized forms get suffixes such as ``FullyConnectedQuantizedLegacy``) that carry the model's
# arithmetic: the nodes whose precision is the candidate's precision.
COMPUTE_NODE_PREFIXES = ("Convolution", "GroupConvolution", "FullyConnected", "MatMul",
                         "Deconvolution", "ConvolutionBackpropData", "GroupConvolutionBackpropData")
# dse precision -> the exec_type precisions that count as running it.
KERNEL_PRECISIONS: dict[str, frozenset[str]] = {
    "fp32": frozenset({"f32"}),
    "bf16": frozenset({"bf16"}),
    "fp16": frozenset({"f16"}),
    "int8": frozenset({"i8", "u8"}),
}
# Failing nodes named in a message, at most.
_NAMED = 4


@dataclass(frozen=True)
class Kernel:
    """One executed node of a profiled inference."""

    node: str
    node_type: str
    exec_type: str

    @property
    def precision(self) -> str:
        """The precision the kernel computed in: ``exec_type``'s last ``_`` field, in lower case
        (the CPU plugin writes ``brgconv_avx512_amx_1x1_i8`` on Sapphire Rapids and
        ``brgconv_avx512_I8`` on AMD EPYC, both openvino 2026.4)."""
        return self.exec_type.rsplit("_", 1)[-1].lower()

    @property
    def computes(self) -> bool:
        return self.node_type.startswith(COMPUTE_NODE_PREFIXES)


def executed_kernels(profiling_info: Iterable[Any]) -> list[Kernel]:
    """The nodes an ``InferRequest.profiling_info`` (``openvino.ProfilingInfo`` entries) lists as
    executed: fused and optimised-out nodes are listed too, as NOT_RUN or OPTIMIZED_OUT."""
    return [Kernel(str(entry.node_name), str(entry.node_type), str(entry.exec_type))
            for entry in profiling_info if entry.status == entry.Status.EXECUTED]


def precision_counts(kernels: Sequence[Kernel]) -> str:
    """Executed nodes per precision, most first: ``"bf16=12,f32=3"`` (describe()'s
    ``nodes_by_precision``)."""
    counts = Counter(kernel.precision for kernel in kernels)
    return ",".join(f"{name}={count}" for name, count in
                    sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def compute_kernel_counts(kernels: Sequence[Kernel]) -> str:
    """The compute nodes' kernels with their counts (``"brgconv_avx512_amx_1x1_bf16=5,..."``):
    which instruction set did the arithmetic (AMX, AVX-512, VNNI)."""
    counts = Counter(kernel.exec_type for kernel in kernels if kernel.computes)
    return ",".join(f"{name}={count}" for name, count in
                    sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def check_kernel_precision(kernels: Sequence[Kernel], precision: str, device: str) -> None:
    """BuildError, in one line, unless every compute node ran at ``precision`` (or, for a graph
    without compute nodes, at least one node did)."""
    wanted = KERNEL_PRECISIONS[precision]
    if not kernels:
        raise BuildError(f"openvino: the profiled inference on {device} listed no executed "
                         f"nodes, so the {precision} kernels cannot be checked")
    compute = [kernel for kernel in kernels if kernel.computes]
    if not compute:
        if not any(kernel.precision in wanted for kernel in kernels):
            raise BuildError(f"openvino: asked for {precision} on {device}, yet no node ran at it "
                             f"(nodes by precision: {precision_counts(kernels)})")
        return
    strays = [kernel for kernel in compute if kernel.precision not in wanted]
    if strays:
        named = ", ".join(f"{kernel.node} ({kernel.exec_type})" for kernel in strays[:_NAMED])
        more = f" and {len(strays) - _NAMED} more" if len(strays) > _NAMED else ""
        raise BuildError(f"openvino: asked for {precision} on {device}, yet {len(strays)} of "
                         f"{len(compute)} compute nodes ran in other precisions: {named}{more}; "
                         f"not measured as {precision}")
