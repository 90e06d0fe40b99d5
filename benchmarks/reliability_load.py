"""Load on one driver: 32 simulated devices and 2,000 trials through the real search loop.

The driver is the real one: ``dse.search.loop.SearchLoop`` with an Optuna study on disk (SQLite,
as ``dse run`` opens it), the real ``dse.farm.dispatcher.Dispatcher`` and an embedded Ray. Only
the devices are simulated: actors with the DeviceWorker's methods whose measurement holds the
device for DEVICE_SECONDS and uses no CPU, returning metrics derived from the candidate id (so an
identical candidate always measures the same). The sampler is ``random`` so 2,000 asks stay
cheap, over ``search_spaces/cnn-digits.yaml`` (thousands of distinct candidates; repeats are
reused by the loop, not measured again).

Checks at the end: the study holds exactly the budget of distinct candidates measured (the
budget counts those; repeats, reused, complete too and are counted apart: ``study_counts.py``),
no trial is left RUNNING or failed, every job handed to the farm came back, and
no candidate was measured twice on the profile. The driver's resident memory is sampled at the
start, every 250 completed trials and at the end.

Prints the series and ends with ``BENCH load_devices``, ``BENCH load_trials``,
``BENCH load_trials_lost``, ``BENCH load_driver_peak_mb``, ``BENCH load_driver_growth_mb`` (end
minus after the first 250 trials) and ``BENCH load_wall_s``.

    .venv/bin/python benchmarks/reliability_load.py [--devices 32] [--trials 2000] [--quick]

``--quick``: QUICK_DEVICES devices, QUICK_TRIALS trials.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from collections import Counter
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import psutil
from study_counts import measured_candidates

from dse.core.candidate import Candidate
from dse.core.measurement import Measurement
from dse.farm.dispatcher import Dispatcher, Done, Job
from dse.search.loop import TrialOutcome
from dse.spec import HardwareProfile, MeasureSpec, TrainingSpec

DEVICE_SECONDS = 0.02
QUICK_DEVICES, QUICK_TRIALS = 4, 40
BENCH_NAMES = ("load_devices", "load_trials", "load_trials_lost", "load_driver_peak_mb",
               "load_driver_growth_mb", "load_wall_s")
PROFILE_NAME = "sim-cpu"
RSS_EVERY = 250
REPO = Path(__file__).resolve().parents[1]
SPACE = REPO / "search_spaces" / "cnn-digits.yaml"


class SimulatedDevice:
    """The DeviceWorker's interface; a measurement holds the device for DEVICE_SECONDS and
    reports metrics that are a pure function of the candidate id."""

    def __init__(self, profile: HardwareProfile, cache_dir: str, device_id: str = "") -> None:
        self.profile = profile
        self.device_id = device_id or f"{profile.name}@{os.getpid()}"

    def identity(self) -> dict[str, str]:
        return {"device_profile": self.profile.name, "device_id": self.device_id,
                "pid": str(os.getpid())}

    def evaluate(self, candidate: Candidate, training: TrainingSpec,
                 measure: MeasureSpec) -> Measurement:
        start = time.time()
        time.sleep(DEVICE_SECONDS)
        end = time.time()
        digest = hashlib.sha256(candidate.candidate_id.encode()).digest()
        unit = [b / 255 for b in digest[:5]]
        # Every metric the space's objectives and constraint (memory_model_mb <= 128) read.
        metrics = {"accuracy": 0.5 + 0.5 * unit[0], "latency_p99_ms": 0.1 + 10 * unit[1],
                   "throughput_sps": 100 + 10_000 * unit[2], "process_rss_peak_mb": 50 + 500 * unit[3],
                   "memory_model_mb": 1 + 200 * unit[4]}
        return Measurement(candidate.candidate_id, "ok", metrics=metrics,
                           provenance={"measure_start": f"{start:.6f}",
                                       "measure_end": f"{end:.6f}", "device_pid": str(os.getpid())})


class CountingDispatcher(Dispatcher):
    """The real dispatcher, counting the jobs handed in and the results handed back, so a job
    that never returns shows as lost."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.submitted: Counter[int] = Counter()
        self.returned: Counter[int] = Counter()

    def submit(self, job: Job) -> None:
        self.submitted[job.key] += 1
        super().submit(job)

    def wait(self, timeout_s: float | None = None) -> list[Done]:
        finished = super().wait(timeout_s)
        for done in finished:
            self.returned[done.job.key] += 1
        return finished


def write_campaign(folder: Path, trials: int) -> Path:
    """A replay-free CPU profile and a random-sampler campaign over the CNN space."""
    profile = folder / f"{PROFILE_NAME}.yaml"
    profile.write_text(
        f"name: {PROFILE_NAME}\nkind: cpu\ndescription: a simulated CPU device (sleeps)\n"
        "backends: [onnxruntime, torch]\nprecisions: [fp32, fp16, bf16, int8]\n")
    experiment = folder / "load.yaml"
    experiment.write_text(
        f"name: load\nsearch_space: {SPACE}\ndevices:\n  - {profile}\n"
        f"sampler:\n  name: random\n  seed: 0\nbudget:\n  trials: {trials}\n  max_failed: 1\n"
        f"runs_dir: {folder / 'runs'}\ndashboards_dir: {folder / 'dashboards'}\n")
    return experiment


