"""What each storage an experiment can choose costs per trial: the same campaign (the shipped
free-parameter space on its replay device, so nothing is measured and the driver's own work —
sampler, storage reads and writes, the lease — is all there is) run on SQLite in the run folder,
Optuna's journal file, and a PostgreSQL server started for the benchmark in a temporary folder
(durable: fsync on, as a real server; on this machine, over TCP on 127.0.0.1).

Each round runs every storage once, in a rotated order, on a fresh run folder (so the rounds
interleave and a busy spell of the shared machine falls on all storages alike); the figure per
storage is the median over rounds of (campaign wall time / trials the study records), with its
ratio to SQLite measured in the same rounds. ``--trials`` is the budget, which counts distinct
candidates: the random sampler repeats a few, and each repeat is a trial of its own that reuses
the earlier result (asked, told and stored like any other), so a run records a few more trials
than its budget. Each run is checked to have measured exactly its budget of distinct candidates
(``study_counts.py``). Without PostgreSQL server binaries its line says why and reads -1.

Ends with::

    BENCH storage_ms_per_trial_sqlite <ms>
    BENCH storage_ms_per_trial_journal <ms>
    BENCH storage_ms_per_trial_postgresql <ms>

Usage: ``python benchmarks/reliability_storage.py [--trials 100] [--rounds 5] [--quick]``
(``--quick``: QUICK_TRIALS trials, one round).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from study_counts import duplicates, measured_candidates  # noqa: E402

from dse.app.api import load_experiment, run_campaign  # noqa: E402
from dse.results import load_campaign  # noqa: E402
from dse.storage.postgres_server import PostgresServer, unavailable_reason  # noqa: E402
from tests.replay_campaign import replay_campaign  # noqa: E402

KINDS = ("sqlite", "journal", "postgresql")
BENCH_NAMES = ("storage_ms_per_trial_sqlite", "storage_ms_per_trial_journal",
               "storage_ms_per_trial_postgresql")
QUICK_TRIALS = 10


def _cpu_ticks() -> tuple[int, int]:
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields), sum(fields) - fields[3] - fields[4]


def _one_run(root: Path, name: str, budget: int, setting: str) -> float:
    """Milliseconds per recorded trial of one campaign with a budget of ``budget`` distinct
    candidates on ``setting``."""
    experiment = load_experiment(replay_campaign(root, name, budget, f"storage: {setting}\n"))
    started = time.perf_counter()
    result = run_campaign(experiment, report=False)
    seconds = time.perf_counter() - started
    trials = [t for study in load_campaign(result.run_dir, experiment.storage)
              for t in study.get_trials(deepcopy=False)]
    measured = measured_candidates(trials)
    if len(measured) != budget or duplicates(measured):
        raise SystemExit(f"{setting}: {len(measured)} distinct candidates measured for a budget "
                         f"of {budget}, {duplicates(measured)} measured twice, in "
                         f"{len(trials)} trials")
    return 1000 * seconds / len(trials)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_TRIALS} trials, one round (--trials, --rounds ignored)")
    args = parser.parse_args()
    if args.quick:
        args.trials, args.rounds = QUICK_TRIALS, 1
    work = Path(tempfile.mkdtemp(prefix="dse-storage-bench-"))
    server: PostgresServer | None = None
    kinds = list(KINDS)
    why_not = unavailable_reason()
    if why_not is None:
        server = PostgresServer().start()
    else:
        kinds.remove("postgresql")
        print(f"postgresql: not measured: {why_not}")
    ms: dict[str, list[float]] = {kind: [] for kind in kinds}
    before = _cpu_ticks()
    try:
        for round_ in range(args.rounds):
            order = kinds[round_ % len(kinds):] + kinds[:round_ % len(kinds)]
            for kind in order:
                setting = kind
                if kind == "postgresql":
                    assert server is not None
                    os.environ["DSE_BENCH_STORAGE"] = server.create_database(f"r{round_}")
                    setting = "env:DSE_BENCH_STORAGE"
                ms[kind].append(_one_run(work / f"{kind}-{round_}", f"s{round_}", args.trials,
                                         setting))
            print(f"round {round_ + 1}: " + ", ".join(
                f"{kind} {ms[kind][-1]:.1f} ms/trial" for kind in kinds), flush=True)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    after = _cpu_ticks()
    busy = 100 * (after[1] - before[1]) / max(after[0] - before[0], 1)
    shared = "; the PostgreSQL server shares them" if server else ""
    print(f"machine busy {busy:.0f}% over the benchmark (this benchmark included: one driver "
          f"keeps one of {os.cpu_count()} CPUs busy{shared})")
    medians = {kind: statistics.median(values) for kind, values in ms.items()}
    for kind in kinds:
        ratios = [a / b for a, b in zip(ms[kind], ms["sqlite"], strict=True)]
        print(f"{kind:11} median {medians[kind]:7.1f} ms per trial over {args.rounds} rounds "
              f"(range {min(ms[kind]):.1f}-{max(ms[kind]):.1f}); vs sqlite in the same round: "
              f"median {statistics.median(ratios):.2f}x")
    for kind in KINDS:
        print(f"BENCH storage_ms_per_trial_{kind} {medians.get(kind, -1):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
