"""Run every benchmark's quick mode and check that it still prints what it promises.

A benchmark is a script of ``benchmarks/`` with a module-level ``BENCH_NAMES`` tuple: the names of
the ``BENCH <name> <value>`` lines it prints (its docstring says what each means). Each runs as
``python benchmarks/<script> --quick`` (small sizes, one seed) in a process of its own, one after
the other, from the repository root, with fresh caches (``DSE_CACHE_HOME``, ``DSE_DEVICE_CACHE``:
what a new machine has, so that the times are CI's and nothing is left behind). It passes when
it exits 0 having printed a ``BENCH`` line for every declared name; the values are not judged (a
quick run is too short for them to mean anything: the full runs' figures are dated in
docs/benchmarks.md). A script that cannot measure here (the GPU check, without a CUDA GPU)
prints ``SKIP <what and why>``, exits 0 and passes as skipped.

A benchmark whose quick mode runs others' (``reliability.py`` runs its parts as scripts,
``measure_calibration.py`` calls two benchmarks' functions) lists them in a module-level
``PARTS`` tuple of ``(title, script)``: those are checked inside it, their lines among its output,
not run a second time.

``--jobs N`` runs up to N quick modes at once, each in its own process with caches of its own (CI
runs two: a quick mode is mostly one Python thread, and their figures are not judged). The
benchmarks that declare ``QUICK_CAMPAIGNS = True`` — their quick modes run real campaigns (Ray,
training, measuring), tens of seconds each — start first, so that the runs end together rather
than behind one long one.

With ``--ci`` (the set sized for CI) it leaves out the benchmarks that also declare ``QUICK_IN_CI =
False``: the longest quick modes (27-90 s each here), which would take CI past its budget
(BUDGET_S, wall seconds, for the quick modes of ``--ci``; docs/benchmarks.md has the times). It
names them at the end; the parts of one left out run on their own.

Names, parts and the two flags are read from each script's source (``ast``), not by importing it,
so a script whose imports broke fails as itself, with its traceback. A script with a
``__main__`` block but no ``BENCH_NAMES`` is an error, so that a new benchmark cannot be left
out; a module without one (``vendor_tools.py``, ``watched_timing.py``, ``study_counts.py``,
``tiny_space.py``) is a helper the benchmarks import.

Prints one line per run as it ends (``ok``, ``skip`` or ``FAIL``, its seconds), the reason and the
end of the output of each failure, and the wall time of all of them (against BUDGET_S with
``--ci``). Exit status 1 when any failed.

Usage: ``python benchmarks/quick.py [SCRIPT ...] [--ci] [--jobs 2] [--timeout 300]`` (default:
every benchmark, one at a time).
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# Wall seconds the quick modes of --ci may take together (`make bench-quick`: two at a time, beside
# the lint): CI (.ci/run) must end within 25 minutes, and the tests take most of that
# (docs/benchmarks.md).
BUDGET_S = 150.0
TIMEOUT_S = 300.0  # one script: a hang fails it, not the whole CI job
SKIP_PREFIX = "SKIP "
TAIL_LINES = 25


@dataclass(frozen=True)
class Benchmark:
    """A script, the BENCH names its quick mode must print, the benchmarks it runs, whether its
    quick mode runs real campaigns (started first) and whether CI runs it."""

    path: Path
    names: tuple[str, ...]
    parts: tuple[str, ...] = ()
    campaigns: bool = False
    in_ci: bool = True


@dataclass(frozen=True)
class Outcome:
    """How one quick run went: ``status`` ok, skip or FAIL, and why (empty when ok)."""

    script: str
    status: str
    seconds: float
    why: str = ""
    tail: str = ""


def _literal(tree: ast.Module, name: str) -> object:
    """The value of the module-level assignment to ``name``; None when there is none."""
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return ast.literal_eval(value)
    return None


def declared(path: Path) -> Benchmark | None:
    """The script's ``BENCH_NAMES``, ``PARTS``, ``QUICK_CAMPAIGNS`` and ``QUICK_IN_CI``; None
    when it declares no BENCH_NAMES. ValueError naming the script when one is not a literal of
    the documented shape."""
    tree = ast.parse(path.read_text(), filename=str(path))
    try:
        names, parts = _literal(tree, "BENCH_NAMES"), _literal(tree, "PARTS") or ()
        campaigns, in_ci = _literal(tree, "QUICK_CAMPAIGNS"), _literal(tree, "QUICK_IN_CI")
    except ValueError as exc:
        raise ValueError(f"{path.name}: BENCH_NAMES, PARTS and the QUICK_ flags must be literals "
                         f"({exc})") from exc
    if names is None:
        return None
    if not (isinstance(names, tuple) and names and all(isinstance(n, str) for n in names)):
        raise ValueError(f"{path.name}: BENCH_NAMES must be a non-empty tuple of strings, "
                         f"got {names!r}")
    if not (isinstance(parts, tuple) and all(
            isinstance(p, tuple) and len(p) == 2 and all(isinstance(x, str) for x in p)
            for p in parts)):
        raise ValueError(f"{path.name}: PARTS must be a tuple of (title, script) pairs, "
                         f"got {parts!r}")
    for flag, value in (("QUICK_CAMPAIGNS", campaigns), ("QUICK_IN_CI", in_ci)):
        if value not in (None, True, False):
            raise ValueError(f"{path.name}: {flag} must be True or False, got {value!r}")
    return Benchmark(path, names, tuple(script for _, script in parts), campaigns is True,
                     in_ci is not False)


def has_main(path: Path) -> bool:
    """Whether the script runs as a program (an ``if __name__ == "__main__"`` block)."""
    return '__name__ == "__main__"' in path.read_text()


def discover(folder: Path = HERE) -> list[Benchmark]:
    """Every benchmark in ``folder``, by name. ValueError naming each script that runs as a
    program but declares no BENCH_NAMES, and each part that is no benchmark."""
    found, undeclared = [], []
    for path in sorted(folder.glob("*.py")):
        if path.name == Path(__file__).name:
            continue
        bench = declared(path)
        if bench is not None:
            found.append(bench)
        elif has_main(path):
            undeclared.append(path.name)
    if undeclared:
        raise ValueError(f"{', '.join(undeclared)}: a script with a __main__ block must declare "
                         "the BENCH lines it prints in a module-level BENCH_NAMES tuple")
    known = {b.path.name for b in found}
    strays = [f"{b.path.name}: {part}" for b in found for part in b.parts if part not in known]
    if strays:
        raise ValueError(f"PARTS that are no benchmark of {folder}: {', '.join(strays)}")
    return found


def to_run(benches: list[Benchmark], wanted: set[str] | None = None, ci: bool = False
           ) -> list[tuple[Benchmark, tuple[str, ...]]]:
    """(benchmark, the names its output must hold) of each run, of those ``wanted`` (default:
    all; ``ci``: those CI runs), those that run campaigns first: a part of another benchmark that
    runs is checked inside it (its names added to that one's), else it runs on its own."""
    by_name = {b.path.name: b for b in benches}
    chosen = sorted((b for b in benches if (wanted is None or b.path.name in wanted)
                     and (b.in_ci or not ci)), key=lambda b: not b.campaigns)
    inside = {part for b in chosen for part in b.parts}
    runs = []
    for bench in chosen:
        if bench.path.name in inside:
            continue
        names = bench.names + tuple(n for part in bench.parts for n in by_name[part].names)
        runs.append((bench, tuple(dict.fromkeys(names))))
    return runs


def printed_names(output: str) -> set[str]:
    """The names of the ``BENCH <name> <value>`` lines in ``output`` (indented ones too: a
    benchmark passes its parts' output on indented)."""
    return {parts[1] for parts in (line.split() for line in output.splitlines())
            if len(parts) == 3 and parts[0] == "BENCH"}


def judge(script: str, names: tuple[str, ...], code: int, output: str,
          seconds: float) -> Outcome:
    """ok when it exited 0 with every line of ``names``; skip when it exited 0 saying SKIP and
    printed no BENCH line; FAIL otherwise, naming the exit status or the missing lines."""
    tail = "\n".join(output.splitlines()[-TAIL_LINES:])
    if code != 0:
        return Outcome(script, "FAIL", seconds, f"exit status {code}", tail)
    printed = printed_names(output)
    skips = [line for line in output.splitlines() if line.startswith(SKIP_PREFIX)]
    if skips and not printed:
        return Outcome(script, "skip", seconds, skips[0].removeprefix(SKIP_PREFIX))
    missing = [name for name in names if name not in printed]
    if missing:
        lines = ", ".join(f"BENCH {name}" for name in missing)
        return Outcome(script, "FAIL", seconds, f"no line {lines}", tail)
    return Outcome(script, "ok", seconds)


def run(bench: Benchmark, names: tuple[str, ...], timeout_s: float, env: dict[str, str]
        ) -> Outcome:
    """The benchmark's quick mode in a process of its own, from the repository root."""
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, str(bench.path), "--quick"], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        return Outcome(bench.path.name, "FAIL", time.perf_counter() - started,
                       f"still running after {timeout_s:g} s",
                       "\n".join(output.splitlines()[-TAIL_LINES:]))
    return judge(bench.path.name, names, done.returncode, done.stdout,
                 time.perf_counter() - started)


