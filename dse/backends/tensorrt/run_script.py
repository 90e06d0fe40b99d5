# run.py's model loader for the TensorRT backend: the engine built from the bundle's ONNX file with
# the builder settings it was measured with (network and precision flags as resolved for that
# TensorRT release, TF32, workspace, optimization level, builder threads, the optimization profile
# of batch 1 up to the measured batch size), then run through the name-based I/O API with device
# buffers and the CUDA stream from torch, as dse runs it (replayed from a CUDA graph where it was).
# An engine only runs on the GPU model and TensorRT release that built it, so the bundle carries
# the ONNX file and run.py builds its engine at start: seconds to minutes.

import importlib
from collections.abc import Callable
from typing import Any

# TensorRT I/O data types (DataType member names) and the torch dtype that holds each.
TORCH_DTYPES = {"FLOAT": "float32", "HALF": "float16", "BF16": "bfloat16", "INT8": "int8",
                "UINT8": "uint8", "INT32": "int32", "INT64": "int64", "BOOL": "bool"}


def load(settings: dict[str, Any], folder: Any) -> Callable[[Any], Any]:
    """A function of one batch: the engine's output for it, copied back to the host."""
    import numpy as np
    import torch

    trt = importlib.import_module("tensorrt")  # no type stubs: Any

    if not torch.cuda.is_available():
        raise SystemExit(f"this bundle runs a TensorRT engine on a CUDA GPU, but torch "
                         f"{torch.__version__} sees none")
    recorded = str(settings["tensorrt_version"]).split(".")[0]
    if str(trt.__version__).split(".")[0] != recorded:
        print(f"warning: measured with TensorRT {settings['tensorrt_version']}, running "
              f"{trt.__version__}: its flags {settings['network_flags']} "
              f"{settings['precision_flags']} may not apply")
    logger = trt.Logger(trt.Logger.WARNING)
    engine = _build(trt, logger, settings, folder)
    inputs: list[str] = []
    outputs: list[str] = []
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        (inputs if is_input else outputs).append(name)
    if len(inputs) != 1 or len(outputs) != 1:
        raise SystemExit(f"the engine has inputs {inputs} and outputs {outputs}; run.py runs "
                         f"one of each")
    batch = int(settings["batch_size"])
    shape = tuple(settings["input_shape"])

    def dtype(name: str) -> Any:
        member = engine.get_tensor_dtype(name)
        return getattr(torch, TORCH_DTYPES[getattr(member, "name", str(member).split(".")[-1])])

    context = engine.create_execution_context()
    stream: Any = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    device_in = torch.empty((batch, *shape), dtype=dtype(inputs[0]), device="cuda")
    if not context.set_input_shape(inputs[0], (batch, *shape)):
        raise SystemExit(f"TensorRT refused batch {batch} for input {inputs[0]!r}")
    device_out = torch.empty(tuple(context.get_tensor_shape(outputs[0])),
                             dtype=dtype(outputs[0]), device="cuda")
    context.set_tensor_address(inputs[0], device_in.data_ptr())
    context.set_tensor_address(outputs[0], device_out.data_ptr())

    def enqueue() -> None:
        if not context.execute_async_v3(stream.cuda_stream):
            raise RuntimeError("TensorRT execute_async_v3 failed")

    graph: Any = None
    if settings["cuda_graph"]:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream):
            enqueue()  # TensorRT's deferred shape work, outside the graph
            stream.synchronize()
            with torch.cuda.graph(graph, stream=stream):
                enqueue()

    def run(x: Any) -> Any:
        feed = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
        with torch.cuda.stream(stream):
            device_in.copy_(feed)
            if graph is not None:
                graph.replay()
            else:
                enqueue()
            logits = device_out.to("cpu", torch.float32)
        stream.synchronize()
        return logits.numpy()

    return run


def _build(trt: Any, logger: Any, settings: dict[str, Any], folder: Any) -> Any:
    """The deserialized engine, built from the ONNX file with the recorded builder settings."""
    builder = trt.Builder(logger)
    builder.max_threads = int(settings["builder_threads"])
    bits = 0
    for name in settings["network_flags"]:
        bits |= 1 << int(getattr(trt.NetworkDefinitionCreationFlag, name))
    network = builder.create_network(bits)
    parser = trt.OnnxParser(network, logger)
    path = folder / settings["model_file"]
    if not parser.parse_from_file(str(path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise SystemExit(f"TensorRT's ONNX parser cannot load {path.name}: {errors}")
    config = builder.create_builder_config()
    if settings["workspace_mb"] is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE,
                                     int(settings["workspace_mb"]) << 20)
    config.builder_optimization_level = int(settings["builder_optimization_level"])
    if not settings["tf32"]:
        config.clear_flag(trt.BuilderFlag.TF32)
    for name in settings["precision_flags"]:
        config.set_flag(getattr(trt.BuilderFlag, name))
    tensor = network.get_input(0)
    sample = tuple(settings["input_shape"])
    low, opt, high = (int(b) for b in settings["profile_batches"])
    profile = builder.create_optimization_profile()
    profile.set_shape(tensor.name, (low, *sample), (opt, *sample), (high, *sample))
    config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise SystemExit(f"TensorRT could not build an engine from {path.name} (see its log "
                         f"above)")
    engine = trt.Runtime(logger).deserialize_cuda_engine(serialized)
    if engine is None:
        raise SystemExit("TensorRT could not load the engine it built")
    return engine
