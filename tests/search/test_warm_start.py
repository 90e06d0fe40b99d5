"""Warm start across devices, end to end on replay devices: real Optuna storage, real campaigns.

A campaign runs on one replay device, then again with a second replay device added that runs
onnxruntime only: the new study begins with the baseline, then the first device's front
configurations that it can run; the others are skipped with the reason.
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import optuna
import pandas as pd
import pytest
import yaml

from dse.app.api import load_experiment, run_campaign
from dse.core.exceptions import SpecError
from dse.search.study_storage import resolve_study_names
from dse.search.warm_start import seed_cap, warm_start_plan
from dse.spec import HardwareProfile
from dse.spec.models import WarmStartSpec

SPACE = """\
name: warm
model:
  family: cnn
  arch:
    depth: [1]
    width_mult: [0.5, 1.0]
deployment:
  backends:
    onnxruntime: {knobs: {intra_op_threads: [1]}}
    torch: {knobs: {num_threads: [1]}}
  precisions: [fp32, int8]
  batch_sizes: [1]
objectives:
  - metric: accuracy
  - metric: latency_p99_ms
"""

# Recorded on no device: made up so that the front holds two onnxruntime fp32 configurations and
# two torch int8 ones.
def _row(width: float, backend: str, precision: str) -> dict[str, object]:
    speed = {("onnxruntime", "fp32"): 0.8, ("torch", "fp32"): 1.0,
             ("onnxruntime", "int8"): 0.6, ("torch", "int8"): 0.5}[(backend, precision)]
    return {"arch.depth": 1, "arch.width_mult": width, "backend": backend,
            "precision": precision, "batch_size": 1,
            "knob.intra_op_threads": 1 if backend == "onnxruntime" else None,
            "knob.num_threads": 1 if backend == "torch" else None,
            "accuracy": (0.9 if width == 1.0 else 0.8) - (0.02 if precision == "int8" else 0.0),
            "latency_p99_ms [ms]": (2.0 if width == 1.0 else 1.0) * speed}


FRONT = [  # (width, backend, precision), best accuracy first
    (1.0, "onnxruntime", "fp32"), (1.0, "torch", "int8"), (0.5, "onnxruntime", "fp32"),
    (0.5, "torch", "int8")]

BASELINE = """\
baseline:
  arch: {depth: 1, width_mult: 1.0}
  backend: onnxruntime
  precision: int8
  batch_size: 1
  knobs: {intra_op_threads: 1}
