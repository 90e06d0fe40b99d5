"""A language-model architecture search through the whole pipeline: random-weight Llama configs on
the embedded Ray, timed as requests, scored against their fp32 reference, resumed without
measuring again; and a model the source cannot build, recorded as the architecture's failure."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from dse import load_experiment, profile, run_campaign, verify
from dse.cli import app
from dse.cli.bundle_commands import print_report
from dse.core import Candidate
from dse.core.metrics import metric
from dse.profiling import ProfileSettings
from dse.report import write_dashboard
from dse.report.profile_info import profile_pages
from dse.spec.loading import load_profile
from dse.trial import ArchFailure, prepare_generator
from tests.conftest import LOCAL_CPU, REPO

pytest.importorskip("transformers", reason="needs transformers (pip install 'dse[llm]')")

SPACE = """\
name: llm-arch
model:
  llm:
    config: llama
    base: {vocab_size: 128, intermediate_size: 64, num_attention_heads: 4}
  arch:
    num_hidden_layers: [1, 2]
    hidden_size: [32, 64]
    num_key_value_heads: [1, 4]
deployment:
  backends:
    torch:
      knobs:
        num_threads: [1]
  precisions: [fp32, bf16]
  batch_sizes: [2]
workload: {prompt_tokens: 12, output_tokens: 6, requests: 6, min_seconds: 0.05,
           slo: {ttft_ms: 60000, tpot_ms: 60000}}
objectives:
  - metric: tpot_p50_ms
  - metric: kv_cache_mb
constraints:
  - perplexity_ratio <= 1.05
