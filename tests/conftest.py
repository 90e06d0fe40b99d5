"""Shared fixtures: one embedded Ray cluster per test session, and tiny campaign files."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# Before anything imports Ray: loopback only, no telemetry (see dse.farm.cluster).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# dse's per-user cache (kept model-check verdicts, dse verify's default cache) of this session
# only: no test reads what an earlier run or the user left there. A process the session started
# (a Ray worker, a script importing this module) keeps the session's; the session removes it at
# exit, so runs of the suite do not pile folders up in the temporary directory.
TEST_CACHE_PREFIX = "dse-test-cache-"
if not Path(os.environ.get("DSE_CACHE_HOME", "/")).name.startswith(TEST_CACHE_PREFIX):
    os.environ["DSE_CACHE_HOME"] = tempfile.mkdtemp(prefix=TEST_CACHE_PREFIX)
    atexit.register(shutil.rmtree, os.environ["DSE_CACHE_HOME"], ignore_errors=True)

# A shell starts a background job (`make test &`, `nohup ... &`) with SIGINT ignored, and every
# process the tests start would inherit that: the Ctrl-C tests' campaigns, servers and workers
# would never stop. The suite tests Ctrl-C, so it takes Python's own handler back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parents[1]

# DSE_REQUIRE_GPU=1 turns a skipped gpu test into a failure (tests/gpu_requirement.py).
pytest_plugins = ["tests.gpu_requirement"]

TINY_SPACE = """\
name: tiny
model:
  family: cnn
  arch:
    num_stages: [1]
    depth: [1]
    width_mult: [0.5, 1.0]
    kernel_size: [3]
    expand_ratio: [2]
training:
  epochs: 2
  batch_size: 128
deployment:
  backends:
    onnxruntime:
      knobs:
        intra_op_threads: [1]
    torch:
      knobs:
        num_threads: [1]
  precisions: [fp32, int8]
  batch_sizes: [1, 4]
objectives:
  - metric: accuracy
  - metric: latency_p99_ms
constraints:
  - process_rss_peak_mb <= 100000
"""

LOCAL_CPU = """\
name: local-cpu
kind: cpu
backends: [onnxruntime, torch]
precisions: [fp32, int8]
telemetry: [process_memory, rapl, thermal_zones, cpufreq, cpu_throttle]
"""


# Timing: half a second at most, enough for the 368 calls a p99 objective's interval needs
# under load; a loose target and precision let a run stop as soon as it has them (no trial is
# re-measured for precision). A window the busy test machine disturbs is flagged, not measured
# again (a fresh worker's first windows often read unstable: up to three windows a trial were
# most of a test campaign's measuring), and still counts on the front, so tests of other things
# see the front they expect (tests/search/test_quality_campaign.py checks the default, which keeps
# it off; tests/measure/test_remeasure.py the precision gate, test_cpu_interference.py the
# re-measurement).
def tiny_experiment_text(trials: int, name: str = "tiny-campaign") -> str:
    # second_looks: 0: a test campaign measures each candidate once (second looks, on by default,
    # have tests of their own: tests/search/test_second_looks.py, test_quality_campaign.py).
    return f"""\
name: {name}
search_space: ../search_spaces/tiny.yaml
devices: [../hw_profiles/local-cpu.yaml]
sampler: {{name: random, seed: 1}}
budget: {{trials: {trials}}}
measurement: {{warmup_max_seconds: 0.1, min_iters: 5, min_seconds: 0.0, max_seconds: 0.5,
               target_rel_ci: 0.05, precision: {{p50: 50, p99: 50}}, interference: {{action: flag}},
               non_ok_on_front: true, second_looks: 0}}
"""


@pytest.fixture
def tiny_campaign(tmp_path: Path) -> Iterator[Path]:
    """A campaign folder laid out like the repository; yields the experiment file."""
    for folder, name, text in [("search_spaces", "tiny.yaml", TINY_SPACE),
                               ("hw_profiles", "local-cpu.yaml", LOCAL_CPU),
                               ("experiments", "tiny.yaml", tiny_experiment_text(4))]:
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / name).write_text(text)
    yield tmp_path / "experiments" / "tiny.yaml"


# A second CPU profile on the same machine, for multi-device campaigns.
SECOND_CPU_NAME = "local-cpu-b"


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    """One real embedded Ray for the whole session, with one device of the local-cpu profile and
    one of a second CPU profile (two devices on one node, as on a multi-GPU server)."""
    import yaml

    from dse.farm.cluster import shutdown, start_embedded
    from dse.spec import HardwareProfile

    first = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    second = first.model_copy(update={"name": SECOND_CPU_NAME})
    start_embedded([first, second], num_cpus=2)
    yield
    shutdown()
