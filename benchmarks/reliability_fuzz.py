"""Fuzz `dse validate` with malformed specs generated from the shipped ones (tests/spec/malformed.py).

Prints each case that was not rejected cleanly, then `BENCH fuzz_cases <n>`, `BENCH fuzz_valid <n>`,
`BENCH fuzz_bad_exit <n>` and `BENCH fuzz_tracebacks <n>`. Exit status 1 when any case misbehaved.
Usage: python benchmarks/reliability_fuzz.py [--cases 300] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the generators live with the tests (hypothesis is a dev dependency)

from tests.spec.malformed import fuzz_cases, run_case  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.perf_counter()
    total = valid = bad_exit = tracebacks = 0
    with tempfile.TemporaryDirectory() as folder:
        for case in fuzz_cases(args.cases, args.seed):
            total += 1
            result = run_case(case, Path(folder))
            if result.valid:
                valid += 1
                continue
            tracebacks += result.traceback
            if not result.traceback and not (result.rejected_cleanly and result.names_field):
                bad_exit += 1
            if result.traceback or not (result.rejected_cleanly and result.names_field):
                print(f"{case.name} ({case.mutation}): exit {result.exit_code}\n"
                      f"{result.output[-1500:]}", file=sys.stderr)
    print(f"{total} cases in {time.perf_counter() - started:.1f} s: {total - valid} rejected, "
          f"{valid} valid after mutation")
    print(f"BENCH fuzz_valid {valid}")
    print(f"BENCH fuzz_bad_exit {bad_exit}")
    print(f"BENCH fuzz_cases {total}")
    print(f"BENCH fuzz_tracebacks {tracebacks}")
    return 1 if tracebacks or bad_exit else 0


if __name__ == "__main__":
    sys.exit(main())
