"""How many measurements each sampler needs to find the Pareto front of a recorded table.

The table (``tests/fixtures/search/cnn-digits-grid.csv``, written by
``benchmarks/record_search_table.py``) holds every candidate of ``search_table/space.yaml``
measured once on a real CPU, so its true hypervolume is known. For each sampler and seed an
in-memory Optuna study searches the same conditional space the search loop offers
(``suggest_candidate`` with the recording's device profile) and is told the table's values, as
the loop tells them: a row that is not ``ok`` fails its trial, a repeated candidate gets its first
result again. A repeat costs nothing in dse (the loop reuses it, unmeasured), so the cost counted
is the number of *distinct* candidates measured until the feasible front's hypervolume reaches
95% and 99% of the table's (reference: ``default_reference`` of the whole table).

Run: ``.venv/bin/python benchmarks/search_efficiency.py`` (a few minutes). Prints medians over the
seeds as a ratio to random search and ends with ``BENCH default_ratio_99 <default / random>`` and
``BENCH best_ratio_99 <best / random>`` (below 1: fewer measurements than random search).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "tests" / "fixtures" / "search" / "cnn-digits-grid.csv"
SPACE = REPO / "benchmarks" / "search_table" / "space.yaml"
PROFILE = REPO / "hw_profiles" / "local-cpu.yaml"
TARGETS = (0.95, 0.99)
DEFAULT_SAMPLER = "tpe"  # SamplerSpec's default name today

# Sampler variants: the SamplerSpec fields each one sets (the rest keep SamplerSpec's defaults,
# which is what a campaign that names only the sampler gets).
VARIANTS: dict[str, dict[str, Any]] = {
    "random": {"name": "random"},
    "grid": {"name": "grid"},
    "tpe": {"name": "tpe"},
    "nsga2": {"name": "nsga2"},
    "nsga2-pop16": {"name": "nsga2", "population_size": 16},
    "nsga3": {"name": "nsga3"},
    "nsga3-pop16": {"name": "nsga3", "population_size": 16},
    "gp": {"name": "gp"},
}
# Optuna samplers that make_sampler does not build, tried as candidates for a better default.
EXTRA_VARIANTS = ("tpe-group",)


@dataclass(frozen=True)
class ReplayTable:
    """A complete recorded table and what the search is measured against."""

    space: Any  # dse.spec.SearchSpace
    profile: Any  # dse.spec.HardwareProfile
    evaluator: Callable[[Any], dict[str, float]]
    objectives: list[str]
    rows: int
    reference: list[float]
    true_hypervolume: float


def load_table(table: Path = TABLE, space_file: Path = SPACE,
               profile_file: Path = PROFILE) -> ReplayTable:
    """The table served through ``ReplayEvaluator`` against the space, with its true front's
    hypervolume over the space's objectives."""
    import pandas as pd

    from dse.metrics import name_of_column
    from dse.search.evaluators import ReplayEvaluator
    from dse.search.pareto import default_reference, hypervolume
    from dse.spec import SearchSpace
    from dse.spec.loading import load_model, load_profile

    space = load_model(space_file, SearchSpace)
    objectives = [o.metric for o in space.objectives]
    frame = pd.read_csv(table)
    by_metric = {name_of_column(str(c)): str(c) for c in frame.columns}
    ok = frame[frame["status"] == "ok"]
    values = ok[[by_metric[m] for m in objectives]].to_numpy(dtype=np.float64)
    reference = default_reference(values, objectives)
    return ReplayTable(space, load_profile(profile_file), ReplayEvaluator(table, space),
                       objectives, len(frame), reference,
                       hypervolume(values, objectives, reference))


@dataclass
class SearchRun:
    """One sampler and seed: distinct candidates measured until each target was reached (None:
    not within the run's asks)."""

    sampler: str
    seed: int
    asks: int = 0
    distinct: int = 0
    needed: dict[float, int | None] = field(default_factory=dict)
    seconds: float = 0.0


def new_sampler(variant: str, seed: int) -> Any:
    import optuna

    from dse.search.samplers import make_sampler
    from dse.spec import SamplerSpec

    if variant == "tpe-group":
        # dse's tpe plus group=True: multivariate TPE over each conditional branch (backend ->
        # its precision) instead of independent sampling of the parameters outside the
        # intersection of all trials' spaces.
        spec = SamplerSpec()
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=spec.startup_trials,
                                          multivariate=True, group=True, constant_liar=True)
    if variant not in VARIANTS:
        raise ValueError(f"unknown sampler variant {variant!r}; allowed: "
                         f"{', '.join([*VARIANTS, *EXTRA_VARIANTS])}")
    return make_sampler(SamplerSpec(seed=seed, **VARIANTS[variant]), resumed_trials=0)


def search_run(table: ReplayTable, variant: str, seed: int, *, max_asks: int,
               targets: Sequence[float] = TARGETS) -> SearchRun:
    """Ask-and-tell until every target is reached, every candidate was measured, or ``max_asks``
    trials were asked."""
    import optuna
    from optuna.trial import TrialState

    from dse.metrics import metric
    from dse.search.evaluators import InfeasibleCandidate
    from dse.search.pareto import hypervolume
    from dse.search.space import suggest_candidate

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(  # in memory: no storage, no Ray
        directions=[metric(m).direction.value for m in table.objectives],
        sampler=new_sampler(variant, seed))
    run = SearchRun(variant, seed, needed={t: None for t in targets})
    seen: dict[str, list[float] | None] = {}  # candidate id -> objective values, None: failed
    front: list[list[float]] = []
    started = time.perf_counter()
    while run.asks < max_asks and run.distinct < table.rows and None in run.needed.values():
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
    """Medians over the seeds of one sampler; ``math.inf`` where half or more of the seeds did
    not reach the target within their asks."""

    sampler: str
    seeds: int
    median: dict[float, float]
    quartiles: dict[float, tuple[float, float]]
    missed: dict[float, int]
    seconds_per_ask: float


