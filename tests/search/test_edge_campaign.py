"""The CPU and edge runtimes in one study: LiteRT, ExecuTorch and OpenVINO measure the same trained
CNN through the real campaign loop on a local Ray worker; the converted files (.tflite, .pte) land in
the campaign's artifact cache, and each trial's provenance says what ran inside the delegate."""

from __future__ import annotations

from pathlib import Path

import pytest

from dse import load_experiment, run_campaign
from dse.metrics import metric
from tests.conftest import REPO

RUNTIMES = {"litert": "num_threads", "executorch": "num_threads", "openvino": "num_threads"}
MEASURE = "{warmup_max_seconds: 0.05, min_iters: 5, min_seconds: 0.0, max_seconds: 0.1}"


def _campaign(root: Path) -> Path:
    for folder in ("search_spaces", "hw_profiles", "experiments"):
        (root / folder).mkdir(exist_ok=True)
    (root / "hw_profiles" / "cpu.yaml").write_text(
        "name: local-cpu\nkind: cpu\nbackends: [litert, executorch, openvino]\nprecisions: [fp32]\n"
        "max_threads: 1\ntelemetry: [process_memory]\n")
    backends = "".join(f"    {runtime}:\n      knobs:\n        {knob}: [1]\n"
                       for runtime, knob in RUNTIMES.items())
    (root / "search_spaces" / "edge.yaml").write_text(f"""\
name: edge
model:
  family: cnn
  dataset: digits
  arch: {{num_stages: [1], depth: [1], width_mult: [0.5], kernel_size: [3], expand_ratio: [2]}}
training: {{epochs: 2, batch_size: 128, threads: 1}}
deployment:
  backends:
{backends}  precisions: [fp32]
  batch_sizes: [4]
objectives:
  - metric: accuracy
  - metric: latency_p50_ms
""")
    experiment = root / "experiments" / "edge.yaml"
    experiment.write_text(f"""\
name: edge
cache_dir: ../cache
search_space: ../search_spaces/edge.yaml
devices: [../hw_profiles/cpu.yaml]
sampler: {{name: grid}}
budget: {{trials: 3}}
measurement: {MEASURE}
""")
    return experiment


@pytest.mark.usefixtures("ray_cluster")
def test_three_runtimes_in_one_study_through_the_farm(tmp_path: Path) -> None:
    pytest.importorskip("litert_torch", reason="LiteRT's converter (dse[litert]) is not installed")
    pytest.importorskip("executorch", reason="ExecuTorch (dse[executorch]) is not installed")
    pytest.importorskip("openvino", reason="OpenVINO (dse[openvino]) is not installed")
    import optuna

    result = run_campaign(load_experiment(_campaign(tmp_path)), report=False)
    trials = result.trials
    done = trials[(trials["state"] == "COMPLETE") & trials["reused_from"].isna()]
    assert (done["status"] == "ok").all(), done[["status", "reason"]].to_string()
    assert sorted(done["param.backend"]) == sorted(RUNTIMES)
    accuracy = {str(row["param.backend"]): float(row[metric("accuracy").column])
                for row in done.to_dict("records")}
    # The same trained weights in fp32 through three runtimes: they agree on the test split.
    assert max(accuracy.values()) - min(accuracy.values()) <= 0.01, accuracy
    # The converted files are the campaign's cached artifacts, one per converting runtime.
    cached = sorted(path.suffix for path in (tmp_path / "cache" / "artifacts").iterdir()
                    if path.suffix in (".tflite", ".pte"))
    assert cached == [".pte", ".tflite"]
    storage = f"sqlite:///{result.run_dir / 'study.db'}"
    (study,) = optuna.get_all_study_names(storage)
    provenance = {trial.params["backend"]: trial.user_attrs["provenance"]
                  for trial in optuna.load_study(study_name=study, storage=storage).trials}
    assert provenance["litert"]["artifact_format"] == "tflite"
    assert provenance["executorch"]["artifact_format"] == "pte"
    for runtime in ("litert", "executorch"):  # the tiny CNN lowers into XNNPACK whole
        assert provenance[runtime]["delegation"] == "full", provenance[runtime]
    assert provenance["openvino"]["artifact_format"] == "onnx"


def test_the_shipped_edge_campaign_is_valid() -> None:
    experiment = load_experiment(REPO / "experiments" / "edge.yaml")
    assert set(experiment.space.deployment.backends) == {"onnxruntime", *RUNTIMES}  # type: ignore[union-attr]
