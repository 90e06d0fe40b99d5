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
from dse.core import BuildError
from dse.plugins import Capability

if TYPE_CHECKING:
    from dse.backends.base import Backend
    from dse.models import LanguageModel
    from dse.spec import HardwareProfile

# The torch knobs a generative model takes: the others shape a fixed-shape forward.
GENERATION_KNOBS = frozenset({"num_threads"})


def torch_generation_capability(precision: str, kind: str) -> Capability:
    """Eager torch runs a causal LM at the floating-point precisions it runs any module at."""
    if precision in ("int8", "fp8"):
        return Capability(False, f"torch eager has no {precision} path for a generative model in "
                                 f"dse (weight-only int8/int4 through torchao is not built yet)")
    return torch_capability("torch", precision, kind)


def compile_torch_generator(backend: Backend, model: LanguageModel, precision: str,
                            knobs: Mapping[str, Any], profile: HardwareProfile,
                            batch_size: int) -> TorchGenerationRunner:
    """The runner; BuildError for a knob a generative model does not take, a precision torch
    has no dtype for, or a CUDA device torch cannot see."""
    import torch

    backend.check_knob_values(knobs)
    extra = sorted(set(knobs) - GENERATION_KNOBS)
    if extra:
        raise BuildError(f"knob(s) {extra} of backend {backend.name!r} are not for a generative "
                         f"model; it takes {sorted(GENERATION_KNOBS)}")
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
    shared = device == "cpu" and dtype == torch.float32
    module = model.module if shared else copy.deepcopy(model.module).to(device=device,
                                                                        dtype=dtype)
    module.eval()
    tensors = [*module.parameters(), *module.buffers()]
    runner = TorchGenerationRunner(module, batch_size, device, {
        "backend": backend.name, "backend_version": torch.__version__, "device": device,
        "precision": precision, "threads": str(threads), "dtype": TORCH_DTYPES[precision],
        "mode": "eager", "kv_cache": "transformers DynamicCache"})
    runner.weights_bytes = sum(t.numel() * t.element_size() for t in module.parameters())
    runner.borrowed_bytes = (sum(t.numel() * t.element_size() for t in tensors)
                             if shared else 0)
    return runner


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
        self._cache_bytes: int | None = None
        self._closed = False

    def bound_stream(self, prompt_ids: np.ndarray,
                     output_tokens: int) -> Callable[[], Iterator[Any]]:
        import torch

        self._check_open()
        ids = torch.as_tensor(np.asarray(prompt_ids, dtype=np.int64), device=self.device)
        mask = torch.ones_like(ids)

        def keep(past: Any) -> None:
            self._cache_bytes = cache_nbytes(past)

        def stream() -> Iterator[Any]:
            self._check_open()
            for token in greedy_stream(self.module, ids, mask, output_tokens, on_done=keep):
                yield token.cpu()

        return stream

    def logits(self, ids: np.ndarray) -> np.ndarray:
        import torch

        self._check_open()
        with torch.inference_mode():
            tensor = torch.as_tensor(np.asarray(ids, dtype=np.int64), device=self.device)
            out = self.module(input_ids=tensor, use_cache=False)
            logits: np.ndarray = out.logits.float().cpu().numpy()
            return logits

    def kv_cache_bytes(self) -> int | None:
        return self._cache_bytes

    def describe(self) -> dict[str, str]:
        return dict(self.described)

    def close(self) -> None:
        self._closed = True
        self.module = None

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the generation runner is closed")
