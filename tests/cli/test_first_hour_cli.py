"""The command line as a new user meets it in the first hour (issue 23): piped output neither
wrapped nor cut, every objective on each progress line and a failure's whole reason, a resumed
run saying how far it is, a finished campaign starting no Ray, the dashboard beside the
experiment and named in the run's first line, `dse --version`, and `dse devices` without a farm.
Each `dse` runs in a subprocess, its output piped as a script or a log would read it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dse.core.candidate import Candidate
from dse.core.version import __version__
from tests.conftest import REPO, tiny_experiment_text

# Brackets and a path: text rich markup would eat; long: far past 80 columns.
LONG_REASON = ("the exporter refused the graph [draft] of /models/v2/[stage-3]/block.onnx because "
               "the attention block's output is an ImageClassifierOutput, not a logits tensor; "
               "return its .logits from forward, then every candidate of this architecture "
               "builds; see docs/models.md's factory contract for what forward must return")

REPLAY_SPACE = """\
name: three-objectives
parameters:
  x: [0, 1, 2, 3, 4, 5]
objectives:
  - metric: accuracy
  - metric: latency_p99_ms
  - metric: throughput_sps
"""


def _replay_table() -> str:
    rows = ["x,accuracy [fraction],latency_p99_ms [ms],throughput_sps [samples/s],status,reason"]
    for x in range(6):
        if x == 2:
            rows.append(f'{x},,,,failed,"{LONG_REASON}"')
        else:
            rows.append(f"{x},{0.5 + x / 20},{1.5 + x},{1000.0 * (x + 1)},ok,")
    return "\n".join(rows) + "\n"


def _dse(*args: str, env: dict[str, str] | None = None,
         cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # as piped, no hint
    return subprocess.run([sys.executable, "-m", "dse.cli", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=300, env={**environment, **(env or {})})


@pytest.fixture
def replay_three(tmp_path: Path) -> Path:
    """A replay device of three objectives whose table records one candidate's long failure."""
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "three.csv").write_text(_replay_table())
    (tmp_path / "three.yaml").write_text(REPLAY_SPACE)
    (tmp_path / "replay-three.yaml").write_text(
        "name: replay-three\nkind: replay\ntable: tables/three.csv\n")
    experiment = tmp_path / "proj" / "exp.yaml"
    experiment.parent.mkdir()
    experiment.write_text("name: exp\nsearch_space: ../three.yaml\n"
                          "devices: [../replay-three.yaml]\nsampler: {name: grid}\n"
                          "budget: {trials: 2}\n"
                          "baseline: {params: {x: 2}}\n")  # measured first: the failing one
    return experiment


def test_progress_shows_every_objective_and_a_whole_reason_then_a_resume_says_how_far(
        replay_three: Path) -> None:
    first = _dse("run", str(replay_three))
    assert first.returncode == 0, first.stdout + first.stderr
    lines = first.stdout.splitlines()
    measured = [line for line in lines if line.startswith("#") and ": accuracy " in line]
    assert len(measured) == 2, first.stdout
    for line in measured:  # every objective, named, with its unit
        assert "latency_p99 " in line and " ms, throughput_sps " in line, line
        assert line.endswith(" samples/s"), line
    assert "resuming" not in first.stdout  # a new campaign resumes nothing

    replay_three.write_text(replay_three.read_text().replace("trials: 2", "trials: 5"))
    again = _dse("run", str(replay_three))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resuming: 2 of 5 trials done" in again.stdout.splitlines()
    # The baseline's failure, its reason whole on one line (piped output is never wrapped or
    # cut); the resumed run reuses it and prints no line of it again.
    (failed,) = [line for line in (first.stdout + again.stdout).splitlines()
                 if line.startswith("#") and ": accuracy " not in line]
    assert failed.startswith("#0 replay-three x=2: infeasible: ") and failed.endswith(LONG_REASON)
    assert "…" not in first.stdout + again.stdout and "Traceback" not in again.stderr


def stand_in(candidate: Candidate) -> dict[str, float]:
    """Fills the study of a farm device in-process (no training, no Ray): a deterministic
    function of the candidate, so that the rerun below meets a finished campaign."""
    width = float(candidate.arch["width_mult"])
    return {"accuracy": 0.5 + width / 4, "latency_p99_ms": 0.1 * candidate.batch_size + width,
            "process_rss_peak_mb": 100.0}


