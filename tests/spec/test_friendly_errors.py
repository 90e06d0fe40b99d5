"""Messages a user can act on: the forms a field takes (never an internal class name), "did you
mean ..." for a near-miss name, and a long list of allowed names cut short with where to read it
whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from dse.core.metrics import METRICS
from dse.spec import ExperimentSpec, HardwareProfile, SearchSpace
from dse.spec.errors import _unwrap, describe_validation_error
from dse.spec.near_names import SHORT_LIST, allowed_hint
from tests.conftest import LOCAL_CPU, REPO, TINY_SPACE

RANGE_FORMS = "expected a list of choices, e.g. [1, 4], or a range {low: 1, high: 4}"


def _file(tmp_path: Path, folder: str, text: str, name: str = "file.yaml") -> Path:
    (tmp_path / folder).mkdir(exist_ok=True)
    path = tmp_path / folder / name
    path.write_text(text)
    return path


def test_validate_names_the_forms_of_a_range_and_the_near_miss(tmp_path: Path) -> None:
    dashed = _file(tmp_path, "search_spaces", TINY_SPACE.replace(
        "intra_op_threads: [1]", "intra_op_threads: 1-4"), "dashed.yaml")
    misspelt = _file(tmp_path, "search_spaces", TINY_SPACE.replace(
        "  - metric: latency_p99_ms", "  - metric: latency_p99ms"), "misspelt.yaml")
    done = subprocess.run([sys.executable, "-m", "dse.cli", "validate", str(dashed), str(misspelt)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"{dashed}: deployment.backends.onnxruntime.knobs.intra_op_threads: {RANGE_FORMS} "
        f"(optional step, log); found '1-4'",
        f"{misspelt}: objectives[1].metric: unknown metric 'latency_p99ms'; did you mean "
        f"'latency_p99_ms', 'latency_p999_ms' or 'latency_p95_ms'?"]


@pytest.mark.parametrize(("folder", "text", "old", "new", "expected"), [
    ("search_spaces", TINY_SPACE, "  batch_sizes: [1, 4]", "  batch_sizes: 1-4",
     "deployment.batch_sizes: expected a list, e.g. [a, b]; found '1-4'"),
    ("search_spaces", TINY_SPACE, "    width_mult: [0.5, 1.0]", "    width_mult: 0.5",
     f"model.arch.width_mult: {RANGE_FORMS}"),
    ("search_spaces", TINY_SPACE, "  epochs: 2\n", "  epoch: 2\n",
     "training.epoch: unknown key 'epoch'; did you mean 'epochs'?"),
    ("search_spaces", TINY_SPACE, "    torch:\n", "    trch:\n",
     "deployment.backends.trch: found 'trch'; did you mean 'torch'?"),
    ("search_spaces", TINY_SPACE, "[fp32, int8]", "[fp32, FP16]",
     "deployment.precisions[1]: found 'FP16'; did you mean 'fp16'?"),
    ("search_spaces", TINY_SPACE, "        num_threads: [1]", "        num_thread: [1]",
     "deployment.backends.torch.knobs.num_thread: unknown knob of torch; did you mean "
     "'num_threads'?"),
    ("search_spaces", TINY_SPACE, "process_rss_peak_mb <= 100000", "procss_rss_peak_mb <= 100000",
     "constraints[0].metric: unknown metric 'procss_rss_peak_mb'; did you mean "
     "'process_rss_peak_mb'?"),
    ("search_spaces", TINY_SPACE, "constraints:\n  - process_rss_peak_mb <= 100000", "constraints: [5]",
     "constraints[0]: expected a constraint '<metric> <= <number>' (or >=), e.g. "
     "'process_rss_peak_mb <= 512', or {metric, op, value}; found 5"),
    ("search_spaces", TINY_SPACE, "training:\n  epochs: 2\n  batch_size: 128\n", "training: 5\n",
     "training: expected a mapping of keys (batch_size, epochs, learning_rate, seed, threads); "
     "found 5"),
    ("hw_profiles", LOCAL_CPU, "kind: cpu", "kind: cpu\ncompute_capabilty: 8.0",
     "compute_capabilty: unknown key 'compute_capabilty'; did you mean 'compute_capability'?"),
    ("hw_profiles", LOCAL_CPU, "kind: cpu", "kind: gpu",
     "kind: found 'gpu'; allowed: cpu, cuda, jetson, replay"),
])
def test_each_near_miss_or_wrong_form_is_one_clear_line(tmp_path: Path, folder: str, text: str,
                                                        old: str, new: str, expected: str) -> None:
    from dse import validate_files

    assert old in text
    path = _file(tmp_path, folder, text.replace(old, new))
    problems = validate_files([path])
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{path}: {expected}")


def test_a_sampler_name_near_miss(tiny_campaign: Path) -> None:
    from dse import validate_files

    tiny_campaign.write_text(tiny_campaign.read_text().replace("name: random", "name: nsga"))
    assert validate_files([tiny_campaign]) == [
        f"{tiny_campaign}: sampler.name: found 'nsga'; did you mean 'nsga3' or 'nsga2'?"]


def test_nothing_close_cuts_a_long_list_and_says_where_the_rest_are(tmp_path: Path) -> None:
    from dse import validate_files

    path = _file(tmp_path, "search_spaces", TINY_SPACE.replace(
        "  - metric: latency_p99_ms", "  - metric: speed"))
    (problem,) = validate_files([path])
    names = sorted(METRICS)
    assert problem == (f"{path}: objectives[1].metric: unknown metric 'speed'; allowed: "
                       f"{', '.join(names[:SHORT_LIST])}, ... ({len(names) - SHORT_LIST} more; "
                       f"all of them: dse list metrics, or docs/metrics.md)")


def test_docs_metrics_lists_every_metric() -> None:
    """Where a cut list of metrics sends the reader (the table is `dse list metrics`'s own:
    tests/docs/test_generated_tables.py)."""
    page = (REPO / "docs" / "metrics.md").read_text()
    assert [name for name in sorted(METRICS) if f"| `{name}` |" not in page] == []


def test_the_hint_itself() -> None:
    assert allowed_hint("fp61", ["fp32", "fp16", "bf16"]) == "did you mean 'fp16'?"
    assert allowed_hint("x", ["a", "b"]) == "allowed: a, b"
    assert allowed_hint("gpu", ["cpu", "cuda"]) == "allowed: cpu, cuda"  # too short to guess
    assert allowed_hint(5, ["a"]) == "allowed: a"  # not a name: nothing to match
    assert allowed_hint("y" * 10_000, ["y" * 20]) == f"allowed: {'y' * 20}"
    many = [f"name_{index:02d}" for index in range(SHORT_LIST + 5)]
    assert allowed_hint("zzz", many, full_list="the docs").endswith(", ... (5 more; all of "
                                                                    "them: the docs)")


def _models(root: type[BaseModel], found: dict[type[BaseModel], None]) -> None:
    if root in found:
        return
    found[root] = None
    for field in root.model_fields.values():
        for model in _unwrap(field.annotation):
            _models(model, found)


def test_no_message_names_a_model_class() -> None:
    """Every field of every YAML model, given values of the wrong type and shape: no line names a
    pydantic model or Python class (``instance of RangeParam``, ``<class 'pathlib.Path'>``)."""
    models: dict[type[BaseModel], None] = {}
    for root in (ExperimentSpec, HardwareProfile, SearchSpace):
        _models(root, models)
    names = [model.__name__ for model in models]
    assert "RangeParam" in names and "TrainingSpec" in names
    lines = []
    for model in models:
        for field in model.model_fields:
            for wrong in (5, "1-4", [[1]], {"k": {"j": 1}}, True, None, 1.5, [{"a": 1}]):
                try:
                    model.model_validate({field: wrong})
                except ValidationError as exc:
                    lines.extend(describe_validation_error(Path("f.yaml"), model, exc))
    assert len(lines) > 1000
    leaks = [line for line in lines
             if any(name in line for name in names) or "instance of" in line or "<class" in line]
    assert leaks == []
