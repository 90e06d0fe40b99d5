"""How many distinct measurements each sampler needs to find the Pareto front of recorded tables.

Each table (``tests/fixtures/search/*.csv``, written by ``benchmarks/record_search_table.py``)
holds every candidate of a space (``benchmarks/search_table/*-space.yaml``) measured once on a
real CPU, so its true hypervolume is known. For each sampler, table and seed an in-memory Optuna
study searches the conditional space the search loop offers on that device
(``suggest_candidate``) and is told the table's values as the loop tells them: a row that is not
``ok`` fails its trial, a repeated candidate gets its first result again. The cost counted is the
number of *distinct* candidates measured (failed ones included: they cost a build on a device) —
what ``budget.trials`` counts in a campaign, where a repeat is reused unmeasured — until the
feasible front's hypervolume reaches 95 % and 99 % of the table's (reference: the table's
``default_reference``). A run stops there, or when the table is measured in full.

Also measured: the surrogate's proposal time at 300 trials (on listed spaces of 6,912 and 15,625
candidates and on a continuous one), what a second device saves by starting from the first
device's front (``TRANSFER_PAIRS``: the same space recorded on 2 cores and on 1, for onnx-deploy
and cnn-digits), and the search loop's own cost per trial against plain Optuna with the same
sampler and storage.

Run: ``.venv/bin/python benchmarks/search_efficiency.py`` (over 15 minutes on 2 cores).
``--quick`` checks that it runs, in seconds: one seed of random and the default sampler on the
smallest table (QUICK_TABLE), one direction of one transfer pair, the proposal time at
QUICK_PROPOSAL_TRIALS trials of one space, one short loop-overhead pair; its figures are not
comparable with the full run's. Ends with ``BENCH`` lines:

- ``default_ratio_99``: the default sampler's median distinct candidates to 99 % divided by
  random search's, worst table (below 1: fewer than random);
- ``default_oracle_ratio_99``: the default's median to 99 % divided by the table's front size
  (the lower bound: every front member measured once), worst table;
- ``default_reach_99``: the fraction of seeds reaching 99 % within the budget (half the table,
  at most 600 candidates), worst table;
- ``proposal_seconds``: the default's median seconds per proposal at 300 trials (worse space);
- ``warm_start_saving``: the fraction of distinct candidates to 99 % that the second device
  saves by starting from the first device's front, as a campaign's warm start does (1 - with /
  without, medians over seeds), the median over both directions of both transfer pairs (each
  printed; negative: it cost candidates);
- ``loop_overhead_ratio``: ``dse``'s campaign loop seconds per trial with an instant (replay)
  evaluator over plain Optuna's ask / tell with the same sampler and SQLite storage (median of
  interleaved pairs).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "search"
TABLE_DIR = REPO / "benchmarks" / "search_table"
TARGETS = (0.95, 0.99)
DEFAULT_SAMPLER = "surrogate"  # SamplerSpec's default name
BUDGET_CAP = 600
BENCH_NAMES = ("default_ratio_99", "default_oracle_ratio_99", "default_reach_99",
               "proposal_seconds", "warm_start_saving", "loop_overhead_ratio")
QUICK_TABLE = "onnx-deploy"
QUICK_PROPOSAL_TRIALS = 60


@dataclass(frozen=True)
class TableFiles:
    """A recorded table, the space it covers and the device profile it was measured on."""

    csv: Path
    space: Path
    profile: Path


TABLES: dict[str, TableFiles] = {
    "cnn-digits": TableFiles(FIXTURES / "cnn-digits-grid.csv", TABLE_DIR / "space.yaml",
                             REPO / "hw_profiles" / "local-cpu.yaml"),
    "onnx-deploy": TableFiles(FIXTURES / "onnx-deploy-local-cpu.csv",
                              TABLE_DIR / "onnx-space.yaml", REPO / "hw_profiles" / "local-cpu.yaml"),
    "onnx-deploy-1core": TableFiles(FIXTURES / "onnx-deploy-local-cpu-1core.csv",
                                    TABLE_DIR / "onnx-space.yaml",
                                    TABLE_DIR / "local-cpu-1core.yaml"),
    "cnn-digits-1core": TableFiles(FIXTURES / "cnn-digits-grid-1core.csv",
                                   TABLE_DIR / "space.yaml", TABLE_DIR / "local-cpu-1core.yaml"),
    "transformer": TableFiles(FIXTURES / "transformer-cut.csv", TABLE_DIR / "transformer-space.yaml",
                              REPO / "hw_profiles" / "local-cpu.yaml"),
}
# The same space recorded on two devices (2 cores and 1): the transfer pairs.
TRANSFER_PAIRS = (("onnx-deploy", "onnx-deploy-1core"), ("cnn-digits", "cnn-digits-1core"))

# Sampler variants: the SamplerSpec fields each one sets (the rest keep SamplerSpec's defaults,
# which is what a campaign that names only the sampler gets).
VARIANTS: dict[str, dict[str, Any]] = {
    "random": {"name": "random"},
    "surrogate": {"name": "surrogate"},
    "tpe": {"name": "tpe"},
    "nsga2-pop16": {"name": "nsga2", "population_size": 16},
    "nsga3-pop16": {"name": "nsga3", "population_size": 16},
    "gp": {"name": "gp"},
    "grid": {"name": "grid"},
    # BoTorch's qLogNEHVI through optuna-integration (not a dse sampler, not installed by
    # make setup: pip install optuna-integration botorch, without letting pip resolve torch).
    "botorch": {},
}


@dataclass(frozen=True)
class ReplayTable:
    """A complete recorded table and what the search is measured against."""

    name: str
    space: Any  # dse.spec.SearchSpace
    profile: Any  # dse.spec.HardwareProfile
    evaluator: Callable[[Any], dict[str, float]]
    objectives: list[str]
    rows: int
    front_size: int
    reference: list[float]
    true_hypervolume: float

    @property
    def budget(self) -> int:
        """Distinct candidates a campaign would be given: half the table, at most BUDGET_CAP."""
        return min(BUDGET_CAP, self.rows // 2)


def load_table(name: str = "cnn-digits") -> ReplayTable:
    """The table served through ``ReplayEvaluator`` against its space, with its true front's
    size and hypervolume over the space's objectives."""
    import pandas as pd

    from dse.core.metrics import name_of_column
    from dse.search.evaluators.dispatchers import ReplayEvaluator
    from dse.search.pareto import default_reference, hypervolume, pareto_mask
    from dse.spec.loading import load_profile, load_search_space

    files = TABLES[name]
    space = load_search_space(files.space)
    objectives = [o.metric for o in space.objectives]
    frame = pd.read_csv(files.csv)
    by_metric = {name_of_column(str(c)): str(c) for c in frame.columns}
    ok = frame[frame["status"] == "ok"]
    values = ok[[by_metric[m] for m in objectives]].to_numpy(dtype=np.float64)
    values = values[~np.isnan(values).any(axis=1)]
    reference = default_reference(values, objectives)
    front = np.unique(values[pareto_mask(values, objectives)], axis=0)
    return ReplayTable(name, space, load_profile(files.profile),
                       ReplayEvaluator(files.csv, space), objectives, len(frame), len(front),
                       reference, hypervolume(values, objectives, reference))


