"""Chaos: SIGKILL the driver of a campaign at random points, rerun it, and check the study.

The campaign measures on a replay device (its recorded table is served in the driver: no
hardware, no Ray), so a run is cheap and a kill can land anywhere in the search loop: between
ask and tell, mid-write of the study, mid-write of the results files. Each run is killed
``KILL_AFTER_S`` seconds after it starts (random), then the campaign is rerun; once a campaign
has met its budget it is finished by one clean run, checked, and a fresh campaign folder takes
its place. Checks, per campaign:

- no completed trial lost: every trial COMPLETE when a kill struck is still COMPLETE afterwards,
  with the same values and candidate;
- none measured twice: no two measured trials share a candidate_id (a trial that reused an
  earlier result, or a second look, is no new measurement: ``study_counts.py``);
- the budget met: as many distinct candidates measured as ``budget.trials`` asks;
- no trial left RUNNING, and trials.parquet and pareto.csv read back (written atomically, so
  never half a file) with one row per trial.

A kill counts as *in the loop* when trials were RUNNING at the kill, or the run measured
candidates and the budget was not met yet (so the loop was still asking and telling); kills during
start-up (imports, opening the study) or while the results were written do not count.

Prints one line per run, then ``BENCH chaos_kills <n>`` (kills in the loop),
``BENCH trials_lost <n>`` and ``BENCH trials_duplicated <n>``; exit status 1 unless at least
``--kills`` kills landed in the loop and nothing was lost or duplicated.
Usage: ``python benchmarks/reliability_chaos.py [--kills 12] [--seed 0] [--max-seconds 150]
[--quick]`` (``--quick``: QUICK_KILLS kills in the loop, at most QUICK_SECONDS of killing, and
campaigns of QUICK_BUDGET candidates).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the replay campaign is laid out by the tests' helper

from study_counts import duplicates, measured_candidates  # noqa: E402

from tests.replay_campaign import replay_campaign  # noqa: E402

BENCH_NAMES = ("chaos_kills", "trials_lost", "trials_duplicated")
QUICK_KILLS, QUICK_SECONDS = 1, 30.0
NAME = "chaos"
BUDGET = 120  # distinct candidates: a loop of seconds on 2 cores, after ~1.8 s of start-up
QUICK_BUDGET = 40  # still longer than the latest kill, so that kills land in the loop
KILL_AFTER_S = (1.0, 3.5)  # from process start: mostly inside the loop, sometimes in start-up
ENV = dict(os.environ, PYTHONUNBUFFERED="1", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
           RAY_USAGE_STATS_ENABLED="0")


@dataclass
class Snapshot:
    """What a study holds at one moment: COMPLETE trials (number -> values, candidate id), the
    number RUNNING, the distinct candidates measured (what the budget counts), and every trial
    (for the final checks)."""

    complete: dict[int, tuple[object, object]]
    running: int
    measured: int
    trials: list[FrozenTrial] = field(default_factory=list)


@dataclass
class Tally:
    runs: int = 0
    kills: int = 0
    in_loop: int = 0
    lost: int = 0
    duplicated: int = 0
    campaigns: int = 0


def _command(experiment: Path) -> list[str]:
    return [sys.executable, "-m", "dse.cli", "run", str(experiment)]


def _snapshot(db: Path) -> Snapshot | None:
    """The study, read without writing; None before it exists, or while SQLite refuses a
    read-only open (a kill mid-transaction leaves a hot journal that only a writer rolls back)."""
    import optuna
    import sqlalchemy.exc
    from optuna.trial import TrialState

    if not db.is_file():
        return None
    storage = f"sqlite:///file:{db}?mode=ro&uri=true"
    try:
        names = optuna.get_all_study_names(storage)
        if len(names) != 1:
            return None
        trials = optuna.load_study(study_name=names[0], storage=storage).get_trials(deepcopy=False)
    except (KeyError, sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError):
        return None
    complete = {t.number: (t.values, t.user_attrs.get("candidate_id"))
                for t in trials if t.state == TrialState.COMPLETE}
    running = sum(t.state == TrialState.RUNNING for t in trials)
    return Snapshot(complete, running, len(measured_candidates(trials)), list(trials))


def _lost(seen: dict[int, tuple[object, object]], now: Snapshot) -> int:
    """Trials COMPLETE before that are not COMPLETE now with the same values and candidate."""
    return sum(1 for number, record in seen.items() if now.complete.get(number) != record)


def _kill_session(driver: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver's process group, then anything else left in its session."""
    import psutil

    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait(timeout=30)
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == driver.pid:
                process.kill()
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue


