# run.py's model loader for the torch backends (eager torch and torch.compile): the program saved
# with torch.export from the module as the runner computed with it (its device and dtype), called
# as the runner called it: under inference_mode, the SDPA kernel restriction and autocast, with
# torch's thread pool set, compiled with torch.compile or replayed from a CUDA graph as measured.

import contextlib
from collections.abc import Callable
from typing import Any

SDPA_BACKENDS = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}
# Eager calls on a side stream before a CUDA graph's capture (PyTorch's recipe).
CUDA_GRAPH_WARMUP_CALLS = 3


def load(settings: dict[str, Any], folder: Any) -> Callable[[Any], Any]:
    """A function of one batch: the exported module's float32 logits, computed on the recorded
    device, dtype, precision mode, SDPA kernel and threads (and compile mode or CUDA graph)."""
    import numpy as np
    import torch

    device = settings["device"]
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"this bundle runs on a CUDA GPU, but torch {torch.__version__} sees "
                         f"none (a CUDA build of torch and a visible GPU are needed)")
    kernel = settings["sdpa_kernel"]
    if device == "cpu" and kernel == "efficient":
        raise SystemExit("this bundle's model runs the 'efficient' SDPA kernel, which torch has "
                         "for CUDA devices only")
    dtype = getattr(torch, settings["dtype"])
    autocast = settings["precision_mode"] == "autocast" and settings["dtype"] != "float32"
    # "dtype" mode: the program's weights are already in the precision's dtype; inputs follow.
    feed_dtype = torch.float32 if settings["precision_mode"] == "autocast" else dtype
    torch.set_num_threads(int(settings["threads"]))
    module: Any = torch.export.load(str(folder / settings["model_file"])).module()

    def context(cache: bool = True) -> contextlib.ExitStack[Any]:
        stack = contextlib.ExitStack()
        stack.enter_context(torch.inference_mode())
        if kernel != "default":
            from torch.nn.attention import SDPBackend, sdpa_kernel

            stack.enter_context(sdpa_kernel(getattr(SDPBackend, SDPA_BACKENDS[kernel])))
        stack.enter_context(torch.autocast(device, dtype, enabled=autocast, cache_enabled=cache))
        return stack

    shape = (int(settings["batch_size"]), *settings["input_shape"])
    mode = settings.get("compile_mode")
    if mode is not None:
        # Specialised to the batch size, like the runner; its first call compiles.
        module = torch.compile(module, mode=mode, dynamic=False)
        with context():
            module(torch.zeros(shape, device=device, dtype=feed_dtype))
    if settings.get("cuda_graph"):
        return _graph_replay(torch, module, context, shape, feed_dtype)

    def run(x: Any) -> Any:
        batch = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
        with context():
            logits = module(batch.to(device, feed_dtype))
            if device == "cuda":
                torch.cuda.synchronize()
            return logits.to("cpu", torch.float32).numpy()

    return run


def _graph_replay(torch: Any, module: Any, context: Callable[..., Any], shape: tuple[int, ...],
                  feed_dtype: Any) -> Callable[[Any], Any]:
    """The module's forward captured in a CUDA graph at the batch size and replayed per call."""
    static_in = torch.zeros(shape, device="cuda", dtype=feed_dtype)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    # Autocast's weight cache must be off while capturing (PyTorch's CUDA-graph notes).
    with torch.cuda.stream(side), context(cache=False):
        for _ in range(CUDA_GRAPH_WARMUP_CALLS):
            module(static_in)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with context(cache=False), torch.cuda.graph(graph):
        static_out = module(static_in)
    torch.cuda.synchronize()

    def run(x: Any) -> Any:
        with torch.inference_mode():
            static_in.copy_(torch.from_numpy(x))
            graph.replay()
            return static_out.to("cpu", torch.float32).numpy()

    return run
