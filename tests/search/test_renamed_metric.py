"""A campaign written before ``memory_peak_mb`` was renamed ``process_rss_peak_mb``, end to end on
replay devices with real Optuna storage: its YAML (objective and constraint under the old name), a
replay table recorded with the old column, and its run folder as the search loop wrote it then.
``dse report`` reports it under the new name; rerun with a device added, it resumes its study,
reuses its old measurements and seeds the new device from its old front."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import optuna
import pandas as pd
import pytest
from typer.testing import CliRunner

from dse.app.api import load_experiment, run_campaign
from dse.cli import app
from dse.core.candidate import stable_hash
from dse.results import load_campaign, study_objectives, trials_frame
from dse.search.study_storage import storage_url

OLD = "memory_peak_mb"
NEW = "process_rss_peak_mb"

SPACE = f"""\
name: renamed
model:
  family: cnn
  arch:
    depth: [1]
    width_mult: [0.5, 1.0]
deployment:
  backends:
    onnxruntime: {{knobs: {{intra_op_threads: [1]}}}}
    torch: {{knobs: {{num_threads: [1]}}}}
  precisions: [fp32, int8]
  batch_sizes: [1]
objectives:
  - metric: accuracy
  - metric: {OLD}
constraints:
  - {OLD} <= 700