def _run(experiment: Path, log: Path, kill_after: float | None) -> bool:
    """Run the driver; SIGKILL it after ``kill_after`` seconds unless it ended first. True if it
    was killed. A driver that fails on its own stops the benchmark with its log."""
    with log.open("ab") as out:
        driver = subprocess.Popen(_command(experiment), stdout=out, stderr=subprocess.STDOUT,
                                  env=ENV, cwd=REPO, start_new_session=True)
    killed = False
    try:
        driver.wait(timeout=kill_after if kill_after is not None else 300)
    except subprocess.TimeoutExpired:
        _kill_session(driver)
        killed = True
    if not killed and driver.returncode != 0:
        print(log.read_text()[-3000:], file=sys.stderr)
        raise SystemExit(f"the driver failed with exit code {driver.returncode}")
    return killed




def _finish_campaign(experiment: Path, log: Path, seen: dict[int, tuple[object, object]],
                     tally: Tally, clean: bool, budget: int) -> None:
    """Bring the campaign to its end with a run that is not killed (unless the last run ended
    cleanly), check it, and remove its run folder."""
    import pandas as pd

    run_dir = experiment.parent / "runs" / NAME
    if not clean:
        _run(experiment, log, None)
    final = _snapshot(run_dir / "study.db")
    if final is None:
        raise SystemExit(f"the study of campaign {tally.campaigns + 1} cannot be read after a clean run")
    tally.lost += _lost(seen, final)
    tally.duplicated += duplicates(measured_candidates(final.trials))
    table = pd.read_parquet(run_dir / "trials.parquet")
    pareto = pd.read_csv(run_dir / "pareto.csv")
    problems = []
    if final.measured < budget:
        problems.append(f"{final.measured} of {budget} candidates measured")
    if final.running:
        problems.append(f"{final.running} trials left RUNNING")
    if len(table) != len(final.trials):
        problems.append(f"trials.parquet has {len(table)} rows for {len(final.trials)} trials")
    if pareto.empty:
        problems.append("pareto.csv is empty")
    tally.campaigns += 1
    print(f"campaign {tally.campaigns}: {final.measured} candidates measured, "
          f"{len(final.complete)} complete of {len(final.trials)} trials; trials.parquet "
          f"{len(table)} rows, pareto.csv {len(pareto)} rows"
          + (f"; PROBLEMS: {'; '.join(problems)}" if problems else ""))
    if problems:
        raise SystemExit(f"campaign {tally.campaigns} is inconsistent: {'; '.join(problems)}")
    shutil.rmtree(run_dir)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=12, help="kills in the loop to reach")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=150.0,
                        help="stop killing after this long, reached or not")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_KILLS} kills, at most {QUICK_SECONDS:g} s of killing, "
                             f"campaigns of {QUICK_BUDGET} (--kills, --max-seconds ignored)")
    args = parser.parse_args()
    if args.quick:
        args.kills, args.max_seconds = QUICK_KILLS, QUICK_SECONDS
    budget = QUICK_BUDGET if args.quick else BUDGET
    rng = random.Random(args.seed)
    started = time.monotonic()
    tally = Tally()

    with tempfile.TemporaryDirectory(prefix="dse-chaos-") as folder:
        root = Path(folder)
        experiment = replay_campaign(root, NAME, budget)
        db = experiment.parent / "runs" / NAME / "study.db"
        log = root / "driver.log"
        seen: dict[int, tuple[object, object]] = {}  # COMPLETE trials of the current campaign
        measured = 0  # distinct candidates the current campaign had measured before the run
        while tally.in_loop < args.kills and time.monotonic() - started < args.max_seconds:
            tally.runs += 1
            delay = rng.uniform(*KILL_AFTER_S)
            killed = _run(experiment, log, delay)
            now = _snapshot(db)
            tally.kills += killed
            if now is None:
                print(f"run {tally.runs}: killed after {delay:.2f} s, study not readable yet"
                      if killed else f"run {tally.runs}: ended without a readable study")
                continue
            tally.lost += _lost(seen, now)
            seen.update(now.complete)
            landed = killed and (now.running > 0 or measured < now.measured < budget)
            tally.in_loop += landed
            where = ("in the loop" if landed else "outside the loop") if killed else "not killed"
            print(f"run {tally.runs}: {where} after {delay:.2f} s; measured {measured} -> "
                  f"{now.measured} candidates ({len(now.complete)} trials complete), "
                  f"{now.running} running")
            measured = now.measured
            if measured >= budget:  # met: check it, and start a fresh campaign
                _finish_campaign(experiment, log, seen, tally, clean=not killed, budget=budget)
                seen, measured = {}, 0
        if db.is_file():
            _finish_campaign(experiment, log, seen, tally, clean=False, budget=budget)

    print(f"{tally.runs} runs, {tally.kills} kills ({tally.in_loop} in the loop), "
          f"{tally.campaigns} campaigns of {budget} candidates checked, "
          f"{time.monotonic() - started:.1f} s")
    print(f"BENCH chaos_kills {tally.in_loop}")
    print(f"BENCH trials_lost {tally.lost}")
    print(f"BENCH trials_duplicated {tally.duplicated}")
    return 0 if tally.in_loop >= args.kills and tally.lost == 0 and tally.duplicated == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
