"""Reliability figures of issue 9: spec fuzzing and driver chaos, with their targets.

Runs ``reliability_fuzz.py`` (malformed specs through ``dse validate``: each must be rejected
with a clear message, never a traceback) and ``reliability_chaos.py`` (a campaign's driver
SIGKILLed at random points of its search loop and rerun: nothing lost, nothing measured twice),
each in its own process, and collects their ``BENCH`` lines.

Ends with exactly these lines, in this order::

    BENCH fuzz_cases <n>           target >= 200
    BENCH fuzz_tracebacks <n>      target 0
    BENCH chaos_kills <n>          target >= 10 (kills that landed in the search loop)
    BENCH trials_lost <n>          target 0
    BENCH trials_duplicated <n>    target 0

Exit status 1 when a target is missed or a part did not report its figure.
Usage: ``python benchmarks/reliability.py [--cases 300] [--kills 12] [--seed 0]``.
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
TARGETS: dict[str, tuple[Callable[[int, int], bool], int, str]] = {
    "fuzz_cases": (operator.ge, 200, ">= 200"),
    "fuzz_tracebacks": (operator.eq, 0, "0"),
    "chaos_kills": (operator.ge, 10, ">= 10"),
    "trials_lost": (operator.eq, 0, "0"),
    "trials_duplicated": (operator.eq, 0, "0"),
}


def _bench(script: str, *options: str) -> tuple[dict[str, int], float, int]:
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
                figures[parts[1]] = int(parts[2])
            except ValueError:
                continue
    return figures, seconds, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=300, help="fuzz cases to generate")
    parser.add_argument("--kills", type=int, default=12, help="kills in the loop to reach")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.monotonic()

    print("== fuzz: malformed specs through `dse validate`", flush=True)
    fuzz, fuzz_s, fuzz_rc = _bench("reliability_fuzz.py", "--cases", str(args.cases),
                                   "--seed", str(args.seed))
    print("== chaos: the driver SIGKILLed mid-campaign, then rerun", flush=True)
    chaos, chaos_s, chaos_rc = _bench("reliability_chaos.py", "--kills", str(args.kills),
                                      "--seed", str(args.seed))
    figures = {**fuzz, **chaos}

    print("== summary")
    print(f"fuzz:  {fuzz_s:.1f} s, exit {fuzz_rc}; chaos: {chaos_s:.1f} s, exit {chaos_rc}; "
          f"total {time.monotonic() - started:.1f} s")
    missed = []
    for name, (holds, target, meaning) in TARGETS.items():
        value = figures.get(name)
        verdict = "missing" if value is None else "ok" if holds(value, target) else "MISSED"
        print(f"{name:18} {value if value is not None else '-':>5}   target {meaning:5}  {verdict}")
        if verdict != "ok":
            missed.append(name)
    if fuzz_rc or chaos_rc:
        print(f"a part exited non-zero (fuzz {fuzz_rc}, chaos {chaos_rc}): see its output above")
    for name in TARGETS:
        print(f"BENCH {name} {figures.get(name, -1)}")
    return 1 if missed or fuzz_rc or chaos_rc else 0


if __name__ == "__main__":
    raise SystemExit(main())
