"""Fuzz `dse validate` with hostile and malformed specs, each in a real `dse validate` process.

The cases: every hostile case of tests/spec/hostile.py (alias bombs, huge scalars, oversize files,
special files such as a FIFO, /dev/zero and a directory named directly or from an experiment, and
output folders that are files or devices), then mutations of the shipped specs from
tests/spec/malformed.py up to ``--cases`` in all. Each must be rejected with exit code 2 and lines
naming its file (a mutation also its field; a hostile case what it expects), never a traceback,
never a hang; a mutation may leave a valid file (exit 0).

How it is measured: each case is its own ``python -m dse.cli validate FILE`` process
(tests.spec.hostile.run_validate), killed after ``--timeout`` seconds and refused more than 2 GiB of
address space. ``--jobs`` of them (default 2) run side by side to keep the run to a few minutes;
each is still timed and measured on its own. Its wall time runs from start to exit, so it includes
the interpreter's start and dse's imports (about 0.8 s on an idle machine) and any slowdown from the
other job: an upper bound on what dse itself spends. Its peak RSS is its own ``ru_maxrss``, read
from ``os.wait4`` for that child (not a RUSAGE_CHILDREN delta, which would mix children run side by
side).

Prints each case that misbehaved, then (as its final lines) ``BENCH fuzz_valid``,
``BENCH fuzz_bad_exit``, ``BENCH fuzz_timeouts``, ``BENCH fuzz_cases``, ``BENCH fuzz_tracebacks``
(a timed-out case counts as one), ``BENCH fuzz_max_seconds`` (the slowest case, rounded up to whole
seconds) and ``BENCH fuzz_max_rss_mb`` (the largest peak, rounded up to whole MB). Exit status 1
when any case misbehaved; the targets (max seconds <= 5, max RSS <= 500 MB) are judged by
benchmarks/reliability.py.
Usage: python benchmarks/reliability_fuzz.py [--cases 520] [--seed 0] [--jobs 2] [--timeout 60]
[--quick] (``--quick``: the first hostile case of each family and QUICK_MUTATIONS mutations).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the generators live with the tests (hypothesis is a dev dependency)

from tests.spec.hostile import HostileCase, ProcessResult, hostile_cases, run_validate  # noqa: E402
from tests.spec.malformed import KIND_DIRS, FuzzCase, fuzz_cases, prepare_folder  # noqa: E402

BENCH_NAMES = ("fuzz_valid", "fuzz_bad_exit", "fuzz_timeouts", "fuzz_cases", "fuzz_tracebacks",
               "fuzz_max_seconds", "fuzz_max_rss_mb")
QUICK_MUTATIONS = 5


@dataclass(frozen=True)
class Outcome:
    label: str
    family: str
    """A hostile case's family (alias_bomb, huge_scalar, ...) or ``mutation``."""
    result: ProcessResult
    valid: bool
    clean: bool
    """Rejected with exit 2, naming what it must, without a traceback (or valid, for a mutation)."""


def _judge_hostile(case: HostileCase, path: Path, result: ProcessResult) -> Outcome:
    own = [line for line in result.output.splitlines() if line.startswith(f"{path}: ")]
    named = bool(own) and all(any(text in line for line in own) for text in case.expect)
    clean = result.exit_code == 2 and not result.traceback and named
    return Outcome(f"{case.name} ({case.family})", case.family, result, valid=False, clean=clean)


def _judge_mutation(case: FuzzCase, result: ProcessResult) -> Outcome:
    valid = result.exit_code == 0 and not result.traceback
    named = case.name in result.output and (case.field is None or case.field in result.output)
    clean = valid or (result.exit_code == 2 and not result.traceback and named)
    return Outcome(f"{case.name} ({case.mutation})", "mutation", result, valid=valid,
                   clean=clean)


def _hostile(quick: bool) -> list[HostileCase]:
    """Every hostile case, or (quick) the first of each family."""
    cases = hostile_cases()
    if not quick:
        return cases
    return list({case.family: case for case in reversed(cases)}.values())


def _jobs(folder: Path, cases: int, seed: int, timeout_s: float,
          quick: bool) -> list[Callable[[], Outcome]]:
    """One function per case: it writes the case under ``folder``, validates it, judges it."""
    def hostile(case: HostileCase) -> Callable[[], Outcome]:
        def run() -> Outcome:
            path = case.make(case.file(folder))
            return _judge_hostile(case, path, run_validate([path], timeout_s))
        return run

    def mutation(case: FuzzCase) -> Callable[[], Outcome]:
        def run() -> Outcome:
            path = folder / KIND_DIRS[case.kind] / case.name
            path.write_bytes(case.data)
            return _judge_mutation(case, run_validate([path], timeout_s))
        return run

    jobs = [hostile(case) for case in _hostile(quick)]
    return jobs + [mutation(case) for case in fuzz_cases(max(0, cases - len(jobs)), seed)]


def _report(outcomes: list[Outcome], seconds: float) -> int:
    for outcome in outcomes:
        if not outcome.clean:
            result = outcome.result
            print(f"{outcome.label}: exit {result.exit_code}, timed out {result.timed_out}, "
                  f"{result.seconds:.1f} s\n{result.output[-1500:]}", file=sys.stderr)
    results = [o.result for o in outcomes]
    valid = sum(o.valid for o in outcomes)
    tracebacks = sum(r.traceback for r in results)
    bad_exit = sum(not o.clean and not o.result.traceback for o in outcomes)
    slowest = max(outcomes, key=lambda o: o.result.seconds)
    largest = max(outcomes, key=lambda o: o.result.max_rss_mb)
    print(f"{len(outcomes)} cases in {seconds:.1f} s: {len(outcomes) - valid} rejected, {valid} "
          f"valid after mutation; slowest {slowest.result.seconds:.2f} s ({slowest.label}); "
          f"largest {largest.result.max_rss_mb:.0f} MB ({largest.label})")
    for family in dict.fromkeys(o.family for o in outcomes):
        mine = [o.result for o in outcomes if o.family == family]
        print(f"  {family:14} {len(mine):4} cases, slowest {max(r.seconds for r in mine):.2f} s, "
              f"largest {max(r.max_rss_mb for r in mine):.0f} MB")
    print(f"BENCH fuzz_valid {valid}")
    print(f"BENCH fuzz_bad_exit {bad_exit}")
    print(f"BENCH fuzz_timeouts {sum(r.timed_out for r in results)}")
    print(f"BENCH fuzz_cases {len(outcomes)}")
    print(f"BENCH fuzz_tracebacks {tracebacks}")
    print(f"BENCH fuzz_max_seconds {math.ceil(slowest.result.seconds)}")
    print(f"BENCH fuzz_max_rss_mb {math.ceil(largest.result.max_rss_mb)}")
    return 1 if tracebacks or bad_exit else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cases", type=int, default=520,
                        help="cases in all: every hostile case, then mutations up to this")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="validate processes side by side")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a case is "
                                                                    "killed as hung")
    parser.add_argument("--quick", action="store_true", help="one hostile case per family and "
                        f"{QUICK_MUTATIONS} mutations (--cases is ignored)")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        prepare_folder(folder)
        cases = len(_hostile(True)) + QUICK_MUTATIONS if args.quick else args.cases
        jobs = _jobs(folder, cases, args.seed, args.timeout, args.quick)
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            outcomes = list(pool.map(lambda job: job(), jobs))
    return _report(outcomes, time.perf_counter() - started)


if __name__ == "__main__":
    sys.exit(main())