def rss_mb() -> float:
    rss: int = psutil.Process().memory_info().rss
    return rss / 2**20


def run(devices: int, trials: int) -> int:
    """Runs the campaign and prints the figures; returns the number of failed checks."""
    from optuna.trial import TrialState

    from dse.app.api import load_experiment
    from dse.app.campaign_setup import declare_metrics
    from dse.farm.cluster import EMBEDDED_ENV, shutdown
    from dse.farm.resources import device_resource
    from dse.search.loop import SearchLoop
    from dse.search.study import open_experiment_studies

    for key, value in EMBEDDED_ENV.items():
        os.environ.setdefault(key, value)
    import ray

    series: list[tuple[int, float]] = [(0, rss_mb())]

    def on_trial(outcome: TrialOutcome) -> None:
        if outcome.completed % RSS_EVERY == 0 and outcome.completed != series[-1][0]:
            series.append((outcome.completed, rss_mb()))

    # The embedded cluster as `dse run` starts it, but with `devices` units of the profile and a
    # logical CPU slot per actor (the actors sleep; they take no CPU of the two cores).
    ray.init(address="local", num_cpus=devices,
             resources={device_resource(PROFILE_NAME): devices},
             include_dashboard=False, log_to_driver=False, configure_logging=False)
    failures = 0
    with TemporaryDirectory() as tmp:
        experiment = load_experiment(write_campaign(Path(tmp), trials))
        profile = experiment.devices[0]
        declare_metrics(experiment)
        studies = open_experiment_studies(experiment)
        dispatcher = CountingDispatcher([profile], experiment.cache_dir,
                                        worker_class=SimulatedDevice)
        loop = SearchLoop(experiment, studies, dispatcher, experiment.run_dir, on_trial=on_trial)
        began = time.perf_counter()
        try:
            loop.run()
        finally:
            dispatcher.cancel()
        wall_s = time.perf_counter() - began
        series.append((-1, rss_mb()))

        frozen = studies[profile.name].get_trials(deepcopy=False)
        states = Counter(t.state.name for t in frozen)
        complete = [t for t in frozen if t.state == TrialState.COMPLETE]
        reused = [t for t in complete if "reused_from" in t.user_attrs]
        measured = measured_candidates(frozen)
        twice = {cid: n for cid, n in measured.items() if n > 1}
        not_back = sum(n - dispatcher.returned[k] for k, n in dispatcher.submitted.items())
        running = states.get("RUNNING", 0) + states.get("WAITING", 0)
        lost = not_back + running + states.get("FAIL", 0) + len(loop.pending)
        pids = {t.user_attrs.get("provenance", {}).get("device_pid") for t in complete
                if "reused_from" not in t.user_attrs}

    shutdown()
    peak = max(mb for _, mb in series)
    after_first = next((mb for n, mb in series if n == RSS_EVERY), series[0][1])
    print(f"{devices} simulated devices ({DEVICE_SECONDS * 1e3:.0f} ms each, no CPU), "
          f"{trials} trials, random sampler, SQLite study; wall {wall_s:.1f} s "
          f"({wall_s / trials * 1e3:.1f} ms per trial)")
    print("driver RSS (MB): " + ", ".join(
        f"{'start' if n == 0 else 'end' if n < 0 else n}={mb:.1f}" for n, mb in series))
    print(f"study trials by state: {dict(states)}; complete {len(complete)} = measured "
          f"{len(complete) - len(reused)} + reused {len(reused)}; distinct device processes "
          f"{len(pids)}")
    print(f"jobs handed to the farm {sum(dispatcher.submitted.values())}, results back "
          f"{sum(dispatcher.returned.values())}, left RUNNING/WAITING {running}, "
          f"pending in the loop {len(loop.pending)}")
    checks = {
        f"exactly {trials} distinct candidates measured": len(measured) == trials,
        "every job came back exactly once": not_back == 0 and all(
            dispatcher.returned[k] == 1 for k in dispatcher.submitted),
        "no trial left RUNNING, WAITING or FAIL": running == 0 and states.get("FAIL", 0) == 0,
        "no candidate measured twice on the profile": not twice,
    }
    for name, ok in checks.items():
        print(f"check: {name}: {'ok' if ok else 'FAILED'}")
        failures += not ok
    if twice:
        print(f"  measured twice: {dict(list(twice.items())[:5])}")
    print(f"BENCH load_devices {devices}")
    print(f"BENCH load_trials {len(complete)}")
    print(f"BENCH load_trials_lost {lost}")
    print(f"BENCH load_driver_peak_mb {peak:.1f}")
    print(f"BENCH load_driver_growth_mb {series[-1][1] - after_first:.1f}")
    print(f"BENCH load_wall_s {wall_s:.1f}")
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--devices", type=int, default=32)
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_DEVICES} devices, "
                        f"{QUICK_TRIALS} trials (--devices, --trials ignored)")
    args = parser.parse_args()
    if args.quick:
        args.devices, args.trials = QUICK_DEVICES, QUICK_TRIALS
    sys.exit(1 if run(args.devices, args.trials) else 0)


if __name__ == "__main__":
    main()
