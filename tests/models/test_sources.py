"""Model sources in the YAML and in candidates: a family, a factory, an ONNX file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from dse.app.api import validate_files
from dse.core.candidate import Candidate
from dse.models.onnx_file import onnx_input
from dse.models.sources import FactorySource, candidate_source, model_source, source_dataset
from dse.spec import ModelSpec

SPACE = """\
name: sources
model:
{model}
deployment:
  backends:
{backends}
  precisions: [fp32]
  batch_sizes: {batches}
objectives:
{objectives}
"""


def _space(tmp_path: Path, model: str, *, backends: str = "    onnxruntime: {}",
           batches: str = "[1, 4]", objectives: str = "  - metric: latency_p50_ms") -> Path:
    path = tmp_path / "search_spaces" / "space.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(SPACE.format(model=model, backends=backends, batches=batches,
                                 objectives=objectives))
    return path


def _linear_onnx(path: Path, batch: int | str = "batch", elem: int = TensorProto.FLOAT) -> Path:
    """Flatten then Gemm 64 -> 10: a digits classifier's shape."""
    weights = helper.make_tensor("w", TensorProto.FLOAT, [10, 64],
                                 np.linspace(-1, 1, 640).astype(np.float32).tolist())
    graph = helper.make_graph(
        [helper.make_node("Flatten", ["x"], ["flat"]),
         helper.make_node("Gemm", ["flat", "w"], ["y"], transB=1)],
        "linear",
        [helper.make_tensor_value_info("x", elem, [batch, 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])],
        [weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_a_model_needs_exactly_one_source() -> None:
    with pytest.raises(ValueError, match="exactly one of family, factory, onnx or llm; got none"):
        ModelSpec.model_validate({"arch": {}})
    with pytest.raises(ValueError, match="got family, onnx"):
        ModelSpec.model_validate({"family": "cnn", "onnx": "m.onnx"})
    with pytest.raises(ValueError, match="fixed architecture"):
        ModelSpec.model_validate({"onnx": "m.onnx", "arch": {"depth": [1]}})
    with pytest.raises(ValueError, match="input_shape is for a factory"):
        ModelSpec.model_validate({"family": "cnn", "input_shape": [1, 8, 8]})
    with pytest.raises(ValueError, match="module:function"):
        ModelSpec.model_validate({"factory": "not a reference"})


def test_a_family_candidate_keeps_its_id() -> None:
    """A built-in family without extra settings hashes as it did before sources existed."""
    family, settings = candidate_source(ModelSpec(family="cnn", arch={"depth": [1]}))
    assert (family, settings) == ("cnn", {})
    candidate = Candidate(family="cnn", arch={"depth": 1}, precision="fp32", batch_size=1,
                          backend="onnxruntime")
    assert "model" not in candidate.to_dict()
    assert candidate.arch_id == Candidate(family="cnn", arch={"depth": 1}).arch_id
    assert source_dataset("cnn", {}) == "digits"


def test_factory_source_builds_and_reports_its_shape() -> None:
    import torch

    family, settings = candidate_source(ModelSpec(
        factory="dse.examples.models:digits_mlp", dataset="digits", arch={"hidden": [16]}))
    assert family == "factory:dse.examples.models:digits_mlp"
    assert settings == {"factory": "dse.examples.models:digits_mlp", "dataset": "digits"}
    source = model_source(family, settings)
    assert source.input_shape_for({"hidden": 16}) == (1, 8, 8)  # from the example batch
    module = source.build({"hidden": 16, "layers": 2})
    assert module(torch.zeros(3, 1, 8, 8)).shape == (3, 10)
    assert source.validate({"hidden": np.int64(16)}) == {"hidden": 16}


def test_factory_that_returns_only_a_module_needs_input_shape_or_a_dataset_of_one_shape() -> None:
    source = FactorySource("tests.models.factories:bare_module")
    with pytest.raises(ValueError, match="returned only a module"):
        source.input_shape_for({})
    assert FactorySource("tests.models.factories:bare_module",
                         (1, 8, 8)).input_shape_for({}) == (1, 8, 8)
    # digits holds 1x8x8 images only: the space need not say so again; sequences come at any
    # length, so its shape stays the space's to give.
    factory = "tests.models.factories:bare_module"
    on_digits = model_source(f"factory:{factory}", {"factory": factory, "dataset": "digits"})
    assert on_digits.input_shape_for({}) == (1, 8, 8)
    on_sequences = model_source(f"factory:{factory}", {"factory": factory, "dataset": "sequences"})
    with pytest.raises(ValueError, match="its dataset does not fix the sample shape"):
        on_sequences.input_shape_for({})
    with pytest.raises(ValueError, match=r"not a torch\.nn\.Module"):
        FactorySource("tests.models.factories:not_a_module").build({})


def test_onnx_source_hashes_the_file(tmp_path: Path) -> None:
    path = _linear_onnx(tmp_path / "linear.onnx")
    family, settings = candidate_source(ModelSpec(onnx="linear.onnx"), tmp_path)
    assert family == "onnx:linear.onnx"
    assert settings["onnx"] == str(path.resolve()) and len(settings["sha256"]) == 64
    assert source_dataset(family, settings) is None
    info = onnx_input(path)
    assert (info.name, info.sample_shape, info.fixed_batch) == ("x", (1, 8, 8), None)
    assert onnx_input(_linear_onnx(tmp_path / "fixed.onnx", batch=4)).fixed_batch == 4


def test_onnx_inputs_dse_cannot_feed_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is INT64; dse feeds float32"):
        onnx_input(_linear_onnx(tmp_path / "int.onnx", elem=TensorProto.INT64))
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="not a readable ONNX model"):
        onnx_input(tmp_path / "junk.onnx")


def test_validation_names_file_field_and_allowed(tmp_path: Path) -> None:
    (tmp_path / "search_spaces").mkdir()
    _linear_onnx(tmp_path / "search_spaces" / "fixed.onnx", batch=4)
    space = _space(tmp_path, "  onnx: fixed.onnx\n  dataset: sequences",
                   backends="    onnxruntime: {}\n    torch: {}",
                   objectives="  - metric: latency_p50_ms")
    problems = "\n".join(validate_files([space]))
    assert f"{space}: deployment.backends.torch: an ONNX model runs on the ONNX backends" in problems
    assert f"{space}: deployment.batch_sizes: the ONNX file fixes the batch at 4; [1]" in problems
    assert f"{space}: model.dataset: dataset sequences holds" in problems

    missing = _space(tmp_path, "  onnx: nowhere.onnx")
    assert validate_files([missing]) == [
        f"{missing}: model.onnx: file not found: {(missing.parent / 'nowhere.onnx').resolve()}"]

    no_data = _space(tmp_path, "  factory: dse.examples.models:digits_mlp",
                     objectives="  - metric: accuracy\n  - metric: latency_p50_ms")
    assert "needs a dataset (model.dataset: digits | sequences) or your evaluator" in (
        "\n".join(validate_files([no_data])))

    unimportable = _space(tmp_path, "  factory: no_such_package.models:build\n  dataset: digits")
    assert any("model.factory: no_such_package.models:build: cannot import module "
               "'no_such_package.models'" in p
               for p in validate_files([unimportable]))

    wrong_family_data = _space(tmp_path, "  family: cnn\n  dataset: sequences")
    assert any("model.dataset: family 'cnn' trains on 'digits', not 'sequences'" in p
               for p in validate_files([wrong_family_data]))


def test_shipped_source_examples_are_valid() -> None:
    repo = Path(__file__).resolve().parents[2]
    spaces = sorted((repo / "search_spaces").glob("*.yaml"))
    assert validate_files(spaces) == []


def test_proxy_constraints_travel_with_the_candidate(tmp_path: Path) -> None:
    import optuna
    import yaml

    from dse.search.space import suggest_candidate
    from dse.spec import HardwareProfile, SearchSpace
    from tests.conftest import LOCAL_CPU, TINY_SPACE

    data = yaml.safe_load(TINY_SPACE)
    data["constraints"] = ["proxy_naswot >= 400", "process_rss_peak_mb <= 1000"]
    space = SearchSpace.model_validate(data)
    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    trial = optuna.create_study().ask()
    candidate = suggest_candidate(trial, space, profile)
    assert candidate.model == {"proxy_filter": [["proxy_naswot", ">=", 400.0]]}
