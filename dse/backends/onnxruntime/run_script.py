# run.py's model loader for the ONNX Runtime backends (CPU, CUDA and TensorRT execution
# providers): the session made as dse made it, from the settings recorded at export.

import contextlib
from typing import Any

GRAPH_OPTIMIZATION_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
                             "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}


def load(settings, folder):  # type: ignore[no-untyped-def]
    """A function of one batch: the model's first output, from an ``InferenceSession`` with the
    recorded threads, graph optimisation level and execution providers."""
    import numpy as np
    import onnxruntime as ort

    knobs = settings["knobs"]
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(knobs.get("intra_op_threads", settings["threads"]))
    options.inter_op_num_threads = int(knobs.get("inter_op_threads", 1))
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    level = GRAPH_OPTIMIZATION_LEVELS[knobs.get("graph_optimization_level", "all")]
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    providers = [(name, dict(options_)) for name, options_ in settings["providers"]]
    if any(name == "TensorrtExecutionProvider" for name, _ in providers):
        # The tensorrt wheels' libnvinfer, loaded before ORT's TensorRT provider looks for it; a
        # system TensorRT (JetPack) is found by the dynamic loader instead.
        with contextlib.suppress(ImportError):
            __import__("tensorrt")
    session = ort.InferenceSession(str(folder / settings["model_file"]), sess_options=options,
                                   providers=providers)
    name = session.get_inputs()[0].name
    output = session.get_outputs()[0].name
    if providers and providers[0][1].get("enable_cuda_graph") == "1":
        return _cuda_graph_run(ort, np, session, settings)

    def run(x):  # type: ignore[no-untyped-def]
        return session.run([output], {name: np.ascontiguousarray(x, dtype=np.float32)})[0]

    return run


def _cuda_graph_run(ort: Any, np: Any, session: Any, settings: dict[str, Any]) -> Any:
    """CUDA graphs replay fixed device addresses: the input and output are bound once to device
    buffers, and each call copies the batch in and the output back."""
    shape = (int(settings["batch_size"]), *settings["input_shape"])
    out_shape = (shape[0], *session.get_outputs()[0].shape[1:])
    device_in = ort.OrtValue.ortvalue_from_shape_and_type(shape, np.float32, "cuda", 0)
    device_out = ort.OrtValue.ortvalue_from_shape_and_type(out_shape, np.float32, "cuda", 0)
    binding = session.io_binding()
    binding.bind_ortvalue_input(session.get_inputs()[0].name, device_in)
    binding.bind_ortvalue_output(session.get_outputs()[0].name, device_out)

    def run(x: Any) -> Any:
        device_in.update_inplace(np.ascontiguousarray(x, dtype=np.float32))
        session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()[0]

    run(np.zeros(shape, dtype=np.float32))  # at load: ORT captures after its warm-up runs
    return run
