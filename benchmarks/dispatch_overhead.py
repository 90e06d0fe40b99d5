"""Per-trial overhead of the farm: 8 simulated devices behind the real dispatcher and Ray, against
calling the same measurement in-process.

A simulated device is an actor with the DeviceWorker's methods whose "measurement" holds the
device for a fixed time and uses no CPU (a real device measures on its own hardware; here the two
cores must stay free for the driver and Ray). Trials are fed as the search loop feeds them: a new
one whenever a device is idle, so no trial waits in a queue and every millisecond between
submitting a trial and holding its result, beyond the device's own time, is the farm's.

Prints per-trial figures and ends with ``BENCH dispatch_ms <median overhead per trial, ms>``
(target: under 5 ms) and ``BENCH dispatch_ratio <farm time per trial / in-process>``.

    .venv/bin/python benchmarks/dispatch_overhead.py [--devices 8] [--trials 400] [--quick]

``--quick``: QUICK_DEVICES devices, QUICK_TRIALS trials.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from tempfile import TemporaryDirectory

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from dse.core.candidate import Candidate
from dse.core.measurement import Measurement
from dse.spec import HardwareProfile, MeasureSpec, TrainingSpec

DEVICE_SECONDS = 0.05
QUICK_DEVICES, QUICK_TRIALS = 2, 20
BENCH_NAMES = ("dispatch_ms", "dispatch_ratio")
PROFILE = HardwareProfile(name="sim", kind="cpu", backends=["onnxruntime"], precisions=["fp32"])
ARCH = {"num_stages": 1, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2}


class SimulatedDevice:
    """The DeviceWorker's interface; a measurement holds the device for DEVICE_SECONDS."""

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
        return Measurement(candidate.candidate_id, "ok", metrics={"latency_p50_ms": 1.0},
                           provenance={"measure_start": f"{start:.6f}", "measure_end": f"{end:.6f}"})


def candidate(n: int) -> Candidate:
    return Candidate("cnn", ARCH, "fp32", 1 + n % 64, "onnxruntime", {"intra_op_threads": 1},
                     PROFILE.name)


def in_process(trials: int) -> float:
    """Seconds per trial calling the device's evaluate directly."""
    device = SimulatedDevice(PROFILE, "")
    start = time.perf_counter()
    for n in range(trials):
        device.evaluate(candidate(n), TrainingSpec(), MeasureSpec())
    return (time.perf_counter() - start) / trials


def farm(devices: int, trials: int) -> tuple[list[float], float]:
    """Per-trial overheads (s) and seconds per trial of device time through the farm."""
    from dse.farm.cluster import EMBEDDED_ENV, shutdown
    from dse.farm.dispatcher import Dispatcher, Job

    for key, value in EMBEDDED_ENV.items():
        os.environ.setdefault(key, value)
    import ray

    # The embedded cluster as `dse run` starts it, but with `devices` units of the profile.
    ray.init(address="local", num_cpus=2, resources={f"dse_device:{PROFILE.name}": devices},
             include_dashboard=False, log_to_driver=False, configure_logging=False)
    with TemporaryDirectory() as tmp:
        dispatcher = Dispatcher([PROFILE], Path(tmp), worker_class=SimulatedDevice)
        dispatcher.start()
        while dispatcher.idle(PROFILE.name) < devices or any(
                d.state == "starting" for d in dispatcher.devices):
            dispatcher.wait(timeout_s=0.2)
        submitted: dict[int, float] = {}
        overheads: list[float] = []
        next_key = 0
        began = time.perf_counter()
        while len(overheads) < trials:
            while dispatcher.idle(PROFILE.name) and next_key < trials:
                submitted[next_key] = time.time()
                dispatcher.submit(Job(next_key, candidate(next_key), TrainingSpec(),
                                      MeasureSpec(), 60))
                next_key += 1
            for done in dispatcher.wait():
                received = time.time()
                p = done.measurement.provenance
                device_time = float(p["measure_end"]) - float(p["measure_start"])
                overheads.append(received - submitted[done.job.key] - device_time)
        elapsed = time.perf_counter() - began
        dispatcher.cancel()
    shutdown()
    return overheads, elapsed * devices / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_DEVICES} devices, "
                        f"{QUICK_TRIALS} trials (--devices, --trials ignored)")
    args = parser.parse_args()
    if args.quick:
        args.devices, args.trials = QUICK_DEVICES, QUICK_TRIALS

    reference = in_process(40)
    overheads, device_time_per_trial = farm(args.devices, args.trials)
    median_ms = statistics.median(overheads) * 1e3
    p90_ms = statistics.quantiles(overheads, n=10)[-1] * 1e3
    print(f"in-process: {reference * 1e3:.2f} ms per trial ({DEVICE_SECONDS * 1e3:.0f} ms device)")
    print(f"farm, {args.devices} simulated devices, {args.trials} trials: overhead per trial "
          f"median {median_ms:.2f} ms, p90 {p90_ms:.2f} ms; device-time per trial "
          f"{device_time_per_trial * 1e3:.2f} ms (device busy "
          f"{DEVICE_SECONDS / device_time_per_trial:.0%})")
    ratio = (reference + statistics.median(overheads)) / reference
    print(f"farm / in-process time per trial: {ratio:.3f}")
    print(f"BENCH dispatch_ms {median_ms:.2f}")
    print(f"BENCH dispatch_ratio {ratio:.3f}")


if __name__ == "__main__":
    main()
