"""A campaign run again with a warm build cache: how much faster, and does it rebuild anything?

Runs the quickstart campaign's space and device twice, each into its own run folder but sharing
one cache folder. The second study is seeded with the first study's candidates (enqueued in the
same order), so both runs measure the same configurations and only the cache differs. Ray is
restarted between the runs so neither pays its start-up alone.

Run: ``.venv/bin/python benchmarks/build_cache.py [--quick]``. Ends with ``BENCH cache_speedup
<first/second>`` and ``BENCH cache_rebuilds <measured trials of the second run that trained or
built anything>`` (target 0).

``--quick``: a space of one architecture trained for one epoch, ONNX Runtime fp32 at
QUICK_TRIALS batch sizes (QUICK_SPACE), no second looks, and one Ray for both runs (the second
pays no start-up: its speed-up means nothing; the rebuild count still does).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import optuna
from tiny_space import tiny_space

REPO = Path(__file__).resolve().parents[1]
# Its quick mode runs real campaigns (Ray, training, measuring): tens of seconds, so
# benchmarks/quick.py starts it first (docs/benchmarks.md has the times).
QUICK_CAMPAIGNS = True
# Out of CI since 2026-12-07 evening: its quick mode (42-53 s of CI's 143 s of quick runs) took
# CI past its 25 minutes (docs/benchmarks.md, "The quickstart and the test suite").
QUICK_IN_CI = False
TRIALS, QUICK_TRIALS = 32, 2
BENCH_NAMES = ("cache_speedup", "cache_rebuilds")


QUICK_SPACE = tiny_space("cache-quick", [1, 8])


def experiment_text(name: str, trials: int, space: Path) -> str:
    quick = space.name == "quick-space.yaml"
    sampler = "{name: grid}" if quick else "{name: tpe, seed: 0, startup_trials: 12}"
    extra = ", second_looks: 0" if quick else ""
    return f"""\
name: {name}
search_space: {space}
devices: [{REPO / 'hw_profiles/local-cpu.yaml'}]
sampler: {sampler}
budget: {{trials: {trials}}}
measurement: {{warmup_max_seconds: 0.5, min_iters: 30, min_seconds: 0.3, max_seconds: 1.0{extra}}}
runs_dir: runs
dashboards_dir: dashboards
cache_dir: cache
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_TRIALS} trials, one Ray for both runs")
    quick = parser.parse_args().quick
    trials = QUICK_TRIALS if quick else TRIALS
    from dse.app.api import load_experiment, run_campaign
    from dse.farm.cluster import shutdown
    from dse.search.study import open_study

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        space = REPO / "search_spaces" / "cnn-digits.yaml"
        if quick:
            space = folder / "quick-space.yaml"
            space.write_text(QUICK_SPACE)
        first_path, second_path = folder / "first.yaml", folder / "second.yaml"
        first_path.write_text(experiment_text("cache-cold", trials, space))
        second_path.write_text(experiment_text("cache-warm", trials, space))

        start = time.perf_counter()
        cold = run_campaign(first_path, report=False)
        cold_seconds = time.perf_counter() - start
        if not quick:
            shutdown()

        warm_experiment = load_experiment(second_path)
        study = open_study(warm_experiment.run_dir, warm_experiment.name, warm_experiment.space,
                           warm_experiment.spec.sampler)
        cold_study = optuna.load_study(study_name="cache-cold",
                                       storage=f"sqlite:///{cold.run_dir / 'study.db'}")
        for trial in sorted(cold_study.trials, key=lambda t: t.number):
            if trial.state == optuna.trial.TrialState.COMPLETE:
                study.enqueue_trial(trial.params)
        start = time.perf_counter()
        warm = run_campaign(warm_experiment, report=False)
        warm_seconds = time.perf_counter() - start
        shutdown()

        trials_table = warm.trials
        measured = trials_table[trials_table["reused_from"].isna() & (trials_table["status"] == "ok")]
        rebuilt = int(((measured["train_seconds [s]"] > 0) | (measured["build_seconds [s]"] > 0)).sum())
        print(f"cold run: {cold_seconds:.1f} s for {len(cold.trials)} trials")
        print(f"warm run: {warm_seconds:.1f} s for {len(trials_table)} trials; "
              f"{rebuilt} of {len(measured)} measured trials trained or built anything")
        print(f"BENCH cache_speedup {cold_seconds / warm_seconds:.2f}")
        print(f"BENCH cache_rebuilds {rebuilt}")


if __name__ == "__main__":
    main()
