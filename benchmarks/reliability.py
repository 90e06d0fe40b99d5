"""Reliability figures of issues 9 and 16: spec fuzzing, driver chaos, racing drivers and
attacks on the report server, with their targets.

Runs ``reliability_fuzz.py`` (malformed and hostile specs through ``dse validate``: alias bombs,
huge scalars, oversize and special files; each rejected with a clear message, never a traceback,
within bounded time and memory), ``reliability_chaos.py`` (a campaign's driver SIGKILLed at
random points of its search loop and rerun: nothing lost, nothing measured twice),
``reliability_drivers.py`` (two drivers of one campaign started together: one runs it, the other
is refused), ``reliability_serve.py`` (Host, path, link, NUL and idle-connection attacks on
``dse report --serve``) and ``reliability_storage.py`` (what a trial costs on each storage an
experiment can choose: SQLite, journal file, PostgreSQL), each in its own process, and collects
their ``BENCH`` lines.

Ends with exactly these lines, in this order::

    BENCH fuzz_cases <n>                     target >= 500
    BENCH fuzz_tracebacks <n>                target 0
    BENCH fuzz_max_seconds <n>               target <= 5 (slowest case, rounded up)
    BENCH fuzz_max_rss_mb <n>                target <= 500
    BENCH chaos_kills <n>                    target >= 10 (kills that landed in the search loop)
    BENCH trials_lost <n>                    target 0
    BENCH trials_duplicated <n>              target 0
    BENCH concurrent_drivers_races <n>       target >= 10
    BENCH concurrent_drivers_duplicated <n>  target 0
    BENCH concurrent_drivers_lost <n>        target 0
    BENCH serve_attacks_failed <n>           target 0
    BENCH storage_ms_per_trial_sqlite <ms>   reported (median over rounds; ratios in its output)
    BENCH storage_ms_per_trial_journal <ms>
    BENCH storage_ms_per_trial_postgresql <ms>  (-1 without PostgreSQL server binaries)

Exit status 1 when a target is missed or a part did not report its figure.
Usage: ``python benchmarks/reliability.py [--cases 520] [--kills 12] [--races 10] [--seed 0]
[--quick]``. ``--quick`` runs each part in its own quick mode (a few cases, kills and races: it
checks that they run), and judges every target but the sizes (SIZES: how many cases, kills and
races were reached).
"""

from __future__ import annotations

import argparse
import operator
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# name -> (comparison, target, what the target means)
TARGETS: dict[str, tuple[Callable[[float, int], bool], int, str]] = {
    "fuzz_cases": (operator.ge, 500, ">= 500"),
    "fuzz_tracebacks": (operator.eq, 0, "0"),
    "fuzz_max_seconds": (operator.le, 5, "<= 5"),
    "fuzz_max_rss_mb": (operator.le, 500, "<= 500"),
    "chaos_kills": (operator.ge, 10, ">= 10"),
    "trials_lost": (operator.eq, 0, "0"),
    "trials_duplicated": (operator.eq, 0, "0"),
    "concurrent_drivers_races": (operator.ge, 10, ">= 10"),
    "concurrent_drivers_duplicated": (operator.eq, 0, "0"),
    "concurrent_drivers_lost": (operator.eq, 0, "0"),
    "serve_attacks_failed": (operator.eq, 0, "0"),
}


# Targets on how much was run, not on how it went: a quick run reaches none of them.
SIZES = ("fuzz_cases", "chaos_kills", "concurrent_drivers_races")

# Figures reported without a target: what each storage costs is for the user to weigh.
REPORTED = ("storage_ms_per_trial_sqlite", "storage_ms_per_trial_journal",
            "storage_ms_per_trial_postgresql")
BENCH_NAMES = ("fuzz_cases", "fuzz_tracebacks", "fuzz_max_seconds", "fuzz_max_rss_mb",
               "chaos_kills", "trials_lost", "trials_duplicated", "concurrent_drivers_races",
               "concurrent_drivers_duplicated", "concurrent_drivers_lost", "serve_attacks_failed",
               "storage_ms_per_trial_sqlite", "storage_ms_per_trial_journal",
               "storage_ms_per_trial_postgresql")
# (title, script) of each part, in the order they run; a part's own options are added in main.
PARTS = (("fuzz: malformed and hostile specs through `dse validate`", "reliability_fuzz.py"),
         ("chaos: the driver SIGKILLed mid-campaign, then rerun", "reliability_chaos.py"),
         ("drivers: two `dse run` of one campaign at once", "reliability_drivers.py"),
         ("serve: attacks on `dse report --serve`", "reliability_serve.py"),
         ("storage: a trial's cost on each storage", "reliability_storage.py"))


def _bench(script: str, *options: str) -> tuple[dict[str, float], float, int]:
    """Run ``benchmarks/<script>``; its BENCH figures, wall seconds and exit status. Its output
    is passed through, indented (a failing case prints its details there), so that only the
    closing lines of this script start with ``BENCH``."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(HERE / script), *options], cwd=REPO,
                          capture_output=True, text=True)
    seconds = time.monotonic() - started
    sys.stdout.write("".join(f"  {line}\n" for line in done.stdout.splitlines()))
    sys.stderr.write("".join(f"  {line}\n" for line in done.stderr[-5000:].splitlines()))
    figures = {}
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "BENCH":
            try:
                figures[parts[1]] = float(parts[2])
            except ValueError:
                continue
    return figures, seconds, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=520, help="fuzz cases to generate")
    parser.add_argument("--races", type=int, default=10, help="races of two drivers")
    parser.add_argument("--kills", type=int, default=12, help="kills in the loop to reach")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="each part in its quick mode; the sizes not judged")
    args = parser.parse_args()
    started = time.monotonic()
    options = {"reliability_fuzz.py": ["--cases", str(args.cases), "--seed", str(args.seed)],
               "reliability_chaos.py": ["--kills", str(args.kills), "--seed", str(args.seed)],
               "reliability_drivers.py": ["--races", str(args.races), "--seed", str(args.seed)]}
    figures: dict[str, float] = {}
    exits: dict[str, int] = {}
    for title, script in PARTS:
        print(f"== {title}", flush=True)
        found, seconds, code = _bench(script, *(["--quick"] if args.quick
                                                else options.get(script, [])))
        figures.update(found)
        exits[script] = code
        print(f"   {script}: {seconds:.1f} s, exit {code}", flush=True)

    print("== summary")
    print(f"total {time.monotonic() - started:.1f} s")
    missed = []
    for name, (holds, target, meaning) in TARGETS.items():
        value = figures.get(name)
        verdict = ("missing" if value is None else "ok" if holds(value, target)
                   else "not judged (quick)" if args.quick and name in SIZES else "MISSED")
        shown = "-" if value is None else f"{value:g}"
        print(f"{name:30} {shown:>5}   target {meaning:5}  {verdict}")
        if verdict not in ("ok", "not judged (quick)"):
            missed.append(name)
    for name in REPORTED:
        print(f"{name:30} {figures.get(name, -1):g} ms per trial")
        if name not in figures:  # the part printed no line for it (-1 is its own "not measured")
            missed.append(name)
    failed = {script: code for script, code in exits.items() if code}
    if failed:
        print(f"a part exited non-zero ({failed}): see its output above")
    for name in TARGETS:
        print(f"BENCH {name} {figures.get(name, -1):g}")
    for name in REPORTED:
        print(f"BENCH {name} {figures.get(name, -1):g}")
    return 1 if missed or failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
