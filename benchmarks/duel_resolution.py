"""How small a difference do duels order correctly while another process competes for the CPU?

Test pairs: one ONNX model, a chain of MatMul+Relu layers (batch 16, width 128) run by ONNX
Runtime on one thread, against the same model with a few extra layers: a known extra operator
cost, and nothing else different. Each pair's true ratio is measured on the quiet machine, half
before the duels and half after: interleaved blocks of the two for QUIET_SECONDS in all, the
median of the rounds' ratios of block medians. Then each pair is dueled REPEATS times with the
campaign's default duel settings (``DuelSpec()``: ``dse.measure.duel.run_duel`` on the median, as
a p50 objective asks) while a busy loop (HOGS processes, started and ended by PID here) competes
for the CPUs, pairs in turn so that the machine's moments are shared among them. A duel orders a
pair correctly when its verdict names the side the quiet ratio says is faster; ``tie`` is not
wrong, only undecided. The full run also duels the model against a second session of itself
(twins): a verdict there names no difference of configuration, only one of where each
session's memory landed, which the duel's ``min_difference`` margin is there to absorb; their
share decided is printed beside the pairs.

Prints per pair its true difference, the share of duels correct / tied / wrong and their
median seconds, the machine's load, and

    BENCH duel_resolution_pct <smallest true difference, in %, from which every pair at least
                               that far apart was ordered correctly in >= 90% of its duels>
    BENCH duel_wrong_order <duels that named the wrong side, among pairs >= 5% apart (target 0)>
    BENCH duel_seconds <median wall seconds of one duel: warm-up and rounds; builds not included>

Others measure on this machine too; hold the lock:

    flock /tmp/dse-bench.lock .venv/bin/python benchmarks/duel_resolution.py [--quick]

``--quick`` (one pair, two repeats: it checks that the benchmark runs, not how well duels
resolve) takes seconds. ``duel_part(quick)`` returns the three figures for
``benchmarks/measure_calibration.py``.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

# Small layers: both models' weights (a few MB) stay in the shared cache, so the extra layers'
# cost does not hang on what other processes do to it.
BATCH, WIDTH, BASE_LAYERS = 16, 128, 50
# Extra layers of each pair's slower side: about 1, 2, 3, 5, 10 and 20 % more work; 0 (full
# only) duels the model against a second session of itself, where any verdict is a false one.
EXTRA = {"full": (0, 0.5, 1, 1.5, 2.5, 5, 10), "quick": (5,)}
REPEATS = {"full": 12, "quick": 2}
QUIET_SECONDS = {"full": 6.0, "quick": 1.0}
BENCH_NAMES = ("duel_resolution_pct", "duel_wrong_order", "duel_seconds")
HOGS = 1
HOG = "while True: pass"
CORRECT_SHARE = 0.9
WRONG_FROM_PCT = 5.0


def chain_model(layers: int) -> Callable[[], object]:
    """An ONNX Runtime session (one thread) of ``layers`` MatMul+Relu layers, as a bound call on
    a fixed input. A fractional count doubles the model's depth and adds twice the fraction,
    which keeps the extra work a whole number of the same layers."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, weights, previous = [], [], "x"
    for i in range(layers):
        weight = (rng.standard_normal((WIDTH, WIDTH)) / math.sqrt(WIDTH)).astype(np.float32)
        weights.append(numpy_helper.from_array(weight, f"w{i}"))
        nodes += [helper.make_node("MatMul", [previous, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Relu", [f"m{i}"], [f"r{i}"])]
        previous = f"r{i}"
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, WIDTH])],
        [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [BATCH, WIDTH])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    feed, output = {"x": np.ones((BATCH, WIDTH), np.float32)}, [previous]
    return lambda: session.run(output, feed)


def pairs(extras: tuple[float, ...]) -> list[tuple[float, Callable[[], object], Callable[[], object]]]:
    """(extra layers, the base model, the longer one) per pair; a half layer doubles both."""
    found = []
    for extra in extras:
        scale = 2 if extra != int(extra) else 1
        base = BASE_LAYERS * scale
        found.append((extra, chain_model(base), chain_model(base + int(extra * scale))))
    return found


def quiet_rounds(call_a: Callable[[], object], call_b: Callable[[], object],
                 seconds: float) -> list[float]:
    """B's latency over A's on the quiet machine, per round: interleaved blocks for ``seconds``,
    each round's ratio of block medians."""
    from dse.measure.duel import run_duel
    from dse.spec.duel_models import DuelSpec

    spec = DuelSpec()
    run = run_duel(call_a, call_b, max_seconds=seconds, block_seconds=spec.block_seconds,
                   min_rounds=1_000_000)  # never stops early: the truth takes its whole time
    return list(np.array(run.b_block_p50_ms) / np.array(run.a_block_p50_ms))


