"""The recorded search table (tests/fixtures/search/) and the benchmark that replays it."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import pytest

from dse.core.candidate import Candidate
from dse.search.evaluators.dispatchers import ReplayEvaluator, space_parameter_names
from dse.search.space import suggest_candidate
from dse.spec import RangeParam, SearchSpace
from dse.spec.loading import load_model, load_profile
from tests.benchmark_scripts import load_benchmark

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "tests" / "fixtures" / "search" / "cnn-digits-grid.csv"
SPACE = REPO / "benchmarks" / "search_table" / "space.yaml"
PROFILE = REPO / "hw_profiles" / "local-cpu.yaml"


class RowAnswers:
    """Answers a trial's questions from one table row, refusing values the space does not offer
    (so a row that is not a point of the space fails the test)."""

    def __init__(self, row: Mapping[Hashable, Any]) -> None:
        self.row = row

    def _value(self, name: str) -> Any:
        key = "precision" if name.startswith("precision.") else name
        return self.row[key]

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        value = self._value(name)
        matches = [c for c in choices if c == value and type(c) is not bool]
        assert matches, f"{name} = {value!r} is not among the offered {list(choices)}"
        return matches[0]

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1,
                    log: bool = False) -> int:
        value = int(self._value(name))
        assert low <= value <= high and (value - low) % step == 0, f"{name} = {value}"
        return value

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float:
        value = float(self._value(name))
        assert low <= value <= high, f"{name} = {value}"
        return value


@pytest.fixture(scope="module")
def space() -> SearchSpace:
    return load_model(SPACE, SearchSpace)


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return pd.read_csv(TABLE)


def test_table_is_small_and_documented(frame: pd.DataFrame) -> None:
    assert TABLE.stat().st_size < 200_000
    readme = (TABLE.parent / "README.md").read_text()
    assert "record_search_table.py" in readme and "CPU" in readme
    assert set(frame["status"]) <= {"ok", "failed", "infeasible"}
    assert (frame["status"] == "ok").sum() > len(frame) // 2


def test_every_row_is_a_candidate_of_the_space_and_replays(space: SearchSpace,
                                                           frame: pd.DataFrame) -> None:
    profile = load_profile(PROFILE)
    replay = ReplayEvaluator(TABLE, space)
    ids = set()
    for row in frame.to_dict("records"):
        candidate: Candidate = suggest_candidate(RowAnswers(row), space, profile)
        ids.add(candidate.candidate_id)
        if row["status"] == "ok":
            metrics = replay(candidate)
            assert metrics["accuracy"] == pytest.approx(row["accuracy [fraction]"])
            assert math.isfinite(metrics["latency_p99_ms"])
            # Recorded before memory_peak_mb was renamed: its column is read under the new name.
            assert metrics["process_rss_peak_mb"] == pytest.approx(row["memory_peak_mb [MB]"])
            assert "memory_peak_mb" not in metrics
    assert len(ids) == len(frame)  # one row per candidate
    # Complete: as many rows as the space offers on the device (no knobs in this space).
    assert space.model is not None and space.deployment is not None
    arch = 1
    for spec in space.model.arch.values():
        assert not isinstance(spec, RangeParam), "the recorded space has choices only"
        arch *= len(list(spec))
    stacks = 4  # onnxruntime fp32/int8, torch fp32/bf16 (the capability table's cut)
    assert len(frame) == arch * stacks * len(space.deployment.batch_sizes)
    assert set(space_parameter_names(space)) <= set(frame.columns)


def test_grid_finds_the_whole_front_within_the_table() -> None:
    bench = load_benchmark("search_efficiency")
    table = bench.load_table()
    assert table.true_hypervolume > 0
    run = bench.search_run(table, "grid", 0, max_asks=table.rows)
    assert run.distinct <= table.rows
    assert run.needed[0.95] is not None and run.needed[0.99] is not None
    assert 1 <= run.needed[0.95] <= run.needed[0.99] <= table.rows


def test_short_benchmark_gives_numbers_in_range() -> None:
    bench = load_benchmark("search_efficiency")
    table = bench.load_table()
    summaries = bench.benchmark(table, ["random", "tpe"], [0, 1], max_asks=40)
    assert set(summaries) == {"random", "tpe"}
    for summary in summaries.values():
        assert summary.seeds == 2
        for target in bench.TARGETS:
            median = summary.median[target]
            assert math.isinf(median) or 1 <= median <= 40
            assert 0 <= summary.missed[target] <= 2
        assert summary.median[0.95] <= summary.median[0.99]


@pytest.mark.parametrize("name", ["onnx-deploy", "onnx-deploy-1core", "cnn-digits-1core",
                                  "transformer"])
def test_every_later_table_holds_each_candidate_of_its_space_once(name: str) -> None:
    from dse.search.candidate_space import CandidateSpace
    from dse.search.evaluators.dispatchers import InfeasibleCandidate

    bench = load_benchmark("search_efficiency")
    table = bench.load_table(name)
    listing = CandidateSpace(table.space, table.profile).listing(100_000)
    assert listing is not None and len(listing) == table.rows
    assert 1 <= table.front_size < table.rows // 2 and table.true_hypervolume > 0
    ok = 0
    for params in listing:
        candidate = suggest_candidate(optuna.trial.FixedTrial(params), table.space, table.profile)
        try:
            metrics = table.evaluator(candidate)
        except InfeasibleCandidate as failed:  # recorded as failed: the reason is kept
            assert "failed" in str(failed) or "not in the recorded table" in str(failed), failed
            continue
        ok += all(math.isfinite(metrics[m]) for m in table.objectives)
    assert ok > len(listing) // 3


def test_a_second_device_can_start_from_the_first_devices_front() -> None:
    bench = load_benchmark("search_efficiency")
    first, second = bench.load_table("onnx-deploy"), bench.load_table("onnx-deploy-1core")
    source = bench.search_run(first, "surrogate", 0, targets=(1.01,), max_distinct=20).study
    seeds = bench.front_seeds(source, first, cap=3)
    assert 1 <= len(seeds) <= 3
    run = bench.search_run(second, "surrogate", 0, seeds=seeds)
    asked = [t.params for t in run.study.trials[:len(seeds)]]
    assert asked == seeds  # the seeds are measured first, in order
    assert run.needed[0.99] is not None
