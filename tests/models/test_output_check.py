"""The driver's check of a user's model (dse.models.output_check): one candidate of a factory or
ONNX file built here, one forward, and its output judged — a model every trial would fail on is
refused by `dse validate` and at the start of `dse run`, in one line naming file, field and what
came back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dse import load_experiment, run_campaign
from dse.core.exceptions import SpecError
from dse.models.output_check import model_output_problems
from dse.spec import ModelSpec
from tests.conftest import REPO
from tests.models.bad_factories import write_linear_onnx
from tests.search.test_model_sources_campaign import _campaign

SPACE = Path("search_spaces/mine.yaml")
HIDDEN = {"hidden": [16, 32]}


def _problems(factory: str, **fields: object) -> list[str]:
    spec = ModelSpec.model_validate({"factory": f"tests.models.factories:{factory}",
                                     "dataset": "digits", "arch": HIDDEN, **fields})
    return model_output_problems(SPACE, spec)


def test_a_tuple_output_names_the_index_of_the_logits() -> None:
    [problem] = _problems("tuple_output")
    assert problem.startswith(f"{SPACE}: model.factory: forward returned a tuple of 2, not a "
                              f"tensor of shape (batch, 10); return its [1]: "), problem


def test_logits_for_another_class_count_are_refused() -> None:
    assert _problems("five_classes") == [
        f"{SPACE}: model.factory: forward on a batch of 2 returned a tensor of shape (2, 5), not "
        f"(batch, 10): the dataset has 10 classes, one logit each (arch {{'hidden': 16}})"]


def test_an_example_input_that_does_not_fit_the_dataset_is_refused_without_input_shape() -> None:
    assert _problems("wrong_example") == [
        f"{SPACE}: model.dataset: dataset digits holds 1x8x8 images; the model takes "
        f"[1, 16, 16] (the factory's example input, arch {{'hidden': 16}})"]
    # input_shape written beside an example that disagrees with it: which one is meant?
    [problem] = _problems("wrong_example", input_shape=[1, 8, 8])
    assert problem.startswith(f"{SPACE}: model.input_shape: [1, 8, 8], but the factory's example "
                              f"input has samples of shape [1, 16, 16]"), problem


def test_a_bare_module_is_fed_the_one_sample_shape_its_dataset_holds() -> None:
    """A library model returned as is, on digits: its output is judged at once (1x8x8), not
    after the user first writes input_shape."""
    assert _problems("bare_module") == []
    spec = ModelSpec.model_validate({"factory": "tests.models.factories:bare_module",
                                     "dataset": "sequences", "arch": HIDDEN})
    assert model_output_problems(SPACE, spec) == [
        f"{SPACE}: model.factory: the factory returned only a module (arch {{'hidden': 16}}); "
        f"dataset sequences holds samples of more than one shape: return (module, example "
        f"input) or set model.input_shape"]


def test_an_arch_the_factory_refuses_moves_the_check_to_the_next() -> None:
    """A space may hold combinations its factory refuses (each such candidate is infeasible);
    the check builds the first one it accepts."""
    assert _problems("refuses_small") == []
    spec = ModelSpec.model_validate({"factory": "tests.models.factories:raising",
                                     "dataset": "digits", "arch": HIDDEN})
    assert model_output_problems(SPACE, spec) == [
        f"{SPACE}: model.factory: factory tests.models.factories:raising failed: "
        f"ZeroDivisionError: the user's bug (arch {{'hidden': 16}})"]


def test_a_factory_that_hangs_is_given_up_on_in_time() -> None:
    spec = ModelSpec.model_validate({"factory": "tests.models.bad_factories:hangs_when_small",
                                     "dataset": "digits", "arch": {"hidden": [16]}})
    [problem] = model_output_problems(SPACE, spec, timeout_s=0.5)
    assert problem.endswith("did not finish within 0.5 s: does the factory or its forward hang?")


def test_an_onnx_file_with_another_class_count_is_refused(tmp_path: Path) -> None:
    model = write_linear_onnx(tmp_path / "five.onnx", classes=5)
    spec = ModelSpec(onnx=str(model), dataset="digits")
    assert model_output_problems(SPACE, spec, batch_sizes=(4, 1)) == [
        f"{SPACE}: model.onnx: its first output 'y' has shape (1, 5) on a batch of 1, not "
        f"(batch, 10): dse scores the first output as the logits, one per class of dataset "
        f"digits"]
    mystery = write_linear_onnx(tmp_path / "mystery.onnx", op_domain="com.example.mystery")
    [problem] = model_output_problems(SPACE, ModelSpec(onnx=str(mystery)), batch_sizes=(4,))
    assert "model.onnx: ONNX Runtime (CPU, which computes every candidate's fp32 reference) " \
           "cannot load it" in problem and "com.example.mystery:Mystery" in problem, problem


def test_validate_names_the_field_to_return_for_a_library_model(tmp_path: Path) -> None:
    """What a user meets: `dse validate` of a space whose factory returns a Hugging Face model
    (a vision transformer) as is: one line, exit 2, no traceback; the fix it asks for (a module
    returning the model's .logits) passes."""
    (tmp_path / "search_spaces").mkdir()
    as_is, fixed = (_vit_space(tmp_path, name) for name in ("vit_as_is", "vit_logits"))
    done = subprocess.run([sys.executable, "-m", "dse.cli", "validate", str(as_is), str(fixed)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    # Only the verdict: what torchao, torch and transformers log as they import is kept off.
    assert done.stderr.splitlines() == [
        f"{as_is}: model.factory: forward returned ImageClassifierOutput, not a tensor of shape "
        f"(batch, 10); return its .logits: wrap the model in a torch.nn.Module whose forward "
        f"returns model(x).logits (arch {{'hidden': 16}})"], done.stderr


def _vit_space(root: Path, factory: str) -> Path:
    space = root / "search_spaces" / f"{factory}.yaml"
    space.write_text(f"""\
name: {factory.replace("_", "-")}
model:
  factory: tests.models.factories:{factory}
  dataset: digits
  arch: {{hidden: [16, 32]}}
deployment:
  backends: {{onnxruntime: {{knobs: {{intra_op_threads: [1]}}}}}}
  precisions: [fp32]
  batch_sizes: [1]
objectives: [{{metric: accuracy}}, {{metric: latency_p50_ms}}]
""")
    return space


def test_run_refuses_such_a_model_before_the_farm_starts(tmp_path: Path) -> None:
    """`dse run` checks the same at its start, before Ray: no trial is spent on it (and no Ray
    cluster is needed to find out)."""
    experiment = _campaign(tmp_path, "five", "  factory: tests.models.factories:five_classes\n"
                                             "  dataset: digits\n  arch: {hidden: [16]}")
    loaded = load_experiment(experiment)  # loading stays cheap: the model is built at the start
    with pytest.raises(SpecError, match=r"five\.yaml: model\.factory: forward on a batch of 2 "
                                        r"returned a tensor of shape \(2, 5\)"):
        run_campaign(loaded, report=False)
    assert not (loaded.run_dir / "study.db").exists() or not list(_trials(loaded.run_dir))


def _trials(run_dir: Path) -> list[object]:
    import optuna

    storage = f"sqlite:///{run_dir / 'study.db'}"
    return [t for name in optuna.get_all_study_names(storage)
            for t in optuna.load_study(study_name=name, storage=storage).get_trials()]


def test_what_a_factory_module_logs_as_it_imports_is_kept_off_validate(tmp_path: Path) -> None:
    (tmp_path / "search_spaces").mkdir()
    space = _vit_space(tmp_path, "vit_logits")
    space.write_text(space.read_text().replace("tests.models.factories:vit_logits",
                                                "tests.models.noisy_factory:mlp"))
    done = subprocess.run([sys.executable, "-m", "dse.cli", "validate", str(space)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "ok", "")
