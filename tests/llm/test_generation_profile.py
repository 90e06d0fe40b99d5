"""A language model's profile is of one phase: a request's prefill, or one decode step. The torch
profiler's rows split by phase, counted per call; a runtime without a profiler of requests says
so; the phase is checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from dse.core import Candidate
from dse.profiling import ProfileSettings, check_phase, profile_generator
from dse.spec.loading import load_profile
from dse.trial import prepare_generator

pytest.importorskip("transformers", reason="needs transformers (pip install 'dse[llm]')")

PROFILE = load_profile(Path(__file__).resolve().parents[2] / "hw_profiles" / "local-cpu.yaml")
OUTPUT_TOKENS = 5


def _candidate(backend: str, hidden_size: int = 32) -> Candidate:
    return Candidate(
        family="llm:llama", precision="fp32", batch_size=2, backend=backend,
        knobs={"num_threads": 1}, device_profile="local-cpu",
        model={"llm": {"kind": "config", "config": "llama", "seed": 0,
                       "base": {"vocab_size": 128, "hidden_size": hidden_size,
                                "intermediate_size": 64, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "num_key_value_heads": 2}},
               "workload": {"prompt_tokens": 8, "output_tokens": OUTPUT_TOKENS}})


def test_each_phase_is_its_own_table_counted_per_call() -> None:
    candidate = _candidate("torch")
    prepared = prepare_generator(candidate, PROFILE)
    settings = ProfileSettings(window_s=0.01, perf=False)
    try:
        found = {phase: profile_generator(prepared.runner, prepared.prompts, OUTPUT_TOKENS,
                                          candidate, PROFILE,
                                          ProfileSettings(**{**settings.__dict__, "phase": phase}))
                 for phase in ("prefill", "decode")}
    finally:
        prepared.runner.close()
    prefill, decode = found["prefill"], found["decode"]
    assert (prefill.phase, decode.phase) == ("prefill", "decode")
    assert prefill.op_profile is not None and decode.op_profile is not None
    requests = prefill.op_profile.runs  # one prefill per profiled request
    assert requests >= 1
    # Every later step of those requests is one decode call, each timed and attributed.
    assert decode.op_profile.runs == requests * (OUTPUT_TOKENS - 1)
    assert len(decode.op_profile.run_us) == len(decode.op_profile.run_op_us) == \
        decode.op_profile.runs
    # Plain calls: one prefill and OUTPUT_TOKENS - 1 decode steps per plain request.
    assert len(decode.unprofiled_us) == (OUTPUT_TOKENS - 1) * len(prefill.unprofiled_us)
    for one in (prefill, decode):
        names = {op.name for op in one.op_profile.ops}  # type: ignore[union-attr]
        # The projections' matrix products run in both phases, with their FLOPs (a linear's are
        # the matrix product's it calls).
        assert names & {"aten::linear", "aten::mm", "aten::addmm", "aten::matmul"}, names
        linear = [op for op in one.op_profile.ops if op.name == "aten::linear"]  # type: ignore[union-attr]
        assert linear and all(op.flops and op.flops > 0 for op in linear)
        assert one.perf.stat_missing and "mixes its two phases" in one.perf.stat_missing
    # The prefill runs the whole prompt at once: its products take more than a step's.
    assert sum(op.total_us for op in prefill.op_profile.ops) / prefill.op_profile.runs > \
        sum(op.total_us for op in decode.op_profile.ops) / decode.op_profile.runs
    assert "torch-generation-trace.json" in decode.files


def test_a_runtime_without_a_profiler_of_requests_says_so() -> None:
    pytest.importorskip("openvino", reason="needs openvino (pip install 'dse[openvino]')")
    candidate = _candidate("openvino")
    prepared = prepare_generator(candidate, PROFILE)
    try:
        found = profile_generator(prepared.runner, prepared.prompts, OUTPUT_TOKENS, candidate,
                                  PROFILE, ProfileSettings(window_s=0.01, perf=False))
    finally:
        prepared.runner.close()
    assert found.op_profile is None
    assert found.profiler_missing == ("backend 'openvino' has no per-operator profiler of a "
                                      "language model's requests in dse")
    assert found.unprofiled_us and found.phase == "decode"  # the plain steps are still timed


def test_the_phase_is_checked() -> None:
    assert check_phase("") == "decode" and check_phase("prefill") == "prefill"
    with pytest.raises(ValueError, match=r"phase must be one of \['prefill', 'decode'\], "
                                         r"got 'decod'"):
        check_phase("decod")


def test_onnxruntime_genai_profiles_each_step_as_its_own_file() -> None:
    """ONNX Runtime GenAI's session profiling, switched on step by step: a request's first file
    is its prefill, each later one a decode step; the builder graph's MatMul nodes in both."""
    pytest.importorskip("onnxruntime_genai", reason="needs onnxruntime-genai (pip install 'dse[llm]')")
    candidate = _candidate("onnxruntime_genai", hidden_size=64)  # GenAI's attention: heads of 16
    prepared = prepare_generator(candidate, PROFILE)
    found = {}
    try:
        for phase in ("prefill", "decode"):
            found[phase] = profile_generator(
                prepared.runner, prepared.prompts, OUTPUT_TOKENS, candidate, PROFILE,
                ProfileSettings(window_s=0.01, perf=False, phase=phase))
    finally:
        prepared.runner.close()
    prefill, decode = found["prefill"].op_profile, found["decode"].op_profile
    assert prefill is not None and decode is not None, found["decode"].profiler_missing
    assert decode.runs == prefill.runs * (OUTPUT_TOKENS - 1)
    assert len(decode.run_op_us) == decode.runs and all(us > 0 for us in decode.run_op_us)
    for table in (prefill, decode):
        assert any(op.op_type in ("MatMul", "MatMulNBits") for op in table.ops), table.ops
        assert table.profiler.startswith("onnxruntime node profiling")
