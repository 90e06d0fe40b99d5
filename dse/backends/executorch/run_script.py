# run.py's model loader for the ExecuTorch backend: the .pte program's forward method loaded by
# ExecuTorch's Python runtime, on its process-wide thread pool sized as dse sized it (XNNPACK
# runs every delegate call on that pool; the pool is sized before the method is loaded, since
# each XNNPACK runtime keeps the pool it was created with).

# ScalarType codes of the program's input (c10's numbering) -> the numpy dtype fed to it.
INPUT_DTYPES = {6: "float32", 5: "float16"}


def load(settings, folder):  # type: ignore[no-untyped-def]
    """A function of one batch: the program's one output as float32, from its ``forward`` run on
    a thread pool of the recorded ``num_threads``."""
    import numpy as np
    import torch  # the runtime's tensors are torch tensors
    from executorch.extension.pybindings import portable_lib
    from executorch.runtime import Runtime

    threads = int(settings["knobs"].get("num_threads", settings["threads"]))
    if portable_lib._threadpool_get_thread_count() != threads:
        portable_lib._unsafe_reset_threadpool(threads)
    program = Runtime.get().load_program(folder / settings["model_file"])
    method = program.load_method("forward")
    code = program.metadata("forward").input_tensor_meta(0).dtype()
    if code not in INPUT_DTYPES:
        raise SystemExit(f"the program takes input of ScalarType {code}; run.py feeds "
                         f"{sorted(INPUT_DTYPES.values())}")
    dtype = np.dtype(INPUT_DTYPES[code])

    def run(x):  # type: ignore[no-untyped-def]
        feed = np.array(x, dtype=dtype)  # a writable copy: torch.from_numpy shares it
        return method.execute([torch.from_numpy(feed)])[0].float().numpy()

    return run
