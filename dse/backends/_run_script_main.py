# The command line every bundle's run.py shares: it follows the backend's `load` in the file.
# Read as text by dse.deploy.run_script, never imported (the leading underscore keeps the backend
# registry's scan of this package from importing it).
# Needs numpy only (every runtime brings it).


def main(load, settings, argv=None):  # type: ignore[no-untyped-def]
    """Run the bundle's model on its recorded inputs (or ``--inputs``), in batches of the batch
    size it was measured at; ``--out`` saves the outputs, ``--repeat N`` times N calls of one
    batch and prints their median."""
    import argparse
    import time
    from pathlib import Path

    import numpy as np

    folder = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(
        description=f"Run this bundle's model ({settings['backend']} {settings['precision']}, "
                    f"batch {settings['batch_size']}) with only its runtime installed.")
    parser.add_argument("--inputs", type=Path, default=folder / settings["inputs_file"],
                        help="a .npy of inputs, one sample per row (default: the bundle's)")
    parser.add_argument("--out", type=Path, help="save the outputs here (.npy)")
    parser.add_argument("--repeat", type=int, default=0,
                        help="time this many calls of one batch and print their median")
    args = parser.parse_args(argv)
    batch = int(settings["batch_size"])
    shape = tuple(settings["input_shape"])
    inputs = np.load(args.inputs).astype(np.float32, copy=False)
    if tuple(inputs.shape[1:]) != shape:
        parser.error(f"{args.inputs}: samples of shape {tuple(inputs.shape[1:])}; the model "
                     f"takes {shape}")
    run = load(settings, folder)
    outputs = []
    for start in range(0, len(inputs), batch):
        chunk = inputs[start:start + batch]
        # The model runs at the batch size it was built and measured at: a short last batch is
        # padded with zeros, and only its real rows are kept.
        full = np.zeros((batch, *shape), dtype=np.float32)
        full[: len(chunk)] = chunk
        outputs.append(np.asarray(run(full))[: len(chunk)])
    result = np.concatenate(outputs) if outputs else np.zeros((0,), dtype=np.float32)
    print(f"outputs {result.shape} {result.dtype} from {len(inputs)} inputs")
    if args.out is not None:
        np.save(args.out, result)
        print(f"saved {args.out}")
    if args.repeat > 0:
        one = np.ascontiguousarray(np.resize(inputs, (batch, *shape)))
        times = []
        for _ in range(args.repeat):
            began = time.perf_counter()
            run(one)
            times.append((time.perf_counter() - began) * 1e3)
        print(f"p50 {float(np.median(times)):.4f} ms over {args.repeat} calls at batch {batch}")