@dataclass
class SearchRun:
    """One sampler and seed: distinct candidates measured until each target was reached (None:
    not before the table was measured in full or the asks ran out)."""

    sampler: str
    seed: int
    asks: int = 0
    distinct: int = 0
    needed: dict[float, int | None] = field(default_factory=dict)
    seconds: float = 0.0
    study: Any = None


def new_sampler(variant: str, seed: int, table: ReplayTable) -> Any:
    from dse.search.candidate_space import CandidateSpace
    from dse.search.samplers.registered import make_sampler
    from dse.search.samplers.surrogate import SamplerContext
    from dse.spec import SamplerSpec

    if variant not in VARIANTS:
        raise ValueError(f"unknown sampler variant {variant!r}; allowed: {', '.join(VARIANTS)}")
    if variant == "botorch":
        from optuna_integration import BoTorchSampler  # type: ignore[import-not-found]

        return BoTorchSampler(seed=seed, n_startup_trials=10)
    context = SamplerContext(CandidateSpace(table.space, table.profile))
    return make_sampler(SamplerSpec(seed=seed, **VARIANTS[variant]), 0, context)


def search_run(table: ReplayTable, variant: str, seed: int, *, max_asks: int | None = None,
               targets: Sequence[float] = TARGETS,
               max_distinct: int | None = None,
               seeds: Sequence[dict[str, Any]] = ()) -> SearchRun:
    """Ask and tell until every target is reached, the table (or ``max_distinct`` candidates) is
    measured, or ``max_asks`` trials were asked (default: 4 x the table's rows). ``seeds``:
    parameters enqueued first (a campaign's warm start)."""
    import optuna
    from optuna.trial import TrialState

    from dse.core.metrics import metric
    from dse.search.evaluators.dispatchers import InfeasibleCandidate
    from dse.search.pareto import hypervolume
    from dse.search.space import suggest_candidate

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(  # in memory: no storage, no Ray
        study_name=f"{table.name}-{variant}-{seed}",
        directions=[metric(m).direction.value for m in table.objectives],
        sampler=new_sampler(variant, seed, table))
    for params in seeds:
        study.enqueue_trial(params)
    run = SearchRun(variant, seed, needed={t: None for t in targets}, study=study)
    seen: dict[str, list[float] | None] = {}  # candidate id -> objective values, None: failed
    front: list[list[float]] = []
    asks = max_asks if max_asks is not None else 4 * table.rows
    distinct = min(table.rows, max_distinct or table.rows)
    started = time.perf_counter()
    while run.asks < asks and run.distinct < distinct and None in run.needed.values():
        trial = study.ask()
        run.asks += 1
        candidate = suggest_candidate(trial, table.space, table.profile)
        if candidate.candidate_id not in seen:
            run.distinct += 1
            seen[candidate.candidate_id] = _measure(table, candidate, InfeasibleCandidate)
            values = seen[candidate.candidate_id]
            if values is not None:
                front.append(values)
                ratio = hypervolume(front, table.objectives, table.reference) / \
                    table.true_hypervolume
                for target, needed in run.needed.items():
                    if needed is None and ratio >= target - 1e-12:
                        run.needed[target] = run.distinct
        values = seen[candidate.candidate_id]
        if values is None:
            study.tell(trial, state=TrialState.FAIL)
        else:
            study.tell(trial, values)
    run.seconds = time.perf_counter() - started
    return run


