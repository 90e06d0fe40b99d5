# run.py's model loader for the LiteRT backend: the .tflite file in a LiteRT interpreter made as
# dse made it (its threads; the XNNPACK default delegate, or builtin kernels alone), an integer
# input quantized and an integer output dequantized with the tensors' own scale and zero point.


def load(settings, folder):  # type: ignore[no-untyped-def]
    """A function of one batch: the model's first output, from an ``Interpreter`` with the
    recorded ``num_threads`` and op resolver (``xnnpack`` knob, default true)."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    knobs = settings["knobs"]
    xnnpack = knobs.get("xnnpack", True)
    resolver = (OpResolverType.BUILTIN if xnnpack
                else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interpreter = Interpreter(model_path=str(folder / settings["model_file"]),
                              num_threads=int(knobs.get("num_threads", settings["threads"])),
                              experimental_op_resolver_type=resolver)
    interpreter.allocate_tensors()  # XNNPACK is applied here, as the default delegate
    source, result = interpreter.get_input_details()[0], interpreter.get_output_details()[0]

    # (scale, zero point) of an integer input or output (full-integer int8); None for a float one.
    quantize, dequantize = [
        (float(details["quantization"][0]), int(details["quantization"][1]))
        if np.issubdtype(np.dtype(details["dtype"]), np.integer) else None
        for details in (source, result)]
    dtype = np.dtype(source["dtype"])

    def run(x):  # type: ignore[no-untyped-def]
        feed = np.ascontiguousarray(x, dtype=np.float32)
        if quantize is not None:
            factor, zero = quantize
            info = np.iinfo(dtype)
            feed = np.clip(np.rint(feed / factor) + zero, info.min, info.max).astype(dtype)
        interpreter.set_tensor(source["index"], feed)
        interpreter.invoke()
        logits = interpreter.get_tensor(result["index"])
        if dequantize is not None:
            factor, zero = dequantize
            logits = (logits.astype(np.float32) - np.float32(zero)) * np.float32(factor)
        return logits

    return run
