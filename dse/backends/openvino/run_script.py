# run.py's model loader for the OpenVINO backend: the ONNX file read by OpenVINO, reshaped to the
# batch size it was measured at (static shapes) and compiled for the recorded device with the
# recorded properties (inference precision hint, threads, performance hint, streams).


def load(settings, folder):  # type: ignore[no-untyped-def]
    """A function of one batch: the model's output, from one infer request of the compiled
    model (input shared, not copied; output copied out of the request's buffer)."""
    import numpy as np
    import openvino

    core = openvino.Core()
    model = core.read_model(str(folder / settings["model_file"]))
    model.reshape({0: [int(settings["batch_size"]), *settings["input_shape"]]})
    compiled = core.compile_model(model, settings["device"], dict(settings["properties"]))
    request = compiled.create_infer_request()
    output = request.get_output_tensor(0).data

    def run(x):  # type: ignore[no-untyped-def]
        request.start_async({0: np.ascontiguousarray(x, dtype=np.float32)}, share_inputs=True)
        request.wait()
        return np.array(output, dtype=np.float32)

    return run
