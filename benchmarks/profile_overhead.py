"""What `dse profile` costs and how much of a call its operator tables account for.

A campaign of the quickstart's CNN (one architecture of `search_spaces/cnn-digits.yaml`, at batch
8) is measured once on this machine's CPU — torch, torch.compile, ONNX Runtime fp32 and int8, and
every other CPU backend installed here whose profiler dse has — then each of its trials is
profiled with `dse profile` in a fresh process, as a user runs it, ROUNDS times, interleaved with
`dse validate` of the same experiment (the command line's own fixed cost: the reference).

Prints, per trial: the profile's wall seconds, its coverage (the share of a profiled call's
wall time its operators account for) and its profiler; then the machine's load, and

    BENCH profile_seconds <median wall seconds of `dse profile` over every trial and round>
    BENCH profile_vs_validate <that median / the median of `dse validate`>
    BENCH op_time_coverage <median over backends of each backend's median coverage>

Targets (issue 21): profile_seconds <= 20 here, op_time_coverage >= 0.8.

Usage: .venv/bin/python benchmarks/profile_overhead.py [--rounds N] [--keep DIR] [--quick]

``--quick``: ONNX Runtime fp32 only, trained one epoch, one round.
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
from pathlib import Path

from study_counts import is_measurement

REPO = Path(__file__).resolve().parents[1]
ROUNDS = 3
ARCH = "{num_stages: [2], depth: [2], width_mult: [1.0], kernel_size: [3], expand_ratio: [4]}"
# Every CPU backend with a per-operator profiler; those not installed here drop out at validate.
CPU_BACKENDS = ("torch", "torch_compile", "onnxruntime", "openvino", "tvm", "litert",
                "executorch", "xla")
# Its quick mode runs real campaigns (Ray, training, measuring): tens of seconds, so
# benchmarks/quick.py starts it first (docs/benchmarks.md has the times).
QUICK_CAMPAIGNS = True
# One of the three longest quick modes: CI's budget leaves them out (quick.py --ci).
QUICK_IN_CI = False
BENCH_NAMES = ("profile_seconds", "profile_vs_validate", "op_time_coverage")


def _installed(backend: str) -> bool:
    from dse.plugins.backends import declaration

    declared = declaration(backend)
    if not declared.profiler:
        return False
    probe = {"torch": "torch", "torch_compile": "torch", "onnxruntime": "onnxruntime",
             "openvino": "openvino", "tvm": "tvm", "litert": "ai_edge_litert",
             "executorch": "executorch", "xla": "jax"}[backend]
    import importlib.util

    return importlib.util.find_spec(probe) is not None


def write_campaign(root: Path, backends: list[str], quick: bool = False) -> Path:
    """The quickstart's CNN at one architecture, on every listed backend, fp32 and int8 (quick:
    fp32, trained one epoch)."""
    precisions = "[fp32]" if quick else "[fp32, int8]"
    epochs = 1 if quick else 8
    knobs = {"torch": "num_threads", "torch_compile": "num_threads",
             "onnxruntime": "intra_op_threads", "openvino": "num_threads",
             "tvm": "num_threads", "litert": "num_threads", "executorch": "num_threads",
             "xla": "num_threads"}
    lines = "\n".join(f"    {b}: {{knobs: {{{knobs[b]}: [1]}}}}" for b in backends)
    (root / "search_spaces").mkdir(parents=True)
    (root / "hw_profiles").mkdir()
    (root / "experiments").mkdir()
    (root / "search_spaces" / "bench.yaml").write_text(f"""\
name: profile-bench
model:
  family: cnn
  dataset: digits
  arch: {ARCH}
training: {{epochs: {epochs}, batch_size: 128, learning_rate: 0.02, seed: 0}}
deployment:
  backends:
{lines}
  precisions: {precisions}
  batch_sizes: [8]
objectives:
  - metric: accuracy
  - metric: latency_p50_ms
""")
    (root / "hw_profiles" / "local-cpu.yaml").write_text(f"""\
