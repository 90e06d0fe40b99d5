"""The per-operator table: ONNX Runtime's node events read into operators with the FLOPs and
bytes of the shapes they ran at, and each operator judged against a roofline."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dse.backends.onnxruntime.profiler import node_records, profiled_events
from dse.backends.op_profile import OpRecord, ProfilerMissing
from dse.models.op_costs import cost_from_shapes
from dse.profiling.op_table import OVERHEAD_FACTOR, op_table, verdict, verdict_counts
from dse.profiling.summary import (
    COMPUTE_BOUND,
    MEMORY_BOUND,
    OP_COLUMNS,
    OVERHEAD_BOUND,
    UNKNOWN,
    Ceilings,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ort_profiles"
# A roof with its ridge at 10 FLOP/B: 100 GFLOP/s, 10 GB/s.
ROOF = Ceilings(100.0, 10.0, "test")


def test_cost_from_shapes_counts_the_base_op_of_a_fusion() -> None:
    conv = ([("float", (4, 1, 8, 8)), ("float", (16, 1, 3, 3))], [("float", (4, 16, 8, 8))])
    flops, nbytes = cost_from_shapes("FusedConv", *conv)
    assert flops == 2 * 4 * 16 * 8 * 8 * 1 * 3 * 3
    assert nbytes == 4 * (4 * 64 + 16 * 9 + 4 * 16 * 64)
    # A layout change moves data and computes nothing.
    assert cost_from_shapes("ReorderOutput", [("float", (4, 16, 8, 8))],
                            [("float", (4, 8, 8, 8))])[0] == 0
    # int8 tensors are a byte each; an op with no rule has no FLOP count, never a guess.
    qconv = cost_from_shapes("QLinearConv", [("uint8", (1, 2, 4, 4)), ("float", ()),
                                             ("uint8", ()), ("int8", (3, 2, 1, 1))],
                             [("uint8", (1, 3, 4, 4))])
    assert qconv == (2 * 3 * 16 * 2, 32 + 4 + 1 + 6 + 48)
    assert cost_from_shapes("MysteryOp", [("float", (2,))], [("float", (2,))]) == (None, 16)


def test_node_records_of_a_recorded_onnxruntime_profile() -> None:
    events = json.loads((FIXTURES / "cpu_tiny_cnn.json").read_text())
    records = {r.name: r for r in node_records(events)}
    assert len(records) == 15
    first = records["hardtanh_nchwc"]
    assert (first.op_type, first.where, first.calls) == ("Conv", "CPUExecutionProvider", 1)
    assert first.flops == 2 * 4 * 16 * 8 * 8 * 9 and first.total_us == 80
    assert records["ReorderOutput"].flops == 0
    # The fixture holds one run: nothing is left once it is counted as warm-up.
    with pytest.raises(ProfilerMissing, match="1 runs"):
        profiled_events(events, 1)
    assert len(profiled_events(events, 0)) > 15


def test_verdicts_against_the_roofline() -> None:
    # 1 GFLOP over 1 MB (1000 FLOP/B) in 11 ms: near the 10 ms the compute roof needs.
    assert verdict(1e9, 1e6, 11_000.0, ROOF)[0] == COMPUTE_BOUND
    # 1 M FLOP over 8 MB: memory needs 0.8 ms; taking 1 ms is memory-bound.
    assert verdict(1e6, 8e6, 1_000.0, ROOF)[0] == MEMORY_BOUND
    # The same op taking more than OVERHEAD_FACTOR times its roof time is overhead-bound.
    label, reason = verdict(1e6, 8e6, 800.0 * OVERHEAD_FACTOR * 1.01, ROOF)
    assert label == OVERHEAD_BOUND and "µs at the roofline" in reason
    assert verdict(None, 8e6, 1.0, ROOF)[0] == UNKNOWN
    assert verdict(1e6, 8e6, 1.0, Ceilings(None, 10.0, "no compute peak"))[0] == UNKNOWN


def test_op_table_columns_shares_and_order() -> None:
    ops = [OpRecord("a", "MatMul", 4, 40_000.0, flops=1e9, bytes=1e6),
           OpRecord("b", "Add", 4, 4_000.0, flops=1e6, bytes=8e6),
           OpRecord("c", "Custom", 4, 1_000.0)]
    table = op_table(ops, runs=4, ceilings=ROOF)
    assert tuple(table.columns) == OP_COLUMNS
    assert list(table["name"]) == ["a", "b", "c"]
    assert table["share"].sum() == pytest.approx(1.0)
    assert table.loc[0, "ms_per_run"] == pytest.approx(10.0)
    assert table.loc[0, "gflops"] == pytest.approx(1e9 / 10_000.0 / 1e3)
    assert math.isnan(table.loc[2, "intensity"])
    assert verdict_counts(table) == {COMPUTE_BOUND: 1, MEMORY_BOUND: 1, OVERHEAD_BOUND: 0,
                                     UNKNOWN: 1}