@pytest.fixture
def ray_root() -> Iterator[Path]:
    # Short: Ray's socket paths under its temp root must fit in 107 characters.
    folder = Path(tempfile.mkdtemp(prefix="dse-ray-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_finished_campaign_starts_no_ray_and_names_its_dashboard(
        tiny_campaign: Path, ray_root: Path) -> None:
    from rich.console import Console

    from dse.app.api import run_campaign
    from dse.cli.trial_display import front_table

    tiny_campaign.write_text(tiny_experiment_text(2))
    finished = run_campaign(tiny_campaign, evaluator=stand_in, report=False)
    assert len(finished.trials) >= 2

    # RAY_TMPDIR: every Ray this process started would leave its session folder there.
    done = _dse("run", str(tiny_campaign), env={"RAY_TMPDIR": str(ray_root)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (ray_root / "ray").exists(), "a finished campaign started Ray"
    lines = done.stdout.splitlines()
    dashboard = tiny_campaign.parents[1] / "dashboards" / "tiny-campaign.html"
    assert lines[0] == (f"campaign tiny-campaign: 2 distinct candidates on local-cpu; run folder "
                        f"{tiny_campaign.parent / 'runs' / 'tiny-campaign'}; dashboard {dashboard}")
    assert ("resuming: 2 of 2 trials done; every device has its budget.trials: nothing left to "
            "measure") in lines
    assert dashboard.is_file() and f"dashboard: {dashboard}" in lines
    assert not (tiny_campaign.parent / "dashboards").exists()  # the project's, not experiments/
    # The front table whole: every runtime/precision cell as it is, nothing cut with "…".
    front = finished.pareto()
    for _, row in front.iterrows():
        runtime = f"{row['param.backend']}/{row['param.precision']}"
        assert any(f" {runtime} " in line for line in lines if line.startswith("│")), runtime
    assert "…" not in done.stdout

    # In a narrow terminal the table folds its cells onto more lines; it never cuts one.
    terminal = Console(width=48, force_terminal=True, record=True, highlight=False)
    terminal.print(front_table(front, finished.objectives))
    assert "…" not in terminal.export_text()


def test_version() -> None:
    done = _dse("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"dse {__version__}\n"


def test_devices_without_a_farm_lists_this_machine(tmp_path: Path) -> None:
    # A home of its own: no head that `dse cluster up` started is found there.
    done = _dse("devices", env={"HOME": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("no farm address given")
    assert lines[1].startswith("  CPU:  ")
    assert f"{len(os.sched_getaffinity(0))} logical CPUs" in lines[1]
    assert any(line.startswith(("  GPU 0: ", "  GPUs: none found (")) for line in lines)
    # The shipped CPU profile fits any machine; a replay profile needs none and is not listed.
    assert "    local-cpu (cpu: this CPU)" in lines
    assert not any("replay-example" in line for line in lines)
    assert lines[-1].startswith("a farm's devices: dse devices --address HOST:PORT")


def test_a_resume_notice_counts_every_device() -> None:
    from dse.app.campaign_setup import campaign_finished, resume_notice
    from dse.search.study import StudyProgress

    progress = {"cpu-a": StudyProgress(started=5, completed=3, running=0),
                "cpu-b": StudyProgress(started=12, completed=10, running=0)}
    notice = resume_notice(progress, budget=10)
    assert notice == "resuming: 13 of 20 trials done (cpu-a 3 of 10, cpu-b 10 of 10)"
    assert (notice.done, notice.total) == (13, 20)
    assert not campaign_finished(progress, 10)
    assert resume_notice({"cpu-a": StudyProgress(0, 0, 0)}, budget=10) is None
    # Budget met, but a trial a stopped driver left running is recovered first: not finished.
    assert not campaign_finished({"cpu-a": StudyProgress(11, 10, 1)}, 10)
    assert campaign_finished({"cpu-a": StudyProgress(11, 10, 0)}, 10)


def test_the_profiles_that_fit_a_machine_with_a_gpu() -> None:
    # NVML's answer on an H200 host, as dse reads it there (this machine may have no GPU).
    from dse.cli.this_machine import Gpu, ThisMachine, fitting_profiles

    host = ThisMachine(cpu="Intel(R) Xeon(R) Platinum 8480+", arch="x86_64", cpus=16,
                       memory_gib=128.0, gpus=[Gpu(0, "NVIDIA H200", 139.8, 9.0)], gpu_note="",
                       l4t=None)
    fitting, problems = fitting_profiles(REPO / "hw_profiles", host)
    assert problems == []
    found = {p.name: p.on for p in fitting}
    # Hopper profiles fit GPU 0 by compute capability; an A100's or L4's profile does not.
    assert found["h200"] == found["h100-sxm"] == "GPU 0 NVIDIA H200"
    assert "a100" not in found and "l4" not in found
    assert found["local-cpu"] == found["x86-server"] == "this CPU"
    assert "aarch64-server" not in found  # named for another architecture
    assert not any(name.startswith("jetson") for name in found)  # not a Jetson
