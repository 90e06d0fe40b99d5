# run.py's model loader for the TVM backend: the Relax executable dse compiled and measured
# (exported as a shared library, tuned schedules included), loaded into a Relax VM on the CPU
# (or the CUDA GPU it was compiled for), with TVM's thread pool set to the recorded thread count.


def load(settings, folder):  # type: ignore[no-untyped-def]
    """A function of one batch: the VM's ``main`` on the exported library, run on a thread pool
    of the recorded ``num_threads``."""
    import os

    import numpy as np

    threads = int(settings["knobs"].get("num_threads", settings["threads"]))
    # TVM caps its pool at $TVM_NUM_THREADS (else $OMP_NUM_THREADS) when it first starts: let it
    # grow to the recorded count, then size it as dse did.
    os.environ["TVM_NUM_THREADS"] = str(max(threads, os.cpu_count() or 1,
                                            int(os.environ.get("TVM_NUM_THREADS") or 0)))
    import tvm
    from tvm.runtime.vm import VirtualMachine

    library = tvm.runtime.load_module(str(folder / settings["model_file"]))
    device = tvm.cuda(0) if settings.get("device") == "cuda" else tvm.cpu(0)
    # runtime.config_threadpool(mode, nthreads): mode 1 is TVM's default (big cores first).
    tvm.get_global_func("runtime.config_threadpool")(1, threads)
    machine = VirtualMachine(library, device)
    main = machine["main"]

    def run(x):  # type: ignore[no-untyped-def]
        feed = tvm.runtime.tensor(np.ascontiguousarray(x, dtype=np.float32), device)
        return main(feed).numpy()

    return run
