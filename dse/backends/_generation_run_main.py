# The command line every language-model bundle's run.py shares: it follows the backend's
# `load_generator` in the file. Read as text by dse.deploy.run_script, never imported (the leading
# underscore keeps the backend registry's scan of this package from importing it).
# Needs numpy only (every runtime brings it).


def main(load_generator, settings, argv=None):  # type: ignore[no-untyped-def]
    """Run the bundle's language model greedily on its recorded prompts (or ``--prompts``) and
    say whether its tokens are the ones recorded at export; ``--repeat N`` times N requests and
    prints the medians of the time to first token and the time per output token."""
    import argparse
    import time
    from pathlib import Path

    import numpy as np

    folder = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(
        description=f"Run this bundle's language model ({settings['backend']} "
                    f"{settings['precision']}, batch {settings['batch_size']}) with only its "
                    f"runtime installed.")
    parser.add_argument("--prompts", type=Path, default=folder / settings["prompts_file"],
                        help="a .npy of prompt token ids, one row per sequence (default: the "
                             "bundle's)")
    parser.add_argument("--tokens", type=int, default=int(settings["output_tokens"]),
                        help="output tokens per request (default: the workload's)")
    parser.add_argument("--out", type=Path, help="save the greedy tokens here (.npy)")
    parser.add_argument("--repeat", type=int, default=0,
                        help="time this many requests and print the medians of TTFT and TPOT")
    args = parser.parse_args(argv)
    prompts = np.load(args.prompts).astype(np.int64, copy=False)
    if prompts.ndim != 2 or len(prompts) < 1:
        parser.error(f"{args.prompts}: prompts of shape {prompts.shape}; give (sequences, "
                     f"tokens)")
    if args.tokens < 1:
        parser.error(f"--tokens {args.tokens}: give at least 1")
    request = load_generator(settings, folder)
    steps = [np.asarray(step).reshape(len(prompts)) for step in request(prompts, args.tokens)]
    tokens = np.stack(steps, axis=1).astype(np.int64)
    print(f"greedy tokens {tokens.shape} (sequences x tokens); the first: {tokens[0].tolist()}")
    recorded = folder / settings["tokens_file"]
    if args.prompts == folder / settings["prompts_file"] and recorded.is_file():
        expected = np.load(recorded)
        if expected.shape == tokens.shape:
            same = float(np.mean(tokens == expected))
            print(f"the same as recorded at export: {same:.1%} of the tokens")
    if args.out is not None:
        np.save(args.out, tokens)
        print(f"saved {args.out}")
    if args.repeat > 0:
        first: list[float] = []
        later: list[float] = []
        for _ in range(args.repeat):
            last = time.perf_counter()
            for index, _step in enumerate(request(prompts, args.tokens)):
                now = time.perf_counter()
                (first if index == 0 else later).append((now - last) * 1e3)
                last = now
        tpot = f"{float(np.median(later)):.3f} ms" if later else "none (one token a request)"
        print(f"{args.repeat} requests of {len(prompts)} x {prompts.shape[1]} prompt tokens and "
              f"{args.tokens} output tokens: TTFT p50 {float(np.median(first)):.3f} ms, "
              f"TPOT p50 {tpot}")
