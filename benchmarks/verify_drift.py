"""Does `dse verify` tell a regression from run-to-run noise?

A campaign of the quickstart's CNN (one architecture, ONNX Runtime fp32 at batch 32, its threads
left to the device: both cores here) is measured once on this machine's CPU and its trial
exported with `dse export`. The bundle is then verified with `dse verify`, each in a fresh
process as a CI job runs it, ROUNDS times on this quiet machine, interleaved with two slowed
verifications per round:

- threads: on a device profile like the exporting one but with `max_threads: 1` (a smaller
  thread budget on the target: the same runner, forced to fewer threads);
- hog: on the exporting profile while two busy-looping processes take both cores.

Exit 1 is what a CI job acts on: regressed (every run found it slower: a run that suspects a
regression is followed by fresh runs, each in a worker process of its own), or inconclusive (no
check regressed, but other work disturbed the windows even after re-measuring, so no pass can be
certified).

Prints every verification's verdict, first run's p50, runs and seconds, what its fresh runs
found, whether the machine was busy, and

    BENCH verify_false_regressions <quiet verifications that exited 1 (target 0)>
    BENCH verify_detected <share of slowed verifications that exited 1 (target 1)>
    BENCH verify_slowdown_ratio <median slowed p50 / median quiet p50, same run>
    BENCH verify_seconds <median wall seconds of a quiet `dse verify`>
    BENCH verify_quiet_fresh_runs <fresh runs the quiet verifications made, in all>

Usage: .venv/bin/python benchmarks/verify_drift.py [--rounds N] [--keep DIR] [--quick]

``--quick``: one round without the hog (a disturbed verification waits and measures again: the
slowest of the three), the campaign's model trained one epoch, and a suspected regression
confirmed by one fresh run at once (QUICK_CONFIRM), not two 30 s apart.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROUNDS = 20
# Its quick mode runs real campaigns (Ray, training, measuring): tens of seconds, so
# benchmarks/quick.py starts it first (docs/benchmarks.md has the times).
QUICK_CAMPAIGNS = True
# One of the three longest quick modes: CI's budget leaves them out (quick.py --ci).
QUICK_IN_CI = False
QUICK_CONFIRM = ("--confirm-runs", "1", "--confirm-gap-s", "0")
BENCH_NAMES = ("verify_false_regressions", "verify_detected", "verify_slowdown_ratio",
               "verify_seconds", "verify_quiet_fresh_runs")
# A quiet verification beside which other processes took less of the CPUs than this ran on an
# idle machine (the summary counts its exits apart).
IDLE_OTHERS_PCT = 10.0
PROFILE = """\
name: {name}
kind: cpu
backends: [onnxruntime]
precisions: [fp32]
telemetry: [process_memory]
{extra}"""


def write_campaign(root: Path, epochs: int = 8) -> Path:
    for folder in ("search_spaces", "hw_profiles", "experiments"):
        (root / folder).mkdir(parents=True)
    (root / "search_spaces" / "bench.yaml").write_text(f"""\
name: verify-bench
model:
  family: cnn
  dataset: digits
  arch: {{num_stages: [2], depth: [2], width_mult: [1.0], kernel_size: [3], expand_ratio: [4]}}
training: {{epochs: {epochs}, batch_size: 128, learning_rate: 0.02, seed: 0}}
deployment:
  backends:
    onnxruntime: {{}}
  precisions: [fp32]
  batch_sizes: [32]
objectives:
  - metric: accuracy
  - metric: latency_p50_ms
""")
    (root / "hw_profiles" / "local-cpu.yaml").write_text(PROFILE.format(name="local-cpu",
                                                                         extra=""))
    (root / "hw_profiles" / "one-thread.yaml").write_text(
        PROFILE.format(name="local-cpu-one-thread", extra="max_threads: 1\n"))
    (root / "experiments" / "bench.yaml").write_text("""\
