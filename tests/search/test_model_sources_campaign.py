"""Each model source through the whole pipeline: a small real campaign on the embedded Ray."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from dse import load_experiment, run_campaign
from dse.core.metrics import metric
from tests.conftest import LOCAL_CPU, REPO

# A loose precision, a disturbed window flagged rather than measured again and no second looks:
# these campaigns are about engines and models, not the precision gate, the interference policy
# or the labels (a second look, when the shared machine happened to disturb a trial, would add a
# trial to the counts they check; re-measuring is idle time in the suite).
MEASURE = ("{warmup_max_seconds: 0.05, min_iters: 5, min_seconds: 0.0, max_seconds: 0.1, "
           "precision: {p50: 50, p99: 50}, interference: {action: flag}, second_looks: 0}")


def _campaign(root: Path, name: str, model: str, *, objectives: str = "accuracy",
              backends: str = "onnxruntime", precisions: str = "[fp32]", trials: int = 2,
              extra: str = "") -> Path:
    """A campaign laid out like the repository, measuring ``model`` (YAML under ``model:``)."""
    for folder in ("search_spaces", "hw_profiles", "experiments"):
        (root / folder).mkdir(exist_ok=True)
    (root / "hw_profiles" / "local-cpu.yaml").write_text(LOCAL_CPU)
    knobs = {"onnxruntime": "intra_op_threads", "torch": "num_threads"}
    backend_yaml = "".join(f"    {b}:\n      knobs:\n        {knobs[b]}: [1]\n"
                           for b in backends.split(","))
    (root / "search_spaces" / f"{name}.yaml").write_text(f"""\
name: {name}
model:
{model}
training: {{epochs: 2, batch_size: 128, threads: 1}}
{extra}deployment:
  backends:
{backend_yaml}  precisions: {precisions}
  batch_sizes: [4]
objectives:
  - metric: {objectives}
  - metric: latency_p50_ms
""")
    experiment = root / "experiments" / f"{name}.yaml"
    experiment.write_text(f"""\
name: {name}
search_space: ../search_spaces/{name}.yaml
devices: [../hw_profiles/local-cpu.yaml]
sampler: {{name: random, seed: 3}}
budget: {{trials: {trials}}}
measurement: {MEASURE}
""")
    return experiment


def _completed(experiment: Path) -> list[dict[str, object]]:
    result = run_campaign(load_experiment(experiment), report=False)
    trials = result.trials
    done = trials[trials["state"] == "COMPLETE"]
    assert (done["status"] == "ok").all(), done[["status", "reason"]].to_string()
    # The measured ones: the budget counts distinct candidates, a repeat reuses a result.
    return list(done[done["reused_from"].isna()].to_dict("records"))


@pytest.mark.usefixtures("ray_cluster")
def test_factory_campaign(tmp_path: Path) -> None:
    experiment = _campaign(tmp_path, "byo-factory", """\
  factory: dse.examples.models:digits_mlp
  dataset: digits
  arch:
    hidden: [16, 64]""", backends="onnxruntime,torch", precisions="[fp32, int8]")
    rows = _completed(experiment)
    assert len(rows) == 2
    for row in rows:
        assert row["param.family"] == "factory:dse.examples.models:digits_mlp"
        assert 0.3 < float(row[metric("accuracy").column]) <= 1.0  # type: ignore[arg-type]
        assert float(row[metric("macs_m").column]) > 0  # type: ignore[arg-type]


@pytest.mark.usefixtures("ray_cluster")
def test_onnx_file_campaign_with_user_evaluator(tmp_path: Path) -> None:
    (tmp_path / "search_spaces").mkdir()
    shipped = REPO / "search_spaces" / "models" / "digits-cnn.onnx"
    (tmp_path / "search_spaces" / "model.onnx").write_bytes(shipped.read_bytes())
    experiment = _campaign(tmp_path, "byo-onnx", """\
  onnx: model.onnx
  evaluator: dse.examples.evaluators:digits_validation""", precisions="[fp32, int8]",
                           objectives="top3_accuracy", extra="""\
metrics:
  - {name: top3_accuracy, unit: fraction, direction: maximize}
""")
    rows = _completed(experiment)
    assert {row["param.precision"] for row in rows} <= {"fp32", "int8"}
    for row in rows:
        assert str(row["param.family"]) == "onnx:model.onnx"
        assert float(row["top3_accuracy [fraction]"]) > 0.8  # type: ignore[arg-type]
        assert float(row[metric("accuracy").column]) > 0.5  # type: ignore[arg-type]


@pytest.mark.usefixtures("ray_cluster")
def test_transformer_family_campaign(tmp_path: Path) -> None:
    experiment = _campaign(tmp_path, "transformer", """\
  family: transformer
  arch:
    num_layers: [1]
    hidden: [16, 32]
    num_heads: [2]
    seq_len: [8]""", precisions="[int8]")
    rows = _completed(experiment)
    assert len(rows) == 2
    for row in rows:  # int8 of an encoder: MatMul, Softmax, LayerNorm through QDQ
        assert (row["param.family"], row["param.precision"]) == ("transformer", "int8")
        assert float(row[metric("accuracy").column]) > 0.0  # type: ignore[arg-type]
        assert float(row[metric("flops_m").column]) > 0  # type: ignore[arg-type]


@pytest.mark.usefixtures("ray_cluster")
def test_public_library_factory_campaign(tmp_path: Path) -> None:
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("Hugging Face transformers is not installed (pip install 'dse[examples]')")
    experiment = _campaign(tmp_path, "byo-bert", """\
  factory: dse.examples.models:hf_bert_encoder
  dataset: sequences
  arch:
    hidden: [16]
    layers: [1]
    heads: [2]
    seq_len: [8]""", trials=1)
    rows = _completed(experiment)
    assert len(rows) == 1
    assert 0.0 < float(rows[0][metric("accuracy").column]) <= 1.0  # type: ignore[arg-type]
