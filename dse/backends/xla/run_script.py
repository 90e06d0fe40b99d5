# run.py's model loader for the XLA backend: the runner's jitted function as jax.export
# serialised it, compiled by XLA with the runner's XLA options on a CPU pool of the recorded
# thread count (XLA sizes its CPU client's pool from $NPROC when the client is made).


def load(settings, folder):  # type: ignore[no-untyped-def]
    """A function of one batch: the exported function's output, compiled for jax's default
    device (the CPU, or a GPU where jax's CUDA plugin is installed and the export was for it)."""
    import os

    os.environ["NPROC"] = str(int(settings["knobs"].get("num_threads", settings["threads"])))
    import jax
    import numpy as np

    exported = jax.export.deserialize(
        bytearray((folder / settings["model_file"]).read_bytes()))
    sample = np.zeros((settings["batch_size"], *settings["input_shape"]), np.float32)
    options = settings["compiler_options"] or None
    weights = {}  # passed on every call when the runner passed them (knob weights: arguments)
    if settings["weight_names"]:
        with np.load(folder / settings["files"]["weights.npz"]) as packed:
            weights = {name: jax.device_put(packed[f"arr_{index}"])
                       for index, name in enumerate(settings["weight_names"])}
    args = (weights,) if weights else ()
    compiled = jax.jit(exported.call).lower(*args, sample).compile(compiler_options=options)

    def run(x):  # type: ignore[no-untyped-def]
        return np.asarray(compiled(*args, np.ascontiguousarray(x, dtype=np.float32)))

    return run