def _measure(table: ReplayTable, candidate: Any,
             infeasible: type[Exception]) -> list[float] | None:
    """The candidate's objective values from the table; None where its trial fails."""
    try:
        metrics = table.evaluator(candidate)
    except infeasible:
        return None
    values = [metrics.get(m, math.nan) for m in table.objectives]
    return values if all(math.isfinite(v) for v in values) else None


# -- the summary -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Summary:
    """Medians over the seeds of one sampler on one table; ``math.inf`` where half or more of
    the seeds never reached the target."""

    sampler: str
    seeds: int
    median: dict[float, float]
    quartiles: dict[float, tuple[float, float]]
    missed: dict[float, int]
    reach: dict[float, float]  # fraction of seeds reaching the target within the budget
    seconds_per_ask: float


def summarize(runs: Sequence[SearchRun], budget: int | None = None,
              targets: Sequence[float] = TARGETS) -> Summary:
    needed = {t: [math.inf if r.needed[t] is None else float(r.needed[t] or 0) for r in runs]
              for t in targets}
    asks = sum(r.asks for r in runs)
    cap = math.inf if budget is None else budget
    return Summary(runs[0].sampler, len(runs),
                   {t: statistics.median(v) for t, v in needed.items()},
                   {t: _quartiles(v) for t, v in needed.items()},
                   {t: sum(math.isinf(x) for x in v) for t, v in needed.items()},
                   {t: sum(x <= cap for x in v) / len(v) for t, v in needed.items()},
                   sum(r.seconds for r in runs) / max(asks, 1))