def summarize(runs: Sequence[SearchRun], targets: Sequence[float] = TARGETS) -> Summary:
    needed = {t: [math.inf if r.needed[t] is None else float(r.needed[t] or 0) for r in runs]
              for t in targets}
    asks = sum(r.asks for r in runs)
    return Summary(runs[0].sampler, len(runs),
                   {t: statistics.median(v) for t, v in needed.items()},
                   {t: _quartiles(v) for t, v in needed.items()},
                   {t: sum(math.isinf(x) for x in v) for t, v in needed.items()},
                   sum(r.seconds for r in runs) / max(asks, 1))


def _quartiles(values: Sequence[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    cuts = statistics.quantiles(values, n=4, method="inclusive")
    return cuts[0], cuts[2]


def benchmark(table: ReplayTable, variants: Sequence[str], seeds: Sequence[int], *,
              max_asks: int, max_asks_by_variant: dict[str, int] | None = None,
              seeds_by_variant: dict[str, Sequence[int]] | None = None) -> dict[str, Summary]:
    summaries = {}
    for variant in variants:
        cap = (max_asks_by_variant or {}).get(variant, max_asks)
        its_seeds = (seeds_by_variant or {}).get(variant, seeds)
        summaries[variant] = summarize([search_run(table, variant, s, max_asks=cap)
                                        for s in its_seeds])
    return summaries


def ratio(summaries: dict[str, Summary], sampler: str, target: float) -> float:
    return summaries[sampler].median[target] / summaries["random"].median[target]


def _cell(value: float) -> str:
    return "  never" if math.isinf(value) else f"{value:7.1f}"


def _iqr(bounds: tuple[float, float]) -> str:
    return "-".join("never" if math.isinf(b) else f"{b:.0f}" for b in bounds)


def report(table: ReplayTable, summaries: dict[str, Summary], notes: Sequence[str]) -> None:
    print(f"table: {table.rows} candidates, objectives {', '.join(table.objectives)}; true "
          f"hypervolume {table.true_hypervolume:.6g} at reference {table.reference}")
    print("cost = distinct candidates measured (a repeated candidate is reused, unmeasured); "
          "median over seeds; ratio = sampler / random (below 1 is better)")
    for note in notes:
        print(note)
    print(f"{'sampler':<12} {'seeds':>5} {'to 95%':>7} {'ratio':>6} {'to 99%':>7} {'ratio':>6} "
          f"{'99% IQR':>13} {'missed 95/99':>12} {'ms/ask':>7}")
    for name, s in summaries.items():
        print(f"{name:<12} {s.seeds:>5} {_cell(s.median[0.95])} {ratio(summaries, name, 0.95):6.2f} "
              f"{_cell(s.median[0.99])} {ratio(summaries, name, 0.99):6.2f} "
              f"{_iqr(s.quartiles[0.99]):>13} {s.missed[0.95]:>5}/{s.missed[0.99]:<6} "
              f"{1000 * s.seconds_per_ask:7.1f}")
    best = {t: min(summaries, key=lambda n: summaries[n].median[t]) for t in TARGETS}
    print(f"fewest to 95%: {best[0.95]}; fewest to 99%: {best[0.99]}")
    print(f"BENCH default_ratio_99 {ratio(summaries, DEFAULT_SAMPLER, 0.99):.3f}")
    print(f"BENCH best_ratio_99 {ratio(summaries, best[0.99], 0.99):.3f}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds per sampler (default 20)")
    parser.add_argument("--samplers", default=",".join([*VARIANTS, *EXTRA_VARIANTS]),
                        help=f"comma-separated, from {', '.join([*VARIANTS, *EXTRA_VARIANTS])}")
    parser.add_argument("--ask-factor", type=float, default=4.0,
                        help="asks allowed per run, as a multiple of the table's rows (repeats "
                             "are free but not endless)")
    parser.add_argument("--gp-asks", type=int, default=40,
                        help="cap on GP's asks per run (about 2 s per ask here; 0: as the others)")
    parser.add_argument("--gp-seeds", type=int, default=3,
                        help="GP's seeds (0: as the others)")
    args = parser.parse_args(argv)
    from optuna.exceptions import ExperimentalWarning

    warnings.simplefilter("ignore", ExperimentalWarning)
    table = load_table()
    variants = [v.strip() for v in args.samplers.split(",") if v.strip()]
    if "random" not in variants:
        variants.insert(0, "random")
    max_asks = int(args.ask_factor * table.rows)
    notes = [f"asks per run: at most {max_asks} ({args.ask_factor:g} x the table's rows); "
             f"seeds 0..{args.seeds - 1}"]
    caps: dict[str, int] = {}
    seeds: dict[str, Sequence[int]] = {}
    if "gp" in variants and (args.gp_asks or args.gp_seeds):
        if args.gp_asks:
            caps["gp"] = args.gp_asks
        if args.gp_seeds:
            seeds["gp"] = range(args.gp_seeds)
        notes.append(f"gp: capped at {caps.get('gp', max_asks)} asks x "
                     f"{len(seeds.get('gp', range(args.seeds)))} seeds (about 2 s per ask on "
                     f"this machine); 'never' means not within that cap")
    started = time.perf_counter()
    summaries = benchmark(table, variants, range(args.seeds), max_asks=max_asks,
                          max_asks_by_variant=caps, seeds_by_variant=seeds)
    notes.append(f"wall time {time.perf_counter() - started:.0f} s")
    report(table, summaries, notes)


if __name__ == "__main__":
    main()
