"""How long the first commands of a new user's hour take: `dse validate` of every shipped YAML
file, and `dse run` of a campaign that is already finished (which must start no Ray).

- validate: `dse validate` of search_spaces/*.yaml, hw_profiles/*.yaml, hw_profiles/replay/*.yaml
  and experiments/*.yaml, in a fresh process each time, as a user types it again after a first
  time: the factory spaces' model checks kept as passes (dse.models.check_verdicts) in a user
  cache (DSE_CACHE_HOME) of the benchmark's own, filled by one untimed run before the rounds.
- validate_cold: the same with an empty user cache each round: the factory spaces' models are
  built (torch and transformers imported), as on a first `dse validate` or after an edit.
- finished: a campaign of the quickstart's kind cut to one candidate (one CNN architecture, ONNX
  Runtime fp32 at batch 1) on a real local-cpu device. Run once to its end (an embedded Ray
  starts, the model is trained, exported and timed), then `dse run` of it again, which finds the
  device's budget met and only writes the report. Every run gets a Ray temp root of its own
  (RAY_TMPDIR): the first run's must hold Ray's session, each rerun's must stay empty — the proof
  that a finished campaign starts no Ray, not an inference from its time.
- reference: `dse --help` (the interpreter, typer and rich starting; no dse work), in the same
  rounds, so each figure is also read as a ratio to what any `dse` command costs here.

The three interleave, their order rotated each round, so a busy spell of the shared machine falls
on all alike; figures are medians over the rounds. Prints each round, the load average before
the first and the machine's busy share over the timed rounds (/proc/stat, this benchmark
included), then

    BENCH validate_seconds <median of validate>           (target 3)
    BENCH validate_cold_seconds <median of validate_cold>
    BENCH finished_campaign_seconds <median of finished>  (target 2)

Usage: .venv/bin/python benchmarks/first_hour.py [--rounds N] [--quick]

``--quick``: one round, and only QUICK_FILES validated (an experiment, its space and profile).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tiny_space import tiny_space

REPO = Path(__file__).resolve().parents[1]
ROUNDS = 7
SHIPPED = ("search_spaces/*.yaml", "hw_profiles/*.yaml", "hw_profiles/replay/*.yaml",
           "experiments/*.yaml")
TARGETS = {"validate": 3.0, "validate_cold": 3.0, "finished": 2.0}
# Its quick mode runs real campaigns (Ray, training, measuring): tens of seconds, so
# benchmarks/quick.py starts it first (docs/benchmarks.md has the times).
QUICK_CAMPAIGNS = True
# Out of CI since 2026-12-07 evening: its quick mode (42-53 s of CI's 143 s of quick runs) took
# CI past its 25 minutes (docs/benchmarks.md, "The quickstart and the test suite").
QUICK_IN_CI = False
QUICK_FILES = ("experiments/quickstart.yaml",)
BENCH_NAMES = ("validate_seconds", "validate_cold_seconds", "finished_campaign_seconds")


def write_campaign(root: Path) -> Path:
    """One candidate, a tiny budget: the first run is short, the reruns have nothing to do."""
    for folder in ("search_spaces", "hw_profiles", "experiments"):
        (root / folder).mkdir(parents=True)
    (root / "search_spaces" / "one.yaml").write_text(tiny_space("first-hour", [1]))
    (root / "hw_profiles" / "local-cpu.yaml").write_text("""\
name: local-cpu
kind: cpu
backends: [onnxruntime]
precisions: [fp32]
telemetry: [process_memory]
""")
    (root / "experiments" / "first-hour.yaml").write_text("""\