def _quartiles(values: Sequence[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    cuts = statistics.quantiles(values, n=4, method="inclusive")
    return cuts[0], cuts[2]


def benchmark(table: ReplayTable, variants: Sequence[str], seeds: Sequence[int], *,
              max_asks: int | None = None, max_asks_by_variant: dict[str, int] | None = None,
              seeds_by_variant: dict[str, Sequence[int]] | None = None) -> dict[str, Summary]:
    summaries = {}
    for variant in variants:
        cap = (max_asks_by_variant or {}).get(variant, max_asks)
        its_seeds = (seeds_by_variant or {}).get(variant, seeds)
        summaries[variant] = summarize([search_run(table, variant, s, max_asks=cap)
                                        for s in its_seeds], table.budget)
    return summaries


def ratio(summaries: dict[str, Summary], sampler: str, target: float) -> float:
    return summaries[sampler].median[target] / summaries["random"].median[target]


def _cell(value: float) -> str:
    return "  never" if math.isinf(value) else f"{value:7.1f}"


def _iqr(bounds: tuple[float, float]) -> str:
    return "-".join("never" if math.isinf(b) else f"{b:.0f}" for b in bounds)


def report_table(table: ReplayTable, summaries: dict[str, Summary]) -> None:
    print(f"\n== {table.name}: {table.rows} candidates, front {table.front_size}, objectives "
          f"{', '.join(table.objectives)}; budget {table.budget}")
    print(f"{'sampler':<12} {'seeds':>5} {'to 95%':>7} {'ratio':>6} {'to 99%':>7} {'ratio':>6} "
          f"{'/front':>6} {'99% IQR':>9} {'reach':>5} {'ms/ask':>7}")
    for name, s in summaries.items():
        print(f"{name:<12} {s.seeds:>5} {_cell(s.median[0.95])} {ratio(summaries, name, 0.95):6.2f} "
              f"{_cell(s.median[0.99])} {ratio(summaries, name, 0.99):6.2f} "
              f"{s.median[0.99] / table.front_size:6.2f} {_iqr(s.quartiles[0.99]):>9} "
              f"{s.reach[0.99]:5.2f} {1000 * s.seconds_per_ask:7.1f}")


# -- proposal time, transfer, loop overhead ---------------------------------------------------

def proposal_seconds(space_file: Path, trials: int = 300, timed: int = 15, seed: int = 0) -> float:
    """Median seconds the default sampler takes per proposal once its study holds ``trials``
    completed trials of the space ``space_file`` on local-cpu.

    Timing only: the objective values told are a fixed function of the candidate's
    parameters (a stand-in, not a measurement), as the sampler's cost does not depend on
    them."""
    import optuna

    from dse.core.metrics import declare, metric
    from dse.search.candidate_space import CandidateSpace, params_key
    from dse.search.samplers.surrogate import SamplerContext, SurrogateSampler
    from dse.search.space import suggest_candidate
    from dse.spec.loading import load_profile, load_search_space

    space = load_search_space(space_file)
    declare(space.metric_specs())  # a space of free parameters declares its own metrics
    profile = load_profile(REPO / "hw_profiles" / "local-cpu.yaml")
    objectives = [o.metric for o in space.objectives]
    sampler = SurrogateSampler(SamplerContext(CandidateSpace(space, profile)), seed=seed,
                               startup_trials=trials + timed + 1)  # random while filling
    study = optuna.create_study(directions=[metric(m).direction.value for m in objectives],
                                sampler=sampler)

    def stand_in(params: dict[str, Any]) -> list[float]:
        digest = int(params_key(params).encode().hex()[-12:], 16)
        return [((digest >> (8 * i)) % 251) / 251.0 for i in range(len(objectives))]

    import dse.search.samplers.surrogate as surrogate

    spread, surrogate.SPREAD_START = surrogate.SPREAD_START, False  # a random fill is enough
    try:
        for _ in range(trials):
            trial = study.ask()
            suggest_candidate(trial, space, profile)
            study.tell(trial, stand_in(trial.params))
    finally:
        surrogate.SPREAD_START = spread
    sampler.startup_trials = 10
    seconds = []
    for _ in range(timed):
        started = time.perf_counter()
        trial = study.ask()
        suggest_candidate(trial, space, profile)
        seconds.append(time.perf_counter() - started)
        study.tell(trial, stand_in(trial.params))
    return statistics.median(seconds)


def front_seeds(study: Any, table: ReplayTable, cap: int) -> list[dict[str, Any]]:
    """The parameters of ``study``'s front (completed trials, distinct), thinned evenly along
    the first objective to ``cap`` — what a campaign's warm start enqueues on a new device
    (dse.search.warm_start: at most half the budget)."""
    from optuna.trial import TrialState

    from dse.search.pareto import pareto_mask

    done: dict[str, Any] = {}
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        done.setdefault(str(sorted(trial.params.items())), trial)
    trials = list(done.values())
    if not trials:
        return []
    mask = pareto_mask(np.array([t.values for t in trials]), table.objectives)
    front = sorted((t for t, keep in zip(trials, mask, strict=True) if keep),
                   key=lambda t: t.values[0])
    if len(front) > cap:
        front = [front[round(i * (len(front) - 1) / max(cap - 1, 1))] for i in range(cap)]
    return [dict(t.params) for t in front]


@dataclass(frozen=True)
class Transfer:
    """The second device's runs: alone, and seeded with the first device's front (as a
    campaign's warm start does)."""

    alone: Summary
    front: Summary


def transfer(first: ReplayTable, second: ReplayTable, seeds: Sequence[int]) -> Transfer:
    """The default sampler on ``second`` alone, and seeded with ``first``'s front (searched to
    its budget beforehand, same seed)."""
    alone, fronted = [], []
    for seed in seeds:
        source = search_run(first, DEFAULT_SAMPLER, seed, targets=(1.01,),
                            max_distinct=first.budget).study
        alone.append(search_run(second, DEFAULT_SAMPLER, seed))
        fronted.append(search_run(second, DEFAULT_SAMPLER, seed,
                                  seeds=front_seeds(source, first, second.budget // 2)))
    return Transfer(*(summarize(runs, second.budget) for runs in (alone, fronted)))


def loop_overhead(table_name: str, trials: int, pairs: int) -> tuple[float, float, float]:
    """Seconds per trial of ``dse``'s campaign loop (a replay device: no Ray, no measurement)
    and of plain Optuna ask / tell with the same sampler (random, same seed), the same
    ``suggest_candidate`` and table lookup, and SQLite storage; medians of ``pairs``
    interleaved runs, and their ratio."""
    import optuna
    from optuna.trial import TrialState

    from dse.app.api import run_campaign
    from dse.core.metrics import metric
    from dse.search.evaluators.dispatchers import InfeasibleCandidate, ReplayEvaluator
    from dse.search.space import suggest_candidate
    from dse.spec.loading import load_search_space

    files = TABLES[table_name]
    space = load_search_space(files.space)
    objectives = [o.metric for o in space.objectives]
    dse_runs, plain_runs = [], []
    for pair in range(pairs):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "replay.yaml").write_text(
                f"name: replay-device\nkind: replay\ntable: {files.csv}\n")
            (folder / "campaign.yaml").write_text(
                f"name: overhead\nsearch_space: {files.space}\ndevices: [replay.yaml]\n"
                f"sampler: {{name: random, seed: {pair}}}\n"
                f"budget: {{trials: {trials}, max_failed: {10 * trials}}}\n"
                f"search: {{warm_start: off}}\nruns_dir: runs\ndashboards_dir: runs\n")
            started = time.perf_counter()
            result = run_campaign(folder / "campaign.yaml", report=False)
            elapsed = time.perf_counter() - started
            count = len(result.trials)  # a property that reads the study: outside the timing
            dse_runs.append(elapsed / count)
            replay = ReplayEvaluator(files.csv, space)
            profile = next(iter(result.experiment.devices))
            storage = f"sqlite:///{folder / 'plain.db'}"
            started = time.perf_counter()
            study = optuna.create_study(
                storage=storage, directions=[metric(m).direction.value for m in objectives],
                sampler=optuna.samplers.RandomSampler(seed=pair))
            asked = 0
            while asked < count:
                trial = study.ask()
                asked += 1
                candidate = suggest_candidate(trial, space, profile, capabilities=False)
                try:
                    metrics = replay(candidate)
                    study.tell(trial, [metrics[m] for m in objectives])
                except (InfeasibleCandidate, KeyError):
                    study.tell(trial, state=TrialState.FAIL)
            plain_runs.append((time.perf_counter() - started) / asked)
    dse_s, plain_s = statistics.median(dse_runs), statistics.median(plain_runs)
    return dse_s, plain_s, dse_s / plain_s


def busy_note() -> str:
    load = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    return (f"load average {load:.1f} on {cores} cores" +
            (" (busy: other work shared the machine)" if load > 0.8 * cores else ""))


def _search_tables(names: Sequence[str], variants: Sequence[str], seeds: Sequence[int],
                   caps: dict[str, int], seeds_by: dict[str, Sequence[int]]) -> dict[str, float]:
    """Each table searched by each variant; the default sampler's worst ratio to random, worst
    ratio to the front size and lowest reach, over the tables."""
    worst = {"ratio": 0.0, "oracle": 0.0, "reach": 1.0}
    for name in names:
        table = load_table(name)
        summaries = benchmark(table, variants, seeds, max_asks_by_variant=caps,
                              seeds_by_variant=seeds_by)
        report_table(table, summaries)
        default = summaries[DEFAULT_SAMPLER]
        worst["ratio"] = max(worst["ratio"], ratio(summaries, DEFAULT_SAMPLER, 0.99))
        worst["oracle"] = max(worst["oracle"], default.median[0.99] / table.front_size)
        worst["reach"] = min(worst["reach"], default.reach[0.99])
    return worst


def _warm_start_savings(directions: Sequence[tuple[str, str]], seeds: Sequence[int]) -> list[float]:
    """Per direction (first table, second table): the share of distinct candidates to 99 % the
    second saves by starting from the first's front; each printed."""
    savings = []
    for first_name, second_name in directions:
        first, second = load_table(first_name), load_table(second_name)
        result = transfer(first, second, seeds)
        alone = result.alone.median[0.99]
        fronted = result.front.median[0.99]
        savings.append(1 - fronted / alone)
        print(f"transfer {first.name} -> {second.name}: distinct to 99 % alone {alone:.1f}; front "
              f"{fronted:.1f} (saving {100 * savings[-1]:.0f} %, reach "
              f"{result.front.reach[0.99]:.2f})")
    return savings


def _proposal_times(quick: bool) -> dict[str, float]:
    """The default sampler's median seconds per proposal by space (quick: one space, fewer
    trials told first)."""
    spaces = {"listed, transformer-sequences: 6,912 candidates":
              REPO / "search_spaces" / "transformer-sequences.yaml",
              "listed, cell-space: 15,625": TABLE_DIR / "cell-space.yaml",
              "continuous space: drawn pool": TABLE_DIR / "continuous-space.yaml"}
    if quick:
        found = {"continuous space: drawn pool":
                 proposal_seconds(spaces["continuous space: drawn pool"],
                                  trials=QUICK_PROPOSAL_TRIALS, timed=3)}
    else:
        found = {what: proposal_seconds(path) for what, path in spaces.items()}
    trials = QUICK_PROPOSAL_TRIALS if quick else 300
    print(f"proposal at {trials} trials: " + ", ".join(f"{seconds:.3f} s ({what})"
                                                      for what, seconds in found.items()))
    return found


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds per sampler (default 20)")
    parser.add_argument("--samplers", default="random,surrogate,tpe,nsga2-pop16",
                        help=f"comma-separated, from {', '.join(VARIANTS)}")
    parser.add_argument("--tables", default=",".join(TABLES),
                        help=f"comma-separated, from {', '.join(TABLES)}")
    parser.add_argument("--gp-asks", type=int, default=40,
                        help="cap on the asks per run of gp and botorch (seconds per ask here; "
                             "0: as the others)")
    parser.add_argument("--gp-seeds", type=int, default=3,
                        help="seeds of gp and botorch (0: as the others)")
    parser.add_argument("--quick", action="store_true",
                        help=f"one seed of random and the default on {QUICK_TABLE}, one transfer "
                             "direction, a short proposal and overhead run (--seeds, "
                             "--samplers, --tables ignored)")
    args = parser.parse_args(argv)
    from optuna.exceptions import ExperimentalWarning

    warnings.simplefilter("ignore", ExperimentalWarning)
    seeds = range(1 if args.quick else args.seeds)
    variants = (["random", DEFAULT_SAMPLER] if args.quick else
                [v.strip() for v in args.samplers.split(",") if v.strip()])
    if "random" not in variants:
        variants.insert(0, "random")
    tables = ([QUICK_TABLE] if args.quick else
              [t.strip() for t in args.tables.split(",") if t.strip()])
    directions = ([TRANSFER_PAIRS[0]] if args.quick else
                  [d for a, b in TRANSFER_PAIRS for d in ((a, b), (b, a))])
    caps: dict[str, int] = {}
    seeds_by: dict[str, Sequence[int]] = {}
    for slow in ("gp", "botorch"):  # seconds per proposal: fewer asks and seeds
        if slow in variants and args.gp_asks:
            caps[slow] = args.gp_asks
        if slow in variants and args.gp_seeds:
            seeds_by[slow] = range(args.gp_seeds)
    print(f"cost = distinct candidates measured until the front reaches 95 / 99 % of the table's "
          f"hypervolume; medians over seeds 0..{len(seeds) - 1}; ratio = sampler / random; "
          f"/front = median to 99 % / front size; reach = seeds reaching 99 % within the budget")
    print(busy_note())
    started = time.perf_counter()
    worst = _search_tables(tables, variants, seeds, caps, seeds_by)
    print(f"\nsearch wall time {time.perf_counter() - started:.0f} s; {busy_note()}")
    savings = _warm_start_savings(directions, seeds)
    proposals = _proposal_times(args.quick)
    # 60 distinct of the table's 128: a budget the table can meet without a long tail of repeats.
    dse_s, plain_s, overhead = loop_overhead("cnn-digits", 20 if args.quick else 60,
                                             1 if args.quick else 5)
    print(f"loop: dse {1000 * dse_s:.1f} ms/trial, plain Optuna {1000 * plain_s:.1f} ms/trial "
          f"(random sampler, SQLite, replay table); {busy_note()}")
    print(f"BENCH default_ratio_99 {worst['ratio']:.3f}")
    print(f"BENCH default_oracle_ratio_99 {worst['oracle']:.3f}")
    print(f"BENCH default_reach_99 {worst['reach']:.3f}")
    print(f"BENCH proposal_seconds {max(proposals.values()):.3f}")
    print(f"BENCH warm_start_saving {statistics.median(savings):.3f}")
    print(f"BENCH loop_overhead_ratio {overhead:.3f}")


if __name__ == "__main__":
    main()
