"""Races of two drivers: two `dse run` of one campaign started together, again and again.

Each race lays out a fresh replay campaign (the shipped free-parameter space on the recorded ZDT1
table: no hardware, no Ray, a run of a few seconds), starts two drivers of it a random 0-0.5 s
apart, and waits for both. One must hold the campaign's lease and finish it; the other must stop
with one line naming the holder (exit 2) — or, when the first finished before the second asked,
find nothing left to do. Counted over every race:

- ``concurrent_drivers_duplicated``: measurements the budget should have prevented: a
  candidate measured more than once (two measured trials share a candidate_id), plus distinct
  candidates measured beyond the budget. ``budget.trials`` counts distinct candidates, so a
  trial that reused an earlier result (the random sampler repeats itself) completes without
  counting; ``study_counts.py`` says what a measured trial is;
- ``concurrent_drivers_lost``: trials left RUNNING, budgets not met (fewer distinct candidates
  measured than the budget), and drivers that ended any other way than finishing or the one-line
  refusal (a traceback, another exit status).

Prints one line per race, then ``BENCH concurrent_drivers_races <n>``,
``BENCH concurrent_drivers_duplicated <n>`` and ``BENCH concurrent_drivers_lost <n>``.
Usage: ``python benchmarks/reliability_drivers.py [--races 10] [--seed 0] [--quick]``
(``--quick``: one race).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the replay campaign is laid out by the tests' helper

from study_counts import duplicates, measured_candidates  # noqa: E402

from tests.replay_campaign import replay_campaign  # noqa: E402

BENCH_NAMES = ("concurrent_drivers_races", "concurrent_drivers_duplicated",
               "concurrent_drivers_lost")
NAME = "race"
BUDGET = 60
ENV = dict(os.environ, PYTHONUNBUFFERED="1")


def _start(experiment: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "dse.cli", "run", str(experiment),
                             "--no-report"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=ENV, cwd=REPO)


def _driver_ok(code: int, out: str) -> bool:
    refused = code == 2 and sum("is being run by pid" in line for line in out.splitlines()) == 1
    return "Traceback" not in out and (code == 0 or refused)


def race(root: Path, rng: random.Random) -> tuple[int, int, str]:
    """(duplicated, lost, one line) of one race."""
    import optuna

    experiment = replay_campaign(root, NAME, BUDGET)
    first = _start(experiment)
    time.sleep(rng.uniform(0.0, 0.5))
    second = _start(experiment)
    outs = [proc.communicate(timeout=600)[0] for proc in (first, second)]
    codes = [first.returncode, second.returncode]
    storage = f"sqlite:///{root / 'experiments' / 'runs' / NAME / 'study.db'}"
    trials = optuna.load_study(study_name=NAME, storage=storage).trials
    complete = sum(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    measured = measured_candidates(trials)
    duplicated = duplicates(measured) + max(0, len(measured) - BUDGET)
    running = sum(t.state == optuna.trial.TrialState.RUNNING for t in trials)
    bad_drivers = sum(not _driver_ok(code, out) for code, out in zip(codes, outs, strict=True))
    lost = running + max(0, BUDGET - len(measured)) + bad_drivers
    for code, out in zip(codes, outs, strict=True):
        if not _driver_ok(code, out):
            print(f"    driver exit {code}: {out[-600:]}")
    return duplicated, lost, (f"exits {codes}, {len(measured)} candidates measured of {BUDGET} "
                              f"({complete} trials complete, repeats reused), {running} running, "
                              f"duplicated {duplicated}, lost {lost}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--races", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="one race (--races is ignored)")
    args = parser.parse_args()
    if args.quick:
        args.races = 1
    rng = random.Random(args.seed)
    duplicated = lost = 0
    for number in range(args.races):
        with tempfile.TemporaryDirectory(prefix="dse-race-") as tmp:
            dup, gone, line = race(Path(tmp), rng)
        duplicated, lost = duplicated + dup, lost + gone
        print(f"race {number}: {line}", flush=True)
    print(f"BENCH concurrent_drivers_races {args.races}")
    print(f"BENCH concurrent_drivers_duplicated {duplicated}")
    print(f"BENCH concurrent_drivers_lost {lost}")
    return 1 if duplicated or lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
