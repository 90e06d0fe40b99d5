"""Arch and knob values a device kind cannot run (a CUDA-only attention kernel, a CUDA-graph
capture) are refused by `dse validate` of the experiment, one line each naming the space's field
and the device; a GPU device accepts them, and the space alone (no device named) is valid."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from dse import load_experiment
from dse.app.campaign_checks import device_problems
from dse.cli import app
from dse.core.exceptions import SpecError

runner = CliRunner()

SPACE = """\
name: attention-kernels
model:
  family: transformer
  arch:
    num_layers: [1]
    attention: [explicit, flash, efficient]
training: {epochs: 1, batch_size: 64}
deployment:
  backends:
    torch:
      knobs:
        num_threads: [1]
        cuda_graph: [false, true]
        attention_kernel: [default, math, efficient]
  precisions: [fp32]
  batch_sizes: [4]
objectives:
  - metric: accuracy
  - metric: latency_p99_ms
"""
CPU = "name: local-cpu\nkind: cpu\nbackends: [torch]\nprecisions: [fp32]\n"
GPU = "name: a-gpu\nkind: cuda\nbackends: [torch]\nprecisions: [fp32]\n"


def _campaign(tmp_path: Path, profile: str) -> Path:
    for folder, name, text in [
            ("search_spaces", "space.yaml", SPACE), ("hw_profiles", "device.yaml", profile),
            ("experiments", "campaign.yaml",
             "name: kernels\nsearch_space: ../search_spaces/space.yaml\n"
             "devices: [../hw_profiles/device.yaml]\nbudget: {trials: 2}\n")]:
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / name).write_text(text)
    return tmp_path / "experiments" / "campaign.yaml"


def test_a_cpu_device_refuses_each_cuda_only_value_in_one_line(tmp_path: Path) -> None:
    experiment = _campaign(tmp_path, CPU)
    result = runner.invoke(app, ["validate", str(experiment)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    space = str(experiment.parent / "../search_spaces/space.yaml")  # as the experiment names it
    device = f"cannot run on devices[0] of {experiment} ('local-cpu', a cpu device)"
    expected = [
        f"{space}: model.arch.attention: transformer attention 'efficient': torch has no "
        f"efficient SDPA kernel for a cpu device (it is CUDA-only); allowed there: explicit, "
        f"math, flash; it {device}",
        f"{space}: deployment.backends.torch.knobs.cuda_graph: knob 'cuda_graph' true needs a "
        f"CUDA device (it captures the forward in a CUDA graph); a cpu device has none; it "
        f"{device}",
        f"{space}: deployment.backends.torch.knobs.attention_kernel: knob 'attention_kernel' "
        f"'efficient': torch has no efficient SDPA kernel for a cpu device (it is CUDA-only); "
        f"allowed there: default, math, flash; it {device}",
    ]
    # The console may wrap long lines: compare the text with the wrapping undone.
    assert " ".join(lines).split() == " ".join(expected).split()


def test_a_cuda_device_accepts_them(tmp_path: Path) -> None:
    experiment = load_experiment(_campaign(tmp_path, GPU))
    assert device_problems(experiment) == []


def test_the_space_alone_is_valid(tmp_path: Path) -> None:
    _campaign(tmp_path, CPU)
    result = runner.invoke(app, ["validate", str(tmp_path / "search_spaces" / "space.yaml")])
    assert result.exit_code == 0, result.output


def test_load_experiment_raises_them(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as refused:
        load_experiment(_campaign(tmp_path, CPU))
    assert len(refused.value.problems) == 3


@pytest.mark.parametrize(("arch", "knobs", "says"), [
    ({"attention": "efficient"}, {}, "transformer attention 'efficient': torch has no efficient "
                                     "SDPA kernel for a cpu device"),
    ({}, {"cuda_graph": True}, "knob 'cuda_graph' true needs a CUDA device"),
])
def test_the_worker_refuses_them_before_training(tmp_path: Path, arch: dict[str, object],
                                                 knobs: dict[str, object], says: str) -> None:
    """A candidate that reached a device without `dse validate` (the Python API, a resumed
    study): refused by the worker's first checks, so nothing is trained or built."""
    import yaml

    from dse.core.candidate import Candidate
    from dse.core.exceptions import BuildError
    from dse.spec import HardwareProfile, TrainingSpec
    from dse.trial.prepare import prepare_candidate

    profile = HardwareProfile.model_validate(yaml.safe_load(CPU))
    candidate = Candidate("transformer", arch, "fp32", 4, "torch", knobs, device_profile="local-cpu")
    with pytest.raises(BuildError, match=says):
        prepare_candidate(candidate, TrainingSpec(), profile, tmp_path)
    assert not any(tmp_path.iterdir())  # no weights trained, no artifact built