"""


def _experiment(name: str, devices: list[str], extra: str = "", trials: int = 8) -> str:
    listed = ", ".join(f"../hw_profiles/{d}.yaml" for d in devices)
    return (f"name: {name}\nsearch_space: ../search_spaces/warm.yaml\ndevices: [{listed}]\n"
            f"sampler: {{name: grid, seed: 0}}\nbudget: {{trials: {trials}}}\n{BASELINE}{extra}")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return lay_out_warm_campaigns(tmp_path)


def lay_out_warm_campaigns(tmp_path: Path) -> Path:
    """The space, the recorded table and the replay profiles ace, bee and cat under ``tmp_path``."""
    for folder in ("search_spaces", "hw_profiles", "experiments"):
        (tmp_path / folder).mkdir()
    (tmp_path / "search_spaces" / "warm.yaml").write_text(SPACE)
    rows = [_row(w, b, p) for w, b, p in itertools.product(
        (0.5, 1.0), ("onnxruntime", "torch"), ("fp32", "int8"))]
    pd.DataFrame(rows).to_csv(tmp_path / "hw_profiles" / "table.csv", index=False)
    (tmp_path / "hw_profiles" / "ace.yaml").write_text("name: ace\nkind: replay\ntable: table.csv\n")
    for name in ("bee", "cat"):
        (tmp_path / "hw_profiles" / f"{name}.yaml").write_text(
            f"name: {name}\nkind: replay\ntable: table.csv\nbackends: [onnxruntime]\n")
    return tmp_path


def _config(trial: optuna.trial.FrozenTrial) -> tuple[float, str, str, int]:
    c = trial.user_attrs["candidate"]
    return c["arch"]["width_mult"], c["backend"], c["precision"], c["batch_size"]


def _run(root: Path, name: str, text: str) -> dict[str, optuna.Study]:
    path = root / "experiments" / f"{name}.yaml"
    path.write_text(text)
    result = run_campaign(load_experiment(path), report=False)
    storage = f"sqlite:///{result.run_dir / 'study.db'}"
    return {n: optuna.load_study(study_name=n, storage=storage)
            for n in optuna.study.get_all_study_names(storage)}


def test_a_device_added_later_starts_from_the_first_devices_front(
        root: Path, caplog: pytest.LogCaptureFixture) -> None:
    first = _run(root, "w", _experiment("w", ["ace"]))
    assert list(first) == ["w"]
    measured = {_config(t) for t in first["w"].trials if "reused_from" not in t.user_attrs}
    assert len(measured) == 8  # the grid: every configuration once, so the front is known

    with caplog.at_level(logging.INFO, logger="dse.search.warm_start"):
        studies = _run(root, "w", _experiment("w", ["ace", "bee"]))

    # The first device keeps (resumes) its study; the new one gets its own.
    assert sorted(studies) == ["w", "w@bee"]
    assert len(studies["w"].trials) == len(first["w"].trials)
    trials = sorted(studies["w@bee"].trials, key=lambda t: t.number)
    assert trials[0].user_attrs["baseline"] is True
    seeded = [(w, b, p) for w, b, p, _ in map(_config, trials[1:3])]
    assert seeded == [c for c in FRONT if c[1] == "onnxruntime"]
    for trial in trials[1:3]:
        origin = trial.user_attrs["warm_start_from"]
        assert origin["study"] == "w" and origin["device"] == "ace"
        assert _config(studies["w"].trials[origin["trial"]]) == _config(trial)
    assert not any("warm_start_from" in t.user_attrs for t in trials[3:])
    assert all(t.user_attrs["status"] == "ok" for t in trials[:3])

    record = studies["w@bee"].user_attrs["warm_start"]
    assert record["source"] == "w" and record["front_size"] == 4
    assert len(record["seeded_from_trials"]) == 2
    assert len(record["skipped"]) == 2
    for line in record["skipped"]:
        assert line.startswith("w#") and line.endswith(
            "device 'bee' cannot run its torch/int8; it offers onnxruntime/fp32, "
            "onnxruntime/int8")
    logged = [r.getMessage() for r in caplog.records]
    assert any("warm start of w@bee from w (device ace): 2 of 4 front configurations seeded"
               in m for m in logged)
    assert sum("skipped w#" in m and "cannot run its torch/int8" in m for m in logged) == 2
    # The resumed study had results already: nothing queued into it. Its first run had no
    # other device to start from, and says so.
    assert studies["w"].user_attrs["warm_start"]["note"] == (
        "no study of another device has completed trials in this campaign's storage")

    # off: a third device added with warm start off is left to its sampler.
    studies = _run(root, "w", _experiment("w", ["ace", "bee", "cat"],
                                          "search: {warm_start: off}\n"))
    cat = studies["w@cat"]
    assert not any("warm_start_from" in t.user_attrs for t in cat.trials)
    assert "warm_start" not in cat.user_attrs
    assert cat.trials[0].user_attrs["baseline"] is True


def test_the_plan_names_its_source_caps_its_seeds_and_never_seeds_a_device_from_itself(
        root: Path) -> None:
    study = _run(root, "p", _experiment("p", ["ace"]))["p"]
    space = load_experiment(root / "experiments" / "p.yaml").space
    bee = HardwareProfile.model_validate(yaml.safe_load(
        (root / "hw_profiles" / "bee.yaml").read_text()))
    ace = bee.model_copy(update={"name": "ace", "backends": []})

    plan = warm_start_plan([study], space, bee, WarmStartSpec(), 8)
    assert (plan.source, plan.source_device, plan.front_size, len(plan.seeds)) == ("p", "ace", 4, 2)
    # A device's own study is never its source.
    plan = warm_start_plan([study], space, ace, WarmStartSpec(), 8)
    assert plan.source is None and plan.note == (
        "no study of another device has completed trials in this campaign's storage")

    plan = warm_start_plan([study], space, bee, WarmStartSpec(max_trials=1), 8)
    assert len(plan.seeds) == 1
    assert plan.skipped[-1].startswith("1 more front configurations: at most 1 seeds")
    # The capped seed keeps the front's best end (the most accurate configuration).
    best = study.trials[plan.seeds[0].source_trial].user_attrs["candidate"]
    assert (best["arch"]["width_mult"], best["backend"]) == (1.0, "onnxruntime")

    plan = warm_start_plan([study], space, bee, WarmStartSpec.model_validate({"from": "bee"}), 8)
    assert plan.source is None and "names this device ('bee') itself" in plan.note
    plan = warm_start_plan([study], space, bee, WarmStartSpec.model_validate({"from": "cat"}), 8)
    assert plan.note == "no study of device 'cat' has completed trials in this campaign's storage"
    assert warm_start_plan([study], space, bee, WarmStartSpec.model_validate("off"), 8).note == (
        "warm start is off")
    assert seed_cap(WarmStartSpec(), 20) == 10 and seed_cap(WarmStartSpec(max_trials=50), 20) == 20

    # A profile keeps its study whichever form of the name it was made under; a name another
    # profile's study holds is never taken.
    run_dir = root / "experiments" / "runs" / "p"
    assert resolve_study_names(run_dir, "p", ["ace", "bee"]) == {"ace": "p", "bee": "p@bee"}
    assert resolve_study_names(run_dir, "p", ["bee"]) == {"bee": "p@bee"}
    assert resolve_study_names(run_dir, "p", ["ace"]) == {"ace": "p"}


def test_an_unknown_source_profile_is_one_line_naming_file_field_and_allowed(root: Path) -> None:
    path = root / "experiments" / "bad.yaml"
    path.write_text(_experiment("bad", ["ace", "bee"], "search: {warm_start: {from: dog}}\n"))
    with pytest.raises(SpecError) as caught:
        load_experiment(path)
    assert caught.value.problems == [
        f"{path}: search.warm_start.from: unknown device profile 'dog'; allowed: ace, bee"]
    path.write_text(_experiment("bad", ["ace"], "search: {warm_start: sometimes}\n"))
    with pytest.raises(SpecError) as caught:
        load_experiment(path)
    assert caught.value.problems == [
        f"{path}: search.warm_start: warm_start must be auto, off or {{from: <profile>, "
        f"max_trials: N}}, got 'sometimes'"]