"""

CONFIGS = list(itertools.product((0.5, 1.0), ("onnxruntime", "torch"), ("fp32", "int8")))


def _memory(width: float, backend: str, precision: str) -> float:
    return (300.0 + (400.0 if width == 1.0 else 0.0) + (100.0 if backend == "torch" else 0.0)
            - (150.0 if precision == "int8" else 0.0))


def _table(column: str) -> pd.DataFrame:
    """Every configuration; (1.0, torch, fp32) needs 800 MB, above the bound."""
    return pd.DataFrame([{
        "arch.depth": 1, "arch.width_mult": w, "backend": b, "precision": p, "batch_size": 1,
        "knob.intra_op_threads": 1 if b == "onnxruntime" else None,
        "knob.num_threads": 1 if b == "torch" else None,
        "accuracy [fraction]": (0.9 if w == 1.0 else 0.8) - (0.02 if p == "int8" else 0.0),
        column: _memory(w, b, p)} for w, b, p in CONFIGS])


def _experiment(devices: list[str], trials: int) -> str:
    listed = ", ".join(f"../hw_profiles/{d}.yaml" for d in devices)
    return (f"name: renamed\nsearch_space: ../search_spaces/renamed.yaml\ndevices: [{listed}]\n"
            f"sampler: {{name: random, seed: 0}}\nbudget: {{trials: {trials}}}\n")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for folder in ("search_spaces", "hw_profiles", "experiments"):
        (tmp_path / folder).mkdir()
    (tmp_path / "search_spaces" / "renamed.yaml").write_text(SPACE)
    # ace's table was recorded before the rename, bee's after.
    _table(f"{OLD} [MB]").to_csv(tmp_path / "hw_profiles" / "old.csv", index=False)
    _table(f"{NEW} [MB]").to_csv(tmp_path / "hw_profiles" / "new.csv", index=False)
    (tmp_path / "hw_profiles" / "ace.yaml").write_text("name: ace\nkind: replay\ntable: old.csv\n")
    (tmp_path / "hw_profiles" / "bee.yaml").write_text(
        "name: bee\nkind: replay\ntable: new.csv\nbackends: [onnxruntime]\n")
    return tmp_path


def _old(value: object) -> object:
    """``value`` (plain JSON data) as dse wrote it before the rename: the old name throughout."""
    return json.loads(json.dumps(value).replace(NEW, OLD))


def _as_written_before_the_rename(run_dir: Path, space_text: str) -> None:
    """Rewrite every study of ``run_dir`` as the search loop wrote it while the metric was
    ``memory_peak_mb``: the same trials, attributes and constraints under the old name, and the
    space fingerprint hashing the constraints as they were then written."""
    storage = storage_url(run_dir)
    constraints_then = [{"metric": OLD, "op": "<=", "value": 700.0}]
    assert f"{OLD} <= 700" in space_text
    for name in optuna.study.get_all_study_names(storage):
        written = optuna.load_study(study_name=name, storage=storage)
        attrs, directions, trials = written.user_attrs, written.directions, written.trials
        optuna.delete_study(study_name=name, storage=storage)
        study = optuna.create_study(storage=storage, study_name=name, directions=directions)
        for key, value in attrs.items():
            study.set_user_attr(key, _old(value))
        study.set_user_attr("space_fingerprint", {**attrs["space_fingerprint"],
                                                  "constraints": stable_hash(constraints_then)})
        for trial in trials:
            system = {k: v for k, v in trial.system_attrs.items() if not k.startswith("constraints")}
            constraints = _old(trial.constraints)
            assert isinstance(constraints, dict)
            study.add_trial(optuna.trial.create_trial(
                state=trial.state, values=trial.values, params=trial.params,
                distributions=trial.distributions, user_attrs=_old(trial.user_attrs),  # type: ignore[arg-type]
                system_attrs=system, constraints=constraints or None))
    # What the old dse wrote: no trace of the new name.
    for name in optuna.study.get_all_study_names(storage):
        study = optuna.load_study(study_name=name, storage=storage)
        assert NEW not in json.dumps(study.user_attrs)
        assert all(NEW not in json.dumps([t.user_attrs, list(t.constraints)]) for t in study.trials)
        assert study.user_attrs["objectives"] == ["accuracy", OLD]


def test_a_campaign_from_before_the_rename_reports_resumes_and_seeds_under_the_new_name(
        root: Path) -> None:
    experiment = root / "experiments" / "renamed.yaml"
    experiment.write_text(_experiment(["ace"], 6))
    # The space names the old metric: it validates, and means the new one.
    loaded = load_experiment(experiment)
    assert [o.metric for o in loaded.space.objectives] == ["accuracy", NEW]
    assert [str(c) for c in loaded.space.constraints] == [f"{NEW} <= 700"]
    run_dir = run_campaign(loaded, report=False).run_dir
    _as_written_before_the_rename(run_dir, SPACE)
    old = trials_frame(load_campaign(run_dir))
    assert old["reused_from"].isna().sum() == 6 and (old["status"] == "ok").all()

    # dse report on the old run folder: tables and dashboard under the new name.
    result = CliRunner().invoke(app, ["report", str(experiment)])
    assert result.exit_code == 0, result.output
    trials = pd.read_parquet(run_dir / "trials.parquet")
    front = pd.read_csv(run_dir / "pareto.csv")
    for table in (trials, front):
        assert f"{NEW} [MB]" in table.columns and f"constraint.{NEW} <= 700" in table.columns
        assert not [c for c in table.columns if OLD in c]
    configs = [(c["arch"]["width_mult"], c["backend"], c["precision"])
               for c in (t.user_attrs["candidate"] for t in load_campaign(run_dir)[0].trials)]
    assert trials[f"{NEW} [MB]"].tolist() == [_memory(*c) for c in configs]
    assert trials["feasible"].tolist() == [_memory(*c) <= 700 for c in configs]
    assert len(front) >= 1 and (front[f"{NEW} [MB]"] <= 700).all()
    page = loaded.dashboard_path.read_text()
    assert f"{NEW} [MB]" in page and OLD not in page

    # Rerun with a second device: ace's old study resumes, bee's new one starts from its front.
    experiment.write_text(_experiment(["ace", "bee"], 8))  # the whole space: 8 candidates
    result_two = run_campaign(load_experiment(experiment))
    studies = {s.study_name: s for s in load_campaign(run_dir)}
    assert sorted(studies) == ["renamed", "renamed@bee"]
    assert study_objectives(studies["renamed"]) == ["accuracy", NEW]
    frame = result_two.trials
    ace = frame[frame["device"] == "ace"].reset_index(drop=True)
    assert ace["reused_from"].isna().sum() == 8
    assert ace["trial"].tolist()[:len(old)] == old["trial"].tolist()
    # Every trial ok, a reuse of an old measurement included (its metrics read under the new
    # name), and every value where it belongs.
    assert (ace["status"] == "ok").all()
    reused = ace[ace["reused_from"].notna()]
    assert (reused["reused_from"] < 6).any()
    ace_configs = [(w, b, p) for w, b, p in zip(ace["param.arch.width_mult"], ace["param.backend"],
                                                 ace["param.precision"], strict=True)]
    assert ace[f"{NEW} [MB]"].tolist() == [_memory(*c) for c in ace_configs]
    assert ace["feasible"].tolist() == [_memory(*c) <= 700 for c in ace_configs]

    bee = sorted(studies["renamed@bee"].trials, key=lambda t: t.number)
    seeded = [t for t in bee if "warm_start_from" in t.user_attrs]
    assert seeded and all(t.user_attrs["warm_start_from"]["study"] == "renamed" for t in seeded)
    record = studies["renamed@bee"].user_attrs["warm_start"]
    assert record["front_size"] >= len(seeded)
    assert set(result_two.pareto()["device"]) == {"ace", "bee"}
    assert not [c for c in pd.read_csv(run_dir / "pareto.csv").columns if OLD in c]