name: verify-bench
search_space: ../search_spaces/bench.yaml
devices: [../hw_profiles/local-cpu.yaml]
sampler: {name: grid}
budget: {trials: 1}
measurement: {max_seconds: 1.0}
""")
    return root / "experiments" / "bench.yaml"


def _dse(args: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str], int]:
    """`dse ARGS` in a process group of its own: its seconds, its result, and the CPU ticks it
    and every process it started (Ray's included) used, read from /proc every half second. Not a
    session of its own: Linux shares the CPUs between sessions first (autogroup), which would
    shield it from the hog started in this one."""
    start = time.perf_counter()
    used: dict[int, int] = {}
    command = [sys.executable, "-m", "dse.cli", *args]
    process = subprocess.Popen(command, cwd=cwd, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, process_group=0)
    try:
        while True:
            used.update(_group_ticks(process.pid))
            try:
                stdout, stderr = process.communicate(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if time.perf_counter() - start > 900:
                    raise
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    done = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    return time.perf_counter() - start, done, sum(used.values())


def _group_ticks(group: int) -> dict[int, int]:
    """CPU ticks so far (utime + stime) of every live process of process group ``group``."""
    ticks = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # proc(5): after the command's closing parenthesis, state is field 3, process
            # group 5, utime 14 and stime 15.
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group:
            ticks[int(stat.parent.name)] = int(fields[11]) + int(fields[12])
    return ticks


@contextmanager
def hog(processes: int) -> Iterator[None]:
    """Busy-looping processes, one per core, for the length of the block."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(processes)]
    try:
        yield
    finally:
        for process in hogs:
            process.kill()
            process.wait()


def _cpu_ticks() -> tuple[int, int]:
    """Busy and total ticks of every CPU (/proc/stat's aggregate line: user nice system idle
    iowait irq softirq steal)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return sum(values) - values[3] - values[4] - values[7], sum(values)


def verify(bundle: Path, root: Path, report: Path, *extra: str) -> dict[str, Any]:
    before = _cpu_ticks()
    took, done, mine = _dse(["verify", str(bundle), "--report", str(report),
                             "--cache-dir", str(root / "verify-cache"), *extra], root)
    busy, total = (after - then for after, then in zip(_cpu_ticks(), before, strict=True))
    if done.returncode not in (0, 1):
        sys.exit(f"dse verify failed: {done.stderr.strip()}")
    found = json.loads(report.read_text())
    p50 = found["measured"].get("latency_p50_ms")
    runs = found.get("runs") or [{"disturbed": found["measurement_quality"] == "disturbed"}]
    return {"seconds": took, "verdict": found["verdict"], "p50": p50,
            "exit": done.returncode, "quality": found["measurement_quality"],
            "runs": len(runs), "busy": any(run["disturbed"] for run in runs),
            "confirmation": found.get("confirmation", ""),
            # Other processes' share of the CPUs while it ran (this script's own reading of
            # /proc among them): what "quiet" meant for this one.
            "others_pct": 100 * max(0.0, busy - mine) / total if total > 0 else float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--keep", type=Path, default=None, help="Keep the campaign here.")
    parser.add_argument("--quick", action="store_true",
                        help="one round without the hog, one epoch of training, one fresh run "
                             "to confirm (--rounds ignored)")
    args = parser.parse_args()
    confirm = QUICK_CONFIRM if args.quick else ()
    if args.quick:
        args.rounds = 1
    root = Path(tempfile.mkdtemp(prefix="dse-verify-bench-"))
    experiment = write_campaign(root, epochs=1 if args.quick else 8)
    took, done, _ = _dse(["run", str(experiment), "--no-report"], root)
    if done.returncode != 0:
        sys.exit(f"the campaign failed: {done.stderr.strip().splitlines()[-1:]}")
    bundle = root / "bundle"
    _, done, _ = _dse(["export", str(experiment), "--trial", "0", "--out", str(bundle)], root)
    if done.returncode != 0:
        sys.exit(f"dse export failed: {done.stderr.strip()}")
    recorded = json.loads((bundle / "measurements.json").read_text())["metrics"]
    print(f"campaign measured in {took:.0f} s; recorded p50 {recorded['latency_p50_ms']:.4f} ms "
          f"[{recorded['latency_p50_ci_low_ms']:.4f}, {recorded['latency_p50_ci_high_ms']:.4f}]")
    cores = os.cpu_count() or 1
    quiet: list[dict[str, Any]] = []
    slowed: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        report = root / f"report-{round_}"
        # The 1-minute load average as each quiet verification starts: above 0.75 per core, the
        # machine was busy with other work (the hog rounds' own load decays within a minute).
        load = os.getloadavg()[0]
        quiet.append({"load": load, **verify(bundle, root, report.with_suffix(".quiet.json"),
                                             *confirm)})
        slowed.append({"how": "threads", **verify(
            bundle, root, report.with_suffix(".threads.json"), "--profile",
            str(root / "hw_profiles" / "one-thread.yaml"), *confirm)})
        this_round = [quiet[-1], slowed[-1]]
        if not args.quick:
            with hog(cores):
                slowed.append({"how": "hog", **verify(bundle, root,
                                                      report.with_suffix(".hog.json"))})
            this_round.append(slowed[-1])
        for found in this_round:
            print(f"round {round_ + 1} {found.get('how', 'quiet'):<7} {found['verdict']:<9} "
                  f"p50 {found['p50']:.4f} ms ({found['quality']}), {found['runs']} run(s), "
                  f"{found['seconds']:.1f} s"
                  + (f", load {found['load']:.2f}" if "load" in found else "")
                  + f", others {found['others_pct']:.0f}% of the CPUs"
                  + (f": {found['confirmation']}" if found["confirmation"] else ""), flush=True)
    # The load average lags by a minute (the hog rounds raise it): whether other work took a
    # quiet verification's CPU is its runs' windows' own verdict (cpu_interference).
    busy = [found for found in quiet if found["busy"]]
    print(f"load average {quiet[0]['load']:.2f} before the first verification; "
          f"{len(busy)} of {len(quiet)} quiet verifications had a disturbed window"
          + (": other work ran beside them" if busy else ": the machine was quiet"))
    others = [found["others_pct"] for found in quiet]
    idle = [found for found in quiet if found["others_pct"] < IDLE_OTHERS_PCT]
    print(f"other processes took a median {statistics.median(others):.0f}% (most "
          f"{max(others):.0f}%) of the CPUs during the quiet verifications; "
          f"{sum(found['exit'] == 1 for found in idle)} of the {len(idle)} with under "
          f"{IDLE_OTHERS_PCT:g}% exited 1")
    # What a CI job sees: exit 1 (regressed, inconclusive on a disturbed window, or failed).
    false_alarms = sum(found["exit"] == 1 for found in quiet)
    caught = [found["exit"] == 1 for found in slowed]
    for how in dict.fromkeys(found["how"] for found in slowed):
        mine = [f for f in slowed if f["how"] == how]
        verdicts = statistics.multimode([f["verdict"] for f in mine])
        print(f"{how}: {sum(f['exit'] == 1 for f in mine)} of {len(mine)} caught (exit 1; "
              f"verdicts {sorted({f['verdict'] for f in mine})}, most often {verdicts}), "
              f"median p50 {statistics.median(f['p50'] for f in mine):.4f} ms")
    quiet_p50 = statistics.median(found["p50"] for found in quiet)
    print(f"quiet: median p50 {quiet_p50:.4f} ms, verdicts "
          f"{[found['verdict'] for found in quiet]}")
    print(f"BENCH verify_false_regressions {false_alarms}")
    print(f"BENCH verify_detected {sum(caught) / len(caught):.2f}")
    print(f"BENCH verify_slowdown_ratio "
          f"{statistics.median(found['p50'] for found in slowed) / quiet_p50:.2f}")
    print(f"BENCH verify_seconds {statistics.median(found['seconds'] for found in quiet):.2f}")
    print(f"BENCH verify_quiet_fresh_runs {sum(found['runs'] - 1 for found in quiet)}")
    if args.keep is not None:
        shutil.copytree(root, args.keep, dirs_exist_ok=True)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
