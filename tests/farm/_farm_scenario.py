"""A device farm in one process tree: ``ray.cluster_utils.Cluster`` with three device nodes.

Run as ``python -m tests.farm._farm_scenario OUT.json`` by tests/farm/test_farm.py (in its own
process, because a pytest process can be connected to one Ray cluster only and the session's
embedded one is already there). Layout:

- node "shared": two devices of profile ``cpu-a`` (two workers on one node, so the isolation lock
  has something to keep apart);
- node "doomed": one device of ``cpu-a``; removed while it measures;
- node "other": one device of ``cpu-b``.

The campaign runs one study per profile. The JSON written holds every trial of both studies with
the facts the test checks: state, status, profile, node, windows, attempts.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_worker_niceness", "0")

SPACE = """\
name: farm-space
model:
  family: cnn
  arch:
    num_stages: [1]
    depth: [1]
    width_mult: [0.5, 0.75, 1.0]
    kernel_size: [3, 5]
    expand_ratio: [2]
training: {epochs: 1, batch_size: 256, threads: 1}
deployment:
  backends:
    onnxruntime: {knobs: {intra_op_threads: [1]}}
  precisions: [fp32]
  batch_sizes: [1, 2, 4]
objectives:
  - metric: accuracy
  - metric: latency_p50_ms
"""

PROFILE = """\
name: {name}
kind: cpu
backends: [onnxruntime]
precisions: [fp32]
max_threads: 1
telemetry: [process_memory]
"""

# Every node of this farm runs on this machine, so a measurement on one node often sees another
# node's build (the node lock keeps out only its own node's work) and is re-measured: after
# 0.1 s, not the default 1 s, since this farm is about placement and retries, not that policy.
EXPERIMENT = """\
name: farm
search_space: space.yaml
devices: [cpu-a.yaml, cpu-b.yaml]
sampler: {{name: random, seed: 3}}
budget: {{trials: {trials}, max_failed: 20, trial_timeout_s: 120}}
measurement: {{warmup_max_seconds: 0.05, min_iters: 20, min_seconds: 0.3, max_seconds: 0.4,
              precision: {{p50: 50, p99: 50}}, interference: {{wait_s: 0.1}}, second_looks: 0}}
farm: {{max_retries: 2, quarantine_after: 5}}
cache_dir: cache
"""

DEVICE = "dse_device:{}"


def _measuring(node_id: str) -> bool:
    """Whether a device worker on ``node_id`` is inside a measurement now: it then holds the
    node's lock exclusively (dse.trial.isolation), so a shared try fails. Every node of this farm
    runs on this machine, so its lock file is here."""
    from dse.trial.isolation import LOCK_DIR

    path = LOCK_DIR / f"{node_id}.lock"
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the shared lock if the try took it
    return False


def _remove_when_busy(cluster: object, doomed: object, dispatcher: object,
                      log: dict[str, object]) -> None:
    """Remove the doomed node once its worker is in the middle of a trial's measurement."""
    from dse.farm.dispatcher import Dispatcher

    assert isinstance(dispatcher, Dispatcher)
    doomed_id = doomed.node_id  # type: ignore[attr-defined]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for device in list(dispatcher.devices):
            if (device.state == "busy" and device.identity.get("node_id") == doomed_id
                    and device.job is not None and _measuring(doomed_id)):
                # Into its measurement, not just its build: the trial is mid-way for sure.
                log["removed_during_trial_key"] = device.job.key
                log["removed_at"] = time.time()
                cluster.remove_node(doomed)  # type: ignore[attr-defined]
                return
        time.sleep(0.05)
    log["removed_at"] = None


def main(out: Path, trials: int) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from dse.app.api import load_experiment
    from dse.farm.dispatcher import Dispatcher
    from dse.search.loop import SearchLoop
    from dse.search.study import open_studies

    folder = out.parent / "campaign"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "space.yaml").write_text(SPACE)
    (folder / "cpu-a.yaml").write_text(PROFILE.format(name="cpu-a"))
    (folder / "cpu-b.yaml").write_text(PROFILE.format(name="cpu-b"))
    (folder / "farm.yaml").write_text(EXPERIMENT.format(trials=trials))

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False})
    shared = cluster.add_node(num_cpus=1, resources={DEVICE.format("cpu-a"): 2})
    doomed = cluster.add_node(num_cpus=1, resources={DEVICE.format("cpu-a"): 1})
    other = cluster.add_node(num_cpus=1, resources={DEVICE.format("cpu-b"): 1})
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    cluster.wait_for_nodes()

    experiment = load_experiment(folder / "farm.yaml")
    studies = open_studies(experiment.run_dir, experiment.name, experiment.space,
                           experiment.spec.sampler, [p.name for p in experiment.devices])
    dispatcher = Dispatcher(list(experiment.devices), experiment.cache_dir,
                            max_retries=experiment.spec.farm.max_retries,
                            quarantine_after=experiment.spec.farm.quarantine_after)
    log: dict[str, object] = {
        "nodes": {"shared": shared.node_id, "doomed": doomed.node_id, "other": other.node_id}}
    remover = threading.Thread(target=_remove_when_busy, args=(cluster, doomed, dispatcher, log),
                               daemon=True)
    remover.start()
    started = time.time()
    SearchLoop(experiment, studies, dispatcher, experiment.run_dir).run()
    log["seconds"] = time.time() - started
    dispatcher.cancel()

    rows = []
    for profile, study in studies.items():
        for trial in study.get_trials(deepcopy=False):
            attrs = trial.user_attrs
            provenance = attrs.get("provenance", {})
            rows.append({
                "study_profile": profile, "number": trial.number, "state": trial.state.name,
                "status": attrs.get("status"), "reason": attrs.get("reason"),
                "candidate_id": attrs.get("candidate_id"),
                "candidate_profile": attrs.get("candidate", {}).get("device_profile"),
                "reused_from": attrs.get("reused_from"),
                "provenance": {k: provenance.get(k) for k in (
                    "device_profile", "node_id", "device_id", "attempts", "earlier_attempts",
                    "build_start", "build_end", "measure_start", "measure_end")},
            })
    log["trials"] = rows
    log["quarantined"] = dispatcher.quarantined()
    out.write_text(json.dumps(log, indent=1))
    ray.shutdown()
    cluster.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 6)