_PRINTING = threading.Lock()


def report(outcome: Outcome, parts: tuple[str, ...]) -> None:
    line = f"{outcome.status:4} {outcome.script:26} {outcome.seconds:6.1f} s"
    if parts:
        line += f"  (with {', '.join(parts)})"
    text = line + (f"  {outcome.why}" if outcome.why else "") + "\n"
    if outcome.status == "FAIL" and outcome.tail:
        text += "".join(f"     | {tail}\n" for tail in outcome.tail.splitlines())
    with _PRINTING:  # runs end in other threads: one report at a time, whole
        print(text, end="", flush=True)


def run_all(runs: list[tuple[Benchmark, tuple[str, ...]]], jobs: int, timeout_s: float,
            cache: Path) -> list[Outcome]:
    """Every run, up to ``jobs`` at once in the order given, each reported as it ends; each with
    fresh caches of its own under ``cache`` (two at once never share a cache file)."""

    def one(bench: Benchmark, names: tuple[str, ...]) -> Outcome:
        own = cache / bench.path.stem
        env = dict(os.environ, PYTHONUNBUFFERED="1", DSE_CACHE_HOME=str(own / "user"),
                   DSE_DEVICE_CACHE=str(own / "device"))
        outcome = run(bench, names, timeout_s, env)
        report(outcome, bench.parts)
        return outcome

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(one, bench, names) for bench, names in runs]
        return [future.result() for future in futures]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("scripts", nargs="*", help="run only these (e.g. reliability_drivers.py)")
    parser.add_argument("--ci", action="store_true",
                        help="leave out the benchmarks that declare QUICK_IN_CI = False")
    parser.add_argument("--jobs", type=int, default=1,
                        help="quick modes run at once, each in its own process (default 1)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S,
                        help=f"seconds one quick run may take (default {TIMEOUT_S:g})")
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    try:
        benches = discover()
    except ValueError as exc:
        print(f"FAIL {exc}")
        return 1
    wanted = {Path(name).name for name in args.scripts} or None
    unknown = (wanted or set()) - {b.path.name for b in benches}
    if unknown:
        parser.error(f"not a benchmark of {HERE}: {', '.join(sorted(unknown))}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dse-quick-cache-") as cache:
        outcomes = run_all(to_run(benches, wanted, args.ci), args.jobs, args.timeout,
                           Path(cache))
    wall = time.perf_counter() - started
    failed = [o.script for o in outcomes if o.status == "FAIL"]
    over = f", OVER CI's budget of {BUDGET_S:.0f} s" if args.ci and wall > BUDGET_S else ""
    print(f"{len(outcomes)} quick runs in {wall:.0f} s ({sum(o.seconds for o in outcomes):.0f} s "
          f"of runs, {args.jobs} at a time){over}; "
          + (f"FAILED: {', '.join(failed)}" if failed else "all passed"))
    left_out = [b.path.name for b in benches if args.ci and not b.in_ci
                and (wanted is None or b.path.name in wanted)]
    if left_out:
        print(f"not run here (QUICK_IN_CI = False: the longest, over CI's budget; "
              f"`python benchmarks/quick.py --jobs 2` runs them): {', '.join(left_out)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
