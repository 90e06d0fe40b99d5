"""Spaces that parse but could never run as written: constraints that no value meets, or
knob values a backend would refuse. `dse validate` names the field before anything is trained."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from dse.backends import BACKENDS
from dse.cli import app
from dse.core.exceptions import BuildError
from dse.core.metrics import METRICS, value_range
from tests.conftest import TINY_SPACE

runner = CliRunner()
CONSTRAINTS = "constraints:\n  - process_rss_peak_mb <= 100000\n"
KNOBS = "      knobs:\n        intra_op_threads: [1]\n"


def _validate(tmp_path: Path, text: str) -> tuple[int, str]:
    folder = tmp_path / "search_spaces"
    folder.mkdir(exist_ok=True)
    path = folder / "space.yaml"
    path.write_text(text)
    result = runner.invoke(app, ["validate", str(path)])
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def _with_constraints(*lines: str) -> str:
    assert CONSTRAINTS in TINY_SPACE
    return TINY_SPACE.replace(CONSTRAINTS, "constraints:\n" + "".join(f"  - {line}\n" for line in lines))


@pytest.mark.parametrize(("lines", "says"), [
    (["process_rss_peak_mb <= 10", "process_rss_peak_mb >= 20"],
     "constraints: constraints 'process_rss_peak_mb >= 20' and 'process_rss_peak_mb <= 10' "
     "contradict: no value of process_rss_peak_mb meets both"),
    # A metric's former name (memory_peak_mb) is the metric under its current name.
    (["memory_peak_mb <= 10", "memory_peak_mb >= 20"],
     "constraints: constraints 'process_rss_peak_mb >= 20' and 'process_rss_peak_mb <= 10' "
     "contradict: no value of process_rss_peak_mb meets both"),
    (["memory_peak_mb <= 10", "process_rss_peak_mb >= 20"],
     "constraints 'process_rss_peak_mb >= 20' and 'process_rss_peak_mb <= 10' contradict"),
    # The tightest bound of each side decides, wherever it is listed.
    (["latency_p99_ms >= 1", "accuracy >= 0.5", "latency_p99_ms <= 50", "latency_p99_ms >= 80"],
     "constraints 'latency_p99_ms >= 80' and 'latency_p99_ms <= 50' contradict"),
    (["accuracy >= 2"], "constraints[0]: constraint 'accuracy >= 2' can never hold: accuracy lies in "
                        "[0, 1]"),
    (["latency_p50_ms <= -1"], "constraint 'latency_p50_ms <= -1' can never hold: latency_p50_ms lies "
                               "in [0, inf]"),
    (["{metric: accuracy, op: '>=', value: .nan}"], "must be a finite number, got nan"),
    (["{metric: process_rss_peak_mb, op: '<=', value: .inf}"], "must be a finite number, got inf"),
])
def test_constraints_no_candidate_can_meet_are_refused(tmp_path: Path, lines: list[str],
                                                       says: str) -> None:
    code, output = _validate(tmp_path, _with_constraints(*lines))
    assert code == 2
    assert "space.yaml: " in output and says in output


@pytest.mark.parametrize("lines", [
    ["accuracy >= 0.5", "accuracy <= 0.9"],
    ["process_rss_peak_mb >= 20", "process_rss_peak_mb <= 20"],  # one value left: allowed
    ["memory_peak_mb >= 20", "process_rss_peak_mb <= 20"],  # the former name: the same metric
    ["accuracy <= 1"],  # always true, harmless
    ["latency_drift_pct <= -5"],  # a drift may be negative (faster at the end)
])
def test_bounds_that_leave_room_are_accepted(tmp_path: Path, lines: list[str]) -> None:
    code, output = _validate(tmp_path, _with_constraints(*lines))
    assert (code, output.strip()) == (0, "ok")


def test_every_range_is_ordered_and_fractions_are_unit_intervals() -> None:
    for name, spec in METRICS.items():
        low, high = value_range(name)
        assert low < high
        if spec.unit == "fraction" and name != "rel_l2_error":
            assert (low, high) == (0.0, 1.0), name
    assert value_range("some_declared_metric") == (float("-inf"), float("inf"))


@pytest.mark.parametrize(("knob", "says"), [
    ("intra_op_threads: [1, abc]", "intra_op_threads: knob 'intra_op_threads' must be an integer "
                                   ">= 1, got 'abc'"),
    ("intra_op_threads: {low: 0, high: 2}", "must be an integer >= 1, got 0"),
    ("intra_op_threads: {low: 1, high: 2.5}", "must be an integer >= 1, got 2.5"),
    ("graph_optimization_level: [all, fastest]",
     "knob 'graph_optimization_level' must be one of ['disable', 'basic', 'extended', 'all'], got "
     "'fastest'"),
])
def test_knob_values_a_backend_refuses_are_named_at_validation(tmp_path: Path, knob: str,
                                                                says: str) -> None:
    assert KNOBS in TINY_SPACE
    code, output = _validate(tmp_path, TINY_SPACE.replace(KNOBS, f"      knobs:\n        {knob}\n"))
    assert code == 2
    assert "space.yaml: deployment.backends.onnxruntime.knobs." in output and says in output
    assert len(output.strip().splitlines()) == 1  # one line for the one bad value


def test_torch_knob_values_are_checked_too(tmp_path: Path) -> None:
    text = TINY_SPACE.replace("        num_threads: [1]\n",
                              "        num_threads: [1]\n        precision_mode: [dtype, mixed]\n")
    code, output = _validate(tmp_path, text)
    assert code == 2
    assert ("deployment.backends.torch.knobs.precision_mode: knob 'precision_mode' must be one of "
            "['dtype', 'autocast'], got 'mixed'") in output


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_each_backend_checks_values_without_its_runtime(name: str) -> None:
    backend = BACKENDS[name]
    backend.check_knob_values({})  # the defaults are valid
    with pytest.raises(BuildError, match=rf"knob '{backend.thread_knob}' must be an integer"):
        backend.check_knob_values({backend.thread_knob: "many"})
    with pytest.raises(BuildError, match="has no knob"):
        backend.check_knob_values({"no_such_knob": 1})