name: local-cpu
kind: cpu
backends: [{", ".join(backends)}]
precisions: [fp32, int8]
telemetry: [process_memory]
""")
    # Quick: no second looks (each would be profiled too, and costs a measurement).
    looks = ", second_looks: 0" if quick else ""
    (root / "experiments" / "bench.yaml").write_text(f"""\
name: profile-bench
search_space: ../search_spaces/bench.yaml
devices: [../hw_profiles/local-cpu.yaml]
sampler: {{name: grid}}
budget: {{trials: 64}}
measurement: {{max_seconds: 1.0{looks}}}
""")
    return root / "experiments" / "bench.yaml"


def _timed(args: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "dse.cli", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=900)
    return time.perf_counter() - start, done


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--keep", type=Path, default=None, help="Keep the campaign here.")
    parser.add_argument("--quick", action="store_true",
                        help="ONNX Runtime fp32, one epoch, one round (--rounds ignored)")
    args = parser.parse_args()
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    backends = ["onnxruntime"] if args.quick else [b for b in CPU_BACKENDS if _installed(b)]
    if args.quick:
        args.rounds = 1
    root = Path(tempfile.mkdtemp(prefix="dse-profile-bench-"))
    experiment = write_campaign(root, backends, args.quick)
    seconds, done = _timed(["run", str(experiment), "--no-report"], root)
    if done.returncode != 0:
        sys.exit(f"the campaign failed: {done.stderr.strip().splitlines()[-1:]}")
    print(f"campaign measured in {seconds:.0f} s: backends {backends}")

    from dse import load_campaign, load_experiment

    loaded = load_experiment(experiment)
    (study,) = load_campaign(loaded.run_dir, loaded.storage)
    # One trial per candidate measured: a reuse or a second look profiles the same artifact.
    trials = {t.number: (t.user_attrs["candidate"]["backend"],
                         t.user_attrs["candidate"]["precision"])
              for t in study.trials if t.user_attrs.get("status") == "ok" and is_measurement(t)}
    profile_s: list[float] = []
    validate_s: list[float] = []
    coverage: dict[str, list[float]] = {}
    load_before = os.getloadavg()[0]
    for round_ in range(args.rounds):
        for number, (backend, precision) in sorted(trials.items()):
            took, _ = _timed(["validate", str(experiment)], root)
            validate_s.append(took)
            took, done = _timed(["profile", str(experiment), "--trial", str(number)], root)
            if done.returncode != 0:
                print(f"trial {number} {backend} {precision}: failed: {done.stderr.strip()}")
                continue
            profile_s.append(took)
            folder = loaded.run_dir / "profiles" / "local-cpu" / f"trial-{number:05d}"
            summary = json.loads((folder / "summary.json").read_text())
            share = summary["coverage"]
            if share is not None:
                coverage.setdefault(backend, []).append(share)
            print(f"round {round_ + 1} trial {number} {backend} {precision}: {took:.1f} s, "
                  f"coverage {share if share is None else f'{share:.3f}'}, "
                  f"{summary['profiler'] or summary['profiler_missing']}")
    load_after = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    busy = max(load_before, load_after) > 0.75 * cores
    print(f"load average {load_before:.2f} before, {load_after:.2f} after on {cores} cores: "
          f"{'BUSY — figures are slower than on a quiet machine' if busy else 'quiet'}")
    per_backend = {b: statistics.median(v) for b, v in sorted(coverage.items())}
    print("coverage by backend (median): " + ", ".join(f"{b} {v:.3f}"
                                                         for b, v in per_backend.items()))
    median_profile = statistics.median(profile_s)
    print(f"BENCH profile_seconds {median_profile:.2f}")
    print(f"BENCH profile_vs_validate {median_profile / statistics.median(validate_s):.2f}")
    print(f"BENCH op_time_coverage {statistics.median(per_backend.values()):.3f}")
    if args.keep is not None:
        shutil.copytree(root, args.keep, dirs_exist_ok=True)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
