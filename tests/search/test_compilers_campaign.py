"""Four engines in one study: eager torch, ONNX Runtime, TVM (MetaSchedule-tuned) and XLA measure the
same trained CNN through the real campaign loop on a local Ray worker, each with its own compile
record; a second campaign sharing the cache reuses TVM's tuning."""

from __future__ import annotations

from pathlib import Path

import pytest

from dse import load_experiment, run_campaign
from dse.core.metrics import metric
from tests.conftest import REPO
from tests.search.engine_campaign import write_engine_campaign

ENGINES = {"torch": "num_threads", "onnxruntime": "intra_op_threads", "tvm": "num_threads",
           "xla": "num_threads"}


def _campaign(root: Path, name: str = "engines", tuning_trials: int = 0,
              engines: tuple[str, ...] = tuple(ENGINES)) -> Path:
    """``engines`` (default: the four) on one trained CNN; campaigns made here share one cache
    folder (its device folder holds TVM's tuning databases)."""
    return write_engine_campaign(root, name, {engine: ENGINES[engine] for engine in engines},
                                 {"tvm": f"        tuning_trials: [{tuning_trials}]\n"})


def _measured(experiment: Path, engines: tuple[str, ...] = tuple(ENGINES)
              ) -> tuple[dict[str, dict[str, object]], dict[str, str]]:
    """Backend -> its measured row, each run to an ok result; and the tvm trial's provenance."""
    import optuna

    result = run_campaign(load_experiment(experiment), report=False)
    trials = result.trials
    done = trials[(trials["state"] == "COMPLETE") & trials["reused_from"].isna()]
    assert (done["status"] == "ok").all(), done[["status", "reason"]].to_string()
    assert sorted(done["param.backend"]) == sorted(engines)
    storage = f"sqlite:///{result.run_dir / 'study.db'}"
    (study,) = optuna.get_all_study_names(storage)
    (tvm,) = [trial.user_attrs["provenance"]
              for trial in optuna.load_study(study_name=study, storage=storage).trials
              if trial.params.get("backend") == "tvm"]
    return {str(row["param.backend"]): row for row in done.to_dict("records")}, tvm


@pytest.mark.usefixtures("ray_cluster")
def test_four_engines_in_one_study_and_a_second_campaign_tunes_nothing(tmp_path: Path) -> None:
    rows, tuned = _measured(_campaign(tmp_path, "engines", tuning_trials=2))
    accuracy = {name: float(row[metric("accuracy").column]) for name, row in rows.items()}
    # The same trained weights in fp32 everywhere: the engines agree on the test split.
    assert max(accuracy.values()) - min(accuracy.values()) <= 0.01, accuracy
    for compiler in ("tvm", "xla"):
        assert float(rows[compiler][metric("compile_seconds").column]) > 0
    tuning = metric("tuning_seconds").column
    assert float(rows["tvm"][tuning]) > 0
    databases = sorted((tmp_path / "cache" / "device" / "tvm-tuning").glob("*.json"))
    assert [str(path) for path in databases] == [tuned["tuning_database"]]
    assert tuned["tuning_reused"] == "False" and int(tuned["tuned_tasks"]) >= 1
    assert '"kind":"llvm"' in tuned["target"] and tuned["tuning_trials"] == "2"

    # TVM alone this time: the other engines have nothing to reuse.
    again, reused = _measured(_campaign(tmp_path, "engines-again", tuning_trials=2, engines=("tvm",)),
                              ("tvm",))
    # Nothing tuned: the same database, and the cost it was made with (a new tuning's would differ).
    assert sorted((tmp_path / "cache" / "device" / "tvm-tuning").glob("*.json")) == databases
    assert (reused["tuning_reused"], reused["tuning_database"]) == ("True", str(databases[0]))
    assert again["tvm"][tuning] == rows["tvm"][tuning]


def test_the_shipped_compilers_campaign_is_valid() -> None:
    experiment = load_experiment(REPO / "experiments" / "compilers.yaml")
    assert set(experiment.space.deployment.backends) == set(ENGINES)  # type: ignore[union-attr]