"""
# Labels keep no trial off the front here: the test counts the front, whatever the machine did.
MEASURE = "{second_looks: 0, non_ok_on_front: true, interference: {action: flag}}"


@pytest.mark.usefixtures("ray_cluster")
def test_a_random_weights_architecture_search(tmp_path: Path) -> None:
    for folder in ("search_spaces", "hw_profiles", "experiments"):
        (tmp_path / folder).mkdir()
    (tmp_path / "hw_profiles" / "local-cpu.yaml").write_text(LOCAL_CPU)
    (tmp_path / "search_spaces" / "llm-arch.yaml").write_text(SPACE)
    experiment = tmp_path / "experiments" / "llm-arch.yaml"
    experiment.write_text("name: llm-arch\nsearch_space: ../search_spaces/llm-arch.yaml\n"
                          "devices: [../hw_profiles/local-cpu.yaml]\n"
                          "sampler: {name: random, seed: 1}\nbudget: {trials: 3}\n"
                          f"measurement: {MEASURE}\n")
    result = run_campaign(load_experiment(experiment), report=False)
    trials = result.trials
    done = trials[(trials["state"] == "COMPLETE") & trials["reused_from"].isna()]
    assert len(done) == 3 and (done["status"] == "ok").all(), done[["status", "reason"]]
    assert set(done["param.family"]) == {"llm:llama"}
    for name in ("ttft_p50_ms", "tpot_p50_ms", "e2e_p50_ms", "decode_tokens_per_s",
                 "device_decode_tokens_per_s", "prefill_tokens_per_s", "kv_cache_mb",
                 "perplexity", "perplexity_ratio", "quality_retained", "token_agreement", "token_kl",
                 "greedy_match", "weight_mb", "memory_model_mb", "goodput"):
        column = done[metric(name).column]
        assert column.notna().all() and (column >= 0).all(), name
    # Every request prefills 2 x 12 tokens; the batch decodes twice one sequence's rate.
    rates = done[metric("device_decode_tokens_per_s").column]
    per_sequence = done[metric("decode_tokens_per_s").column]
    assert (rates == 2 * per_sequence).all()
    # A minute per token: every request is within the SLO.
    assert (done[metric("goodput").column] == 1.0).all()
    # The cache holds (12 + 6 - 1) positions of keys and values per layer and KV head.
    for _, row in done.iterrows():
        layers, width = row["param.arch.num_hidden_layers"], row["param.arch.hidden_size"]
        kv_heads = row["param.arch.num_key_value_heads"]
        dtype_bytes = 4 if row["param.precision"] == "fp32" else 2
        expected = 2 * layers * 2 * kv_heads * 17 * (width // 4) * dtype_bytes / 1e6
        assert row[metric("kv_cache_mb").column] == pytest.approx(expected)
    fp32 = done[done["param.precision"] == "fp32"]
    assert (fp32[metric("perplexity_ratio").column] == 1.0).all()
    assert (fp32[metric("greedy_match").column] == 1.0).all()
    assert done["measurement_quality"].notna().all()
    assert len(result.pareto()) >= 1  # a front of the measured candidates
    # The dashboard has the language model's two views, each with its figure.
    page = write_dashboard(result.run_dir, tmp_path / "llm.html").read_text(encoding="utf-8")
    for view in ("dse-llm-latency", "dse-llm-quality"):
        assert f'id="{view}"' in page, view
    # dse profile of a trial: its decode step by default, in a folder and page of that phase
    # that the dashboard's trial row links.
    number = int(done["trial"].iloc[0])
    found = profile(experiment, trial=number, settings=ProfileSettings(window_s=0.05, perf=False))
    assert found.folder.name == f"trial-{number:05d}-decode" and found.summary.phase == "decode"
    assert found.summary.profiler.startswith("torch.profiler") and not found.ops.empty
    assert found.summary.trial_p50_ms == done[metric("tpot_p50_ms").column].iloc[0]
    assert found.page.name.endswith(f"-trial-{number:05d}-decode.html") and found.page.is_file()
    assert profile_pages(found.page.parent, "llm-arch")[("local-cpu", number)] == found.page.name
    # dse export of the trial, then dse verify of the bundle on this device: the same greedy
    # tokens, its phases timed again (a loose tolerance: this test checks the path, not the
    # machine's speed; tests/llm/test_llm_export.py runs each runtime's run.py).
    bundle = tmp_path / "bundle"
    exported = CliRunner().invoke(app, ["export", str(experiment), "--trial", str(number),
                                        "--out", str(bundle)])
    assert exported.exit_code == 0, exported.output
    assert "model/: " in exported.output and "data/prompts.npy" in exported.output
    assert yaml.safe_load((bundle / "deployment.yaml").read_text())["kind"] == "generation"
    report = verify(bundle, tolerance=100.0, confirm_runs=0)
    checks = {check.metric: check for check in report.checks}
    assert set(checks) == {"ttft_p50_ms", "tpot_p50_ms", "greedy_tokens_as_recorded"}
    assert report.decisions_agree == 1.0 and checks["greedy_tokens_as_recorded"].verdict == "pass"
    # Other work on a busy machine can disturb the window: a pass is then not certified.
    assert report.verdict == "pass" or (report.verdict == "inconclusive"
                                        and "disturbed the measurement" in report.reason), report
    assert checks["tpot_p50_ms"].measured is not None and checks["tpot_p50_ms"].measured > 0
    console = Console(record=True, width=200)
    print_report(console, report)
    assert "greedy tokens on the bundle's prompts: 100.0% the ones recorded at export" in \
        console.export_text()
    # Resumed with its budget met: nothing is measured again.
    again = run_campaign(load_experiment(experiment), report=False).trials
    assert len(again) == len(trials)


def test_a_model_the_source_cannot_build_is_the_architectures_failure() -> None:
    profile = load_profile(REPO / "hw_profiles" / "local-cpu.yaml")
    candidate = Candidate(
        family="llm:notamodel", precision="fp32", batch_size=1, backend="torch",
        knobs={"num_threads": 1}, device_profile="local-cpu",
        model={"llm": {"kind": "config", "config": "notamodel", "base": {}, "seed": 0},
               "workload": {"prompt_tokens": 4, "output_tokens": 2}})
    with pytest.raises(ArchFailure, match=r"cannot build 'llm:notamodel'.*notamodel"):
        prepare_generator(candidate, profile)
