"""The CPU and edge runtimes in one study: LiteRT, ExecuTorch and OpenVINO measure the same trained
CNN through the real campaign loop on a local Ray worker; the converted files (.tflite, .pte) land in
the campaign's artifact cache, and each trial's provenance says what ran inside the delegate."""

from __future__ import annotations

from pathlib import Path

import pytest

from dse import load_experiment, run_campaign
from dse.core.metrics import metric
from tests.conftest import REPO
from tests.search.engine_campaign import write_engine_campaign

RUNTIMES = {"litert": "num_threads", "executorch": "num_threads", "openvino": "num_threads"}


@pytest.mark.usefixtures("ray_cluster")
def test_three_runtimes_in_one_study_through_the_farm(tmp_path: Path) -> None:
    pytest.importorskip("litert_torch", reason="LiteRT's converter (dse[litert]) is not installed")
    pytest.importorskip("executorch", reason="ExecuTorch (dse[executorch]) is not installed")
    pytest.importorskip("openvino", reason="OpenVINO (dse[openvino]) is not installed")
    import optuna

    result = run_campaign(load_experiment(write_engine_campaign(tmp_path, "edge", RUNTIMES)),
                          report=False)
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
