"""prepare_candidate for models that are not a built-in family: a torch factory, an ONNX file,
and the user's evaluator handed the deployed model."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from dse.accuracy import train_or_load
from dse.artifacts.onnx_export import export_onnx
from dse.core.candidate import Candidate
from dse.core.exceptions import BuildError
from dse.models.sources import candidate_source
from dse.spec import HardwareProfile, ModelSpec, TrainingSpec
from dse.trial.prepare import prepare_candidate

FAST = TrainingSpec(epochs=3, batch_size=64, learning_rate=0.02, seed=0, threads=1)
PROFILE = HardwareProfile(name="test-cpu", kind="cpu", backends=["onnxruntime", "torch"],
                          precisions=["fp32", "int8"], max_threads=1)
MLP = "dse.examples.models:digits_mlp"


def _candidate(model: ModelSpec, folder: Path | None = None, *, arch: dict[str, Any] | None = None,
               backend: str = "onnxruntime", precision: str = "fp32",
               batch_size: int = 8) -> Candidate:
    family, settings = candidate_source(model, folder)
    return Candidate(family=family, arch=arch or {}, model=settings, precision=precision,
                     batch_size=batch_size, backend=backend, device_profile=PROFILE.name)


@pytest.fixture(scope="module")
def digits_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cnn trained on digits, exported: a user's ONNX file whose accuracy means something."""
    folder = tmp_path_factory.mktemp("onnx")
    trained = train_or_load("cnn", {"num_stages": 1, "depth": 1, "width_mult": 0.5},
                            FAST, folder / "trained")
    path = folder / "digits.onnx"
    export_onnx(trained.module, trained.input_shape, path)
    return path