@contextmanager
def competing(count: int) -> Iterator[list[int]]:
    """``count`` busy loops, ended by PID on the way out."""
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(count)]
    try:
        yield [hog.pid for hog in hogs]
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def _cpu_ticks() -> tuple[int, int]:
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields), sum(fields) - idle


def duel_part(quick: bool, hogs: int = HOGS, verbose: bool = False) -> dict[str, float]:
    """The benchmark's three figures (see the module docstring)."""
    from dse.measure.duel import run_duel
    from dse.measure.duel_stats import A_FASTER, B_FASTER
    from dse.spec.duel_models import DuelSpec

    mode = "quick" if quick else "full"
    spec = DuelSpec()
    tested = pairs(EXTRA[mode])
    half = QUIET_SECONDS[mode] / 2
    before = {extra: quiet_rounds(a, b, half) for extra, a, b in tested}
    outcomes: dict[float, list[str]] = {extra: [] for extra, _, _ in tested}
    seconds: list[float] = []
    ticks = _cpu_ticks()
    with competing(hogs):
        for _ in range(REPEATS[mode]):
            for extra, a, b in tested:
                start = time.perf_counter()
                run = run_duel(a, b, quantiles=(0.5,), max_seconds=spec.max_seconds,
                               block_seconds=spec.block_seconds, min_rounds=spec.min_rounds,
                               margin=spec.min_difference)
                seconds.append(time.perf_counter() - start)
                outcomes[extra].append(run.verdicts()[0.5])
    after = _cpu_ticks()
    busy = 100 * (after[1] - ticks[1]) / max(1, after[0] - ticks[0])
    truth = {extra: float(np.median(before[extra] + quiet_rounds(a, b, half)))
             for extra, a, b in tested}
    differences = {extra: 100 * abs(truth[extra] - 1) for extra in truth}
    twins = outcomes.pop(0, [])
    for extra, said in outcomes.items():  # each verdict against the side the quiet ratio names
        right = A_FASTER if truth[extra] > 1 else B_FASTER
        outcomes[extra] = ["tie" if verdict not in (A_FASTER, B_FASTER)
                           else "correct" if verdict == right else "wrong" for verdict in said]
    rows = sorted(outcomes, key=differences.get)  # type: ignore[arg-type]
    resolution = math.nan
    for position, extra in enumerate(rows):
        if all(outcomes[e].count("correct") / len(outcomes[e]) >= CORRECT_SHARE
               for e in rows[position:]):
            resolution = differences[extra]
            break
    wrong = sum(outcomes[e].count("wrong") for e in rows if differences[e] >= WRONG_FROM_PCT)
    if verbose:
        print(f"load: the machine's CPUs were {busy:.0f}% busy during the duels ({hogs} "
              f"competing busy loop(s) of this benchmark among them; {os.cpu_count()} CPUs); "
              f"load average {os.getloadavg()[0]:.2f}")
        if twins:
            decided = sum(verdict in (A_FASTER, B_FASTER) for verdict in twins)
            print(f"pair of twins (the same model in two sessions; quiet ratio "
                  f"{truth[0]:.4f}): decided {decided}/{len(twins)} (a verdict here names a "
                  f"difference of memory layout beyond the {100 * spec.min_difference:g} % "
                  f"margin, no difference of configuration)")
        for extra in rows:
            done = outcomes[extra]
            print(f"pair +{extra:g} layers: true difference {differences[extra]:.2f} % "
                  f"(quiet ratio {truth[extra]:.4f}); correct "
                  f"{done.count('correct')}/{len(done)}, tie {done.count('tie')}, "
                  f"wrong {done.count('wrong')}")
    return {"duel_resolution_pct": resolution, "duel_wrong_order": float(wrong),
            "duel_seconds": statistics.median(seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="one pair, two repeats")
    parser.add_argument("--hogs", type=int, default=HOGS, help="competing busy loops")
    args = parser.parse_args()
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    found: dict[str, Any] = duel_part(args.quick, args.hogs, verbose=True)
    print(f"BENCH duel_resolution_pct {found['duel_resolution_pct']:.2f}")
    print(f"BENCH duel_wrong_order {int(found['duel_wrong_order'])}")
    print(f"BENCH duel_seconds {found['duel_seconds']:.2f}")


if __name__ == "__main__":
    main()
