"""`dse validate`: one clear line per problem, exit code 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dse.cli import app
from tests.conftest import REPO, TINY_SPACE

runner = CliRunner()


def _space(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "search_spaces"
    folder.mkdir(exist_ok=True)
    path = folder / "space.yaml"
    path.write_text(text)
    return path


def test_shipped_examples_are_valid() -> None:
    files = [REPO / "experiments/quickstart.yaml", REPO / "search_spaces/cnn-digits.yaml",
             REPO / "hw_profiles/local-cpu.yaml"]
    result = runner.invoke(app, ["validate", *map(str, files)])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[-1] == "ok"
    # What the quickstart's device is not offered is said, with the capability table's reason.
    assert f"{files[0]}: local-cpu: torch/int8 dropped: torch eager int8 needs a quantized torch " \
           f"module; use onnxruntime or tensorrt for int8" in lines
    assert all(" dropped: " in line for line in lines[:-1])


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("  batch_size: 128", "  batchsize: 128",
         "training.batchsize: unknown key 'batchsize'; did you mean 'batch_size'?"),
        ("  epochs: 2", "  epochs: two", "training.epochs: Input should be a valid integer"),
        ("    torch:\n", "    coreml:\n", "deployment.backends.coreml: found 'coreml'; "
                                           "allowed: executorch, litert, onnxruntime, "
                                           "onnxruntime_cuda, onnxruntime_genai, "
                                           "onnxruntime_tensorrt, openvino, "
                                           "tensorrt, torch, torch_compile, tvm, xla"),
        ("[fp32, int8]", "[fp32, int4]",
         "deployment.precisions[1]: found 'int4'; did you mean 'int8'?"),
        ("  - metric: latency_p99_ms", "  - metric: latency_p99",
         "objectives[1].metric: unknown metric 'latency_p99'; did you mean 'latency_p99_ms', "
         "'latency_p999_ms' or 'latency_p95_ms'?"),
        ("    kernel_size: [3]", "    kernel: [3]",
         "model.arch.kernel: unknown parameter of family 'cnn'; allowed: depth, expand_ratio"),
        ("    kernel_size: [3]", "    kernel_size: [3, 7]", "model.arch.kernel_size: "),
        ("        intra_op_threads: [1]", "        intra_threads: [1]",
         "deployment.backends.onnxruntime.knobs.intra_threads: unknown knob of onnxruntime; "
         "did you mean 'intra_op_threads' or 'inter_op_threads'?"),
        ("  - process_rss_peak_mb <= 100000", "  - process_rss_peak_mb < lots",
         "constraints[0]: constraint must read"),
    ],
)
def test_each_mistake_gives_one_clear_line(tmp_path: Path, old: str, new: str,
                                           expected: str) -> None:
    assert old in TINY_SPACE
    path = _space(tmp_path, TINY_SPACE.replace(old, new))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"{path}: ")
    assert expected in lines[0]


def test_invalid_yaml_and_missing_file(tmp_path: Path) -> None:
    broken = _space(tmp_path, "name: [unclosed\n")
    result = runner.invoke(app, ["validate", str(broken), str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert f"{broken}: line 2, column 1: invalid YAML" in result.output
    assert f"{tmp_path / 'nope.yaml'}: file not found" in result.output


def test_experiment_reports_problems_of_the_files_it_names(tiny_campaign: Path) -> None:
    space = tiny_campaign.parent.parent / "search_spaces" / "tiny.yaml"
    space.write_text(TINY_SPACE.replace("epochs: 2", "epochs: 0"))
    result = runner.invoke(app, ["validate", str(tiny_campaign)])
    assert result.exit_code == 2
    assert "tiny.yaml: training.epochs: Input should be greater than or equal to 1" in result.output


def test_real_process_prints_no_traceback(tmp_path: Path) -> None:
    path = _space(tmp_path, TINY_SPACE.replace("[fp32, int8]", "[fp32, fp4]") + "bogus: 1\n")
    proc = subprocess.run([sys.executable, "-m", "dse.cli", "validate", str(path)],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2
    assert any("bogus: unknown key" in line for line in lines)
    assert any("found 'fp4'" in line for line in lines)


def test_schema_writes_one_file_per_kind(tmp_path: Path) -> None:
    result = runner.invoke(app, ["schema", "--out", str(tmp_path)])
    assert result.exit_code == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["experiment.schema.json", "hw_profile.schema.json",
                     "search_space.schema.json"]
    assert "description" in (tmp_path / "search_space.schema.json").read_text()


def test_a_percentile_objective_sets_the_floor_and_max_iters_must_allow_it(
        tiny_campaign: Path) -> None:
    from dse.app.api import load_experiment

    text = tiny_campaign.read_text().replace("max_seconds: 0.5,", "max_seconds: 0.5, max_iters: 300,")
    assert "max_iters: 300" in text
    tiny_campaign.write_text(text)
    result = runner.invoke(app, ["validate", str(tiny_campaign)])
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"{tiny_campaign}: measurement.max_iters: 300 samples can never give latency p99 (used "
        f"by tiny's objectives or constraints) a 95% confidence interval; it needs at least 368")

    tiny_campaign.write_text(text.replace("max_iters: 300", "max_iters: 400"))
    measurement = load_experiment(tiny_campaign).spec.measurement
    assert measurement.percentiles is None
    assert measurement.for_metrics(["accuracy", "latency_p99_ms"]).percentiles == ["p50", "p99"]
    assert measurement.for_metrics(["latency_p90_ci_low_ms"]).percentiles == ["p50", "p90"]


def test_explicit_percentiles_are_checked_against_max_iters(tmp_path: Path) -> None:
    from dse.spec import MeasureSpec

    assert MeasureSpec(percentiles=["p50", "p999"]).required_quantiles() == (0.5, 0.999)
    with pytest.raises(ValueError, match="max_iters = 1000 can never give p999 a 95% confidence "
                                         "interval"):
        MeasureSpec(percentiles=["p999"], max_iters=1000)
    with pytest.raises(ValueError, match="max_seconds"):
        MeasureSpec(max_seconds=float("nan"))