name: first-hour
search_space: ../search_spaces/one.yaml
devices: [../hw_profiles/local-cpu.yaml]
sampler: {name: grid}
budget: {trials: 1}
measurement: {max_seconds: 0.5}
""")
    return root / "experiments" / "first-hour.yaml"


def _dse(args: list[str], ray_root: Path | None = None, cache: Path | None = None) -> float:
    """Wall seconds of one `dse` process; exits the benchmark if the command fails."""
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    if ray_root is not None:
        env["RAY_TMPDIR"] = str(ray_root)
    if cache is not None:
        env["DSE_CACHE_HOME"] = str(cache)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "dse.cli", *args], cwd=REPO, env=env, text=True,
                          capture_output=True, timeout=900)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"dse {' '.join(args[:2])} failed (exit {done.returncode}): "
                 f"{(done.stderr.strip() or done.stdout.strip())[-2000:]}")
    return seconds


def _cpu_ticks() -> tuple[int, int]:
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields), sum(fields) - fields[3] - fields[4]


def _started_ray(ray_root: Path) -> bool:
    return any((ray_root / "ray").glob("session_*"))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--quick", action="store_true",
                        help=f"one round, validating {', '.join(QUICK_FILES)} only")
    args = parser.parse_args()
    files = [str(p.relative_to(REPO)) for pattern in SHIPPED for p in sorted(REPO.glob(pattern))]
    if args.quick:
        args.rounds, files = 1, list(QUICK_FILES)
    # Short: Ray's socket paths under its temp root must fit in 107 characters.
    work = Path(tempfile.mkdtemp(prefix="dse-fh-", dir="/tmp"))
    try:
        experiment = write_campaign(work / "campaign")
        first_root = work / "r0"
        took = _dse(["run", str(experiment)], first_root)
        if not _started_ray(first_root):
            sys.exit("the first run left no Ray session in its RAY_TMPDIR: the check below would "
                     "prove nothing")
        print(f"campaign finished in {took:.1f} s (Ray started, 1 candidate trained and timed); "
              f"{len(files)} shipped YAML files")
        commands: dict[str, list[str]] = {"reference": ["--help"], "validate": ["validate", *files],
                                          "validate_cold": ["validate", *files],
                                          "finished": ["run", str(experiment)]}
        kept = work / "kept-checks"
        _dse(["validate", *files], cache=kept)  # the first time: passes kept for the rounds
        seconds: dict[str, list[float]] = {name: [] for name in commands}
        load = os.getloadavg()[0]
        before = _cpu_ticks()
        for round_ in range(args.rounds):
            names = list(commands)
            for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                ray_root = work / f"r{round_ + 1}-{name}"
                cache = work / f"r{round_ + 1}-empty-cache" if name == "validate_cold" else kept
                seconds[name].append(_dse(commands[name], ray_root, cache))
                if _started_ray(ray_root):
                    sys.exit(f"round {round_ + 1}: `dse {commands[name][0]}` started Ray")
            print(f"round {round_ + 1}: " + ", ".join(
                f"{name} {values[-1]:.2f} s" for name, values in seconds.items()), flush=True)
        after = _cpu_ticks()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    busy = 100 * (after[1] - before[1]) / max(after[0] - before[0], 1)
    print(f"load average {load:.2f} before the rounds on {os.cpu_count()} CPUs; machine busy "
          f"{busy:.0f}% over them (this benchmark included: one `dse` process at a time, so "
          f"about {100 / (os.cpu_count() or 1):.0f}% of it is its own)"
          + ("; other work shared the machine" if load > 0.75 * (os.cpu_count() or 1) else ""))
    print(f"no Ray session in any rerun's RAY_TMPDIR ({args.rounds} finished runs)")
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    for name in ("validate", "validate_cold", "finished"):
        ratios = [a / b for a, b in zip(seconds[name], seconds["reference"], strict=True)]
        print(f"{name:9} median {medians[name]:.2f} s (range {min(seconds[name]):.2f}-"
              f"{max(seconds[name]):.2f}), target {TARGETS[name]:.0f} s; "
              f"{statistics.median(ratios):.1f}x `dse --help` in the same round "
              f"(median {medians['reference']:.2f} s)")
    print(f"BENCH validate_seconds {medians['validate']:.2f}")
    print(f"BENCH validate_cold_seconds {medians['validate_cold']:.2f}")
    print(f"BENCH finished_campaign_seconds {medians['finished']:.2f}")


if __name__ == "__main__":
    main()