@pytest.fixture(scope="module")
def fixed_batch_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file whose batch axis is fixed at 7 (the digits test split is not a multiple of 7)."""
    import torch

    path = tmp_path_factory.mktemp("fixed") / "fixed7.onnx"
    module = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)).eval()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        torch.onnx.export(module, (torch.zeros(7, 1, 8, 8),), str(path), dynamo=True,
                          external_data=False)
    return path


def test_factory_model_is_trained_on_its_dataset(tmp_path: Path) -> None:
    spec = ModelSpec(factory=MLP, dataset="digits", arch={"hidden": [32]})
    prepared = prepare_candidate(_candidate(spec, arch={"hidden": 32, "layers": 1}), FAST,
                                 PROFILE, tmp_path)
    try:
        assert prepared.metrics["accuracy"] > 0.6  # ten classes: chance is 0.1
        assert prepared.metrics["params_m"] == pytest.approx((64 * 32 + 32 + 32 * 10 + 10) / 1e6)
        assert prepared.metrics["macs_m"] == pytest.approx((64 * 32 + 32 * 10) / 1e6)
        assert prepared.provenance["dataset"] == "digits"
        assert prepared.missing == {}
    finally:
        prepared.runner.close()


def test_a_model_without_dataset_reports_accuracy_missing(tmp_path: Path) -> None:
    spec = ModelSpec(factory=MLP, arch={"hidden": [16]})
    prepared = prepare_candidate(_candidate(spec, arch={"hidden": 16}, precision="int8"), FAST,
                                 PROFILE, tmp_path)
    try:
        assert "accuracy" not in prepared.metrics
        assert "no dataset" in prepared.missing["accuracy"]
        # Fidelity of the int8 lowering is still measured, on stand-in inputs.
        assert 0.0 < prepared.metrics["top1_agreement"] <= 1.0
        assert prepared.metrics["train_seconds"] == 0.0
    finally:
        prepared.runner.close()


def test_onnx_file_is_deployed_as_it_is(digits_onnx: Path, tmp_path: Path) -> None:
    spec = ModelSpec(onnx=digits_onnx.name, dataset="digits")
    for precision in ("fp32", "int8"):
        prepared = prepare_candidate(_candidate(spec, digits_onnx.parent, precision=precision),
                                     FAST, PROFILE, tmp_path)
        try:
            assert prepared.metrics["accuracy"] > 0.5
            assert prepared.metrics["params_m"] > 0 and prepared.metrics["macs_m"] > 0
            assert prepared.metrics["train_seconds"] == 0.0
            assert prepared.provenance["onnx_file"] == str(digits_onnx.resolve())
        finally:
            prepared.runner.close()
    # fp32 deploys the file itself: its outputs equal the reference, bit for bit or nearly.
    fp32 = prepare_candidate(_candidate(spec, digits_onnx.parent), FAST, PROFILE, tmp_path)
    fp32.runner.close()
    assert fp32.metrics["max_abs_error"] < 1e-5


def test_onnx_file_refuses_torch_and_a_changed_file(digits_onnx: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.onnx"
    copy.write_bytes(digits_onnx.read_bytes())
    candidate = _candidate(ModelSpec(onnx="copy.onnx"), tmp_path)
    with pytest.raises(BuildError, match="ONNX backends only, not 'torch'"):
        prepare_candidate(Candidate(**{**candidate.to_dict(), "backend": "torch"}), FAST,
                          PROFILE, tmp_path / "cache")
    changed = onnx.load(str(digits_onnx))
    changed.doc_string = "retrained"  # still a valid model, but not the one the campaign hashed
    onnx.save(changed, str(copy))
    with pytest.raises(BuildError, match="changed since the campaign read it"):
        prepare_candidate(candidate, FAST, PROFILE, tmp_path / "cache")


def test_fixed_batch_file_pads_the_last_batch(fixed_batch_onnx: Path, tmp_path: Path) -> None:
    spec = ModelSpec(onnx=fixed_batch_onnx.name, dataset="digits")
    prepared = prepare_candidate(_candidate(spec, fixed_batch_onnx.parent, batch_size=7), FAST,
                                 PROFILE, tmp_path)
    try:
        assert prepared.example.shape == (7, 1, 8, 8)
        assert prepared.metrics["max_abs_error"] < 1e-5  # the padded rows were dropped, not scored
    finally:
        prepared.runner.close()
    with pytest.raises(BuildError, match="fixes the batch at 7; batch size 8 cannot run"):
        prepare_candidate(_candidate(spec, fixed_batch_onnx.parent, batch_size=8), FAST, PROFILE,
                          tmp_path)


def test_user_evaluator_scores_the_deployed_runner(digits_onnx: Path, tmp_path: Path) -> None:
    spec = ModelSpec(onnx=digits_onnx.name,
                     evaluator="dse.examples.evaluators:digits_validation")
    prepared = prepare_candidate(_candidate(spec, digits_onnx.parent, precision="int8"), FAST,
                                 PROFILE, tmp_path)
    try:
        assert prepared.metrics["accuracy"] > 0.5
        assert prepared.metrics["top3_accuracy"] >= prepared.metrics["accuracy"]
        assert "accuracy" not in prepared.missing  # the evaluator gave it
    finally:
        prepared.runner.close()


def test_a_failing_evaluator_makes_the_candidate_infeasible(digits_onnx: Path,
                                                            tmp_path: Path) -> None:
    spec = ModelSpec(onnx=digits_onnx.name, evaluator="tests.models.factories:bad_evaluator")
    with pytest.raises(BuildError, match=re.escape(
            "evaluator tests.models.factories:bad_evaluator returned 'accuracy': 'high'")):
        prepare_candidate(_candidate(spec, digits_onnx.parent), FAST, PROFILE, tmp_path)


def test_deployed_model_predicts_any_number_of_rows(digits_onnx: Path, tmp_path: Path) -> None:
    from dse.accuracy.user_evaluator import DeployedModel

    prepared = prepare_candidate(_candidate(ModelSpec(onnx=digits_onnx.name), digits_onnx.parent),
                                 FAST, PROFILE, tmp_path)
    try:
        deployed = DeployedModel(prepared.runner.run, 8, (1, 8, 8))
        rows = np.random.default_rng(0).random((19, 1, 8, 8), dtype=np.float32)
        assert deployed.predict(rows).shape == (19, 10)
    finally:
        prepared.runner.close()


@pytest.mark.parametrize(("factory", "message"), [
    ("tests.models.factories:raising", "factory tests.models.factories:raising failed: "
                                       "ZeroDivisionError: the user's bug"),
    ("tests.models.factories:wrong_shape", "cannot build 'factory:tests.models.factories:"
                                           "wrong_shape'"),
])
def test_a_failing_factory_makes_the_candidate_infeasible(factory: str, message: str,
                                                          tmp_path: Path) -> None:
    spec = ModelSpec(factory=factory, dataset="digits")
    with pytest.raises(BuildError, match=message):
        prepare_candidate(_candidate(spec), FAST, PROFILE, tmp_path)


def test_proxy_constraint_screens_out_before_training(tmp_path: Path) -> None:
    """A constraint on a proxy is checked on the untrained network: a candidate that fails it
    costs no training (no weights are cached) and says why."""
    arch = {"num_stages": 1, "depth": 1, "width_mult": 0.25, "kernel_size": 3, "expand_ratio": 2}
    strict = Candidate(family="cnn", arch=arch, model={"proxy_filter": [
        ["proxy_synflow", ">=", 1e6]]}, precision="fp32", batch_size=4, backend="onnxruntime")
    with pytest.raises(BuildError, match=r"screened out before training: proxy_synflow = "
                                         r"[0-9.]+ violates the constraint proxy_synflow >= 1e\+06"):
        prepare_candidate(strict, FAST, PROFILE, tmp_path)
    assert not list(tmp_path.glob("trained/*.pt"))

    lenient = Candidate(**{**strict.to_dict(), "model": {"proxy_filter": [
        ["proxy_naswot", ">=", 0.0]]}})
    prepared = prepare_candidate(lenient, FAST, PROFILE, tmp_path)
    prepared.runner.close()
    assert prepared.metrics["proxy_naswot"] > 0 and np.isfinite(prepared.metrics["proxy_synflow"])
    assert list((tmp_path / "trained").glob("*.pt"))


def test_minus_inf_naswot_is_a_score_that_constraints_judge(tmp_path: Path) -> None:
    """32 ReLU units cannot separate the 64 proxy samples (the kernel's rank is at most 33): the
    score is exactly -inf, a value, not a missing metric; a constraint screens it out, saying
    why, before any training."""
    spec = ModelSpec(factory=MLP, dataset="digits", arch={"hidden": [32]})
    plain = _candidate(spec, arch={"hidden": 32, "layers": 1})
    strict = Candidate(**{**plain.to_dict(), "model": {
        **plain.model, "proxy_filter": [["proxy_naswot", ">=", 0.0]]}})
    with pytest.raises(BuildError, match=r"screened out before training: proxy_naswot = -inf \(its "
                                         r"activation-code kernel is singular: .*\) violates the "
                                         r"constraint proxy_naswot >= 0"):
        prepare_candidate(strict, FAST, PROFILE, tmp_path)
    assert not list(tmp_path.glob("trained/*.pt"))

    prepared = prepare_candidate(plain, FAST, PROFILE, tmp_path)
    try:
        assert prepared.metrics["proxy_naswot"] == -np.inf
        assert np.isfinite(prepared.metrics["proxy_synflow"])
        assert prepared.missing == {}
    finally:
        prepared.runner.close()
