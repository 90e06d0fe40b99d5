"""Eager PyTorch running a generative language model: the loaded module at the candidate's
precision (a cast copy, or the shared fp32 module itself), greedy decode over transformers' own
KV cache (:func:`dse.backends.torch.generation.greedy_stream`)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.artifacts import TORCH_DTYPES
from dse.backends.base import default_threads, thread_knob
from dse.backends.generation_runner import GenerationRunner
from dse.backends.torch.common import torch_capability
from dse.backends.torch.generation import cache_nbytes, greedy_stream
from dse.backends.weight_formats import weight_knobs
from dse.core import BuildError
from dse.plugins import Capability

if TYPE_CHECKING:
    from dse.backends.base import Backend
    from dse.models import LanguageModel
    from dse.spec import HardwareProfile

# The torch knobs a generative model takes: the others shape a fixed-shape forward.
GENERATION_KNOBS = frozenset({"num_threads", "weights", "weight_group_size"})
#: Knobs only a generative model takes (a fixed-shape module refuses them).
GENERATION_ONLY_KNOBS = frozenset({"weights", "weight_group_size"})
def torch_generation_capability(precision: str, kind: str) -> Capability:
    """Eager torch runs a causal LM at the floating-point precisions it runs any module at; its
    weights may be int8 or int4 at any of them (the ``weights`` knob)."""
    if precision in ("int8", "fp8"):
        return Capability(False, "torch eager computes a generative model in fp32, bf16 or fp16; "
                                 "for integer weights keep one of those and set the knob "
                                 "weights: int8 or int4 (weight-only, through torchao)",
                          "a floating-point compute precision")
    return torch_capability("torch", precision, kind)


def compile_torch_generator(backend: Backend, model: LanguageModel, precision: str,
                            knobs: Mapping[str, Any], profile: HardwareProfile,
                            batch_size: int) -> TorchGenerationRunner:
    """The runner; BuildError for a knob a generative model does not take, a precision torch
    has no dtype for, or a CUDA device torch cannot see."""
    import torch

    backend.check_knob_values(knobs)
    refused = backend.declaration.kind_refusal(knobs, generative=True)
    if refused:
        raise BuildError(refused)
    weights, group = weight_knobs(knobs)
    if precision not in TORCH_DTYPES:
        raise BuildError(f"{backend.name} runs precisions {sorted(TORCH_DTYPES)}, got "
                         f"{precision!r}")
    threads = thread_knob(knobs, backend.thread_knob, default_threads(profile))
    device = "cpu" if profile.kind == "cpu" else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise BuildError(f"a {profile.kind} device needs a CUDA build of torch that sees a GPU; "
                         f"torch {torch.__version__} sees none")
    torch.set_num_threads(threads)
    dtype = getattr(torch, TORCH_DTYPES[precision])
    shared = device == "cpu" and dtype == torch.float32 and weights == "same"
    module = model.module if shared else copy.deepcopy(model.module).to(device=device,
                                                                        dtype=dtype)
    module.eval()
    described = {
        "backend": backend.name, "backend_version": torch.__version__, "device": device,
        "precision": precision, "threads": str(threads), "dtype": TORCH_DTYPES[precision],
        "mode": "eager", "kv_cache": "transformers DynamicCache", "weights": weights}
    if weights != "same":
        described.update(_quantize_weights(module, weights, group))
    runner = TorchGenerationRunner(module, batch_size, device, described)
    runner.weights_bytes = sum(tensor_nbytes(t) for t in module.parameters())
    runner.borrowed_bytes = (sum(tensor_nbytes(t) for t in [*module.parameters(),
                                                             *module.buffers()])
                             if shared else 0)
    return runner


def _quantize_weights(module: Any, weights: str, group: int) -> dict[str, str]:
    """Quantize ``module``'s linear layers' weights in place with torchao; what was done, as
    provenance. BuildError when torchao is absent or refuses the model (a group size that does
    not divide a layer's input width)."""
    import torch

    try:
        import torchao
        from torchao.quantization import Int8WeightOnlyConfig, IntxWeightOnlyConfig, quantize_
        from torchao.quantization.granularity import PerGroup
    except ImportError as exc:
        raise BuildError(f"weights: {weights} needs torchao (pip install 'dse[llm]'): "
                         f"{exc}") from exc
    config: Any = (Int8WeightOnlyConfig() if weights == "int8" else
                   IntxWeightOnlyConfig(weight_dtype=torch.int4,  # type: ignore[attr-defined]
                                        granularity=PerGroup(group)))
    try:
        quantize_(module, config)
    except (ValueError, AssertionError, RuntimeError) as exc:
        raise BuildError(f"torchao cannot quantize the weights to {weights}"
                         f"{f' in groups of {group}' if weights == 'int4' else ''}: "
                         f"{type(exc).__name__}: {' '.join(str(exc).split())}") from exc
    facts = {"weights_quantizer": f"torchao {torchao.__version__} {type(config).__name__}"}
    if weights == "int4":
        # torchao's CPU path keeps the 4-bit values unpacked, one per byte: weight_mb says so.
        facts.update(weight_group_size=str(group), weights_storage="int4 values in int8 bytes")
    return facts


def tensor_nbytes(tensor: Any) -> int:
    """Bytes a tensor holds: a quantized tensor subclass (torchao's) its inner tensors' (data,
    scales, zero points), which its own dtype and element size do not tell."""
    flatten = getattr(tensor, "__tensor_flatten__", None)
    if flatten is not None:
        names, _ = flatten()
        return sum(tensor_nbytes(getattr(tensor, name)) for name in names)
    return int(tensor.numel() * tensor.element_size())


class TorchGenerationRunner(GenerationRunner):
    """Greedy generation with a torch causal LM; every step's tokens are copied to the host
    before the step counts as done (what a server does to detokenize, and what makes the host
    clock's stamp a finished step on a GPU)."""

    def __init__(self, module: Any, batch_size: int, device: str,
                 described: dict[str, str]) -> None:
        self.module = module
        self.batch_size = batch_size
        self.device = device
        self.described = described

    def bound_stream(self, prompt_ids: np.ndarray,
                     output_tokens: int) -> Callable[[], Iterator[Any]]:
        import torch

        self.check_open()
        ids = torch.as_tensor(np.asarray(prompt_ids, dtype=np.int64), device=self.device)
        mask = torch.ones_like(ids)

        read: list[int] = []

        def keep(past: Any) -> None:
            read.append(cache_nbytes(past))
            self.cache_bytes = read[0]

        def stream() -> Iterator[Any]:
            self.check_open()
            # The cache's size is read after the binding's first request only (the warm-up one).
            for token in greedy_stream(self.module, ids, mask, output_tokens,
                                       on_done=None if read else keep):
                yield token.cpu()

        return stream

    def logits(self, ids: np.ndarray) -> np.ndarray:
        import torch

        self.check_open()
        with torch.inference_mode():
            tensor = torch.as_tensor(np.asarray(ids, dtype=np.int64), device=self.device)
            out = self.module(input_ids=tensor, use_cache=False)
            logits: np.ndarray = out.logits.float().cpu().numpy()
            return logits

    def close(self) -> None:
        super().close()
        self.module = None
