"""Hands candidates to the devices of their profile and collects the measurements.

One :class:`~dse.farm.worker.DeviceWorker` actor per physical device: the cluster's
``dse_device:<profile>`` resource has one unit per device, and each actor takes one unit, so Ray
places exactly one actor on every device and never two. A device measures one candidate at a
time; the dispatcher keeps a queue per profile and hands the next job to whichever device of the
profile is idle.

Faults, as the search loop sees them, are always results, never hangs:
- a trial still running after its timeout is failed and its worker replaced;
- a worker (or its node) that dies mid-trial: the job goes back to the queue and runs on another
  device of the profile, at most ``max_retries`` times, then it is failed with every reason;
- a device whose trials fail ``quarantine_after`` times in a row is quarantined: it gets no more
  work in this campaign, and the farm registry shows it so;
- when no device of a profile is left (none joined, all quarantined or gone), waiting raises
  DeviceError rather than waiting forever.

The retry and quarantine rules are :mod:`dse.farm.faults`; this module keeps the queues and the
workers' lives.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dse.core import Candidate, DeviceError, Measurement
from dse.farm.farm_registry import StateReporter
from dse.farm.faults import (
    Quarantine,
    death_reason,
    failed_everywhere,
    physical_device,
    retry_allowed,
)
from dse.farm.resources import device_resource
from dse.spec import HardwareProfile, MeasureSpec, TrainingSpec
from dse.trial import Screening

# How long a freshly created worker may take to start before it is given up on (Ray starts a
# process and imports dse; a worker on a node that has gone never starts at all).
START_TIMEOUT_S = 120.0
# How often the wait loop wakes to check deadlines and to look for replacement devices.
TICK_S = 0.5


@dataclass
class Job:
    """One candidate to measure; ``key`` is the caller's (the trial number). With ``screening``
    the worker screens it first (see :class:`Screening`)."""

    key: int
    candidate: Candidate
    training: TrainingSpec
    measure: MeasureSpec
    timeout_s: float
    attempts: list[str] = field(default_factory=list)  # why earlier attempts ended
    screening: Screening | None = None
    # Another of the worker's methods than ``evaluate`` (a duel), called with ``args``: its answer
    # comes back as Done.answer, and never counts toward a device's quarantine.
    method: str = "evaluate"
    args: tuple[Any, ...] = ()


@dataclass
class Done:
    """A finished job: its measurement, and the device that gave it ("" if none did). A job of
    another method: ``answer`` holds what the worker returned, ``measurement`` only says whether
    the call came back (``ok``) or why not (``failed``: timed out, or its workers died)."""

    job: Job
    measurement: Measurement
    device_id: str
    answer: Any = None


@dataclass
class _Device:
    device_id: str
    profile: str
    actor: Any
    started: float
    ready_ref: Any = None
    state: str = "starting"  # starting | idle | busy | quarantined | dead
    job: Job | None = None
    ref: Any = None
    deadline: float = float("inf")
    identity: dict[str, str] = field(default_factory=dict)


class Dispatcher:
    """Owns a campaign's device workers. ``submit`` queues a job; ``wait`` returns finished ones.

    ``evaluate`` is the blocking one-job form of both.
    """

    def __init__(self, profiles: list[HardwareProfile], cache_dir: Path, *, max_retries: int = 2,
                 quarantine_after: int = 3, worker_class: type | None = None,
                 backends: frozenset[str] | None = None, generative: bool = False) -> None:
        self.profiles = {p.name: p for p in profiles}
        # What the campaign's candidates use: a worker loads only those runtimes before its
        # first trial (None: every one its profile lists), and torch's ONNX exporter unless the
        # candidates are language models (DeviceWorker._warm_up).
        self.backends = backends
        self.generative = generative
        self.cache_dir = cache_dir
        self.max_retries = max_retries
        self.devices: list[_Device] = []
        self.queues: dict[str, deque[Job]] = {name: deque() for name in self.profiles}
        self._serial = itertools.count()
        self._started = False
        # The actor class: DeviceWorker, or a stand-in with the same methods (identity, evaluate)
        # for simulated devices.
        self.worker_class = worker_class
        self._reporter = StateReporter()
        self.quarantine = Quarantine(quarantine_after)

    # -- devices -----------------------------------------------------------------------------

    def start(self, *, one_job: bool = False) -> None:
        """One worker per device unit the cluster offers for each profile; DeviceError naming the
        profile when the cluster has no device of it. ``one_job``: a single worker per profile,
        not warmed up (a one-off job such as a profile loads only the runtime it needs, where a
        campaign's workers load every runtime of the profile before their first trial)."""
        import ray

        if self._started:
            return
        resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
        absent = [name for name in self.profiles if resources.get(device_resource(name), 0) < 1]
        if absent:
            raise DeviceError(
                f"the Ray cluster has no device of profile(s) {absent}; join one with "
                f"`dse worker --profile hw_profiles/<profile>.yaml --address HEAD:PORT` "
                f"(`dse devices` lists the devices it has)")
        for name in self.profiles:
            for _ in range(1 if one_job else int(resources[device_resource(name)])):
                self._spawn(name, warm_up=not one_job)
        self._started = True

    def _spawn(self, profile_name: str, warm_up: bool = True) -> _Device:
        import ray

        from dse.farm.worker import DeviceWorker

        worker_class = self.worker_class or DeviceWorker
        profile = self.profiles[profile_name]
        options: dict[str, Any] = {"num_cpus": 0, "max_restarts": 0,
                                   "resources": {device_resource(profile_name): 1}}
        if profile.kind in ("cuda", "jetson"):
            # Ray hands the actor one GPU of its node and sets CUDA_VISIBLE_DEVICES to it; a
            # Jetson has one integrated GPU, which its node advertises as one GPU.
            options["num_gpus"] = 1 if profile.kind == "cuda" else 0
        device_id = f"{profile_name}#{next(self._serial)}"
        actor: Any = ray.remote(**options)(worker_class).remote(profile, str(self.cache_dir), "")
        device = _Device(device_id, profile_name, actor, time.monotonic())
        if warm_up:  # identity() answers once the worker's runtimes are loaded
            device.ready_ref = (
                actor.identity.remote() if self.backends is None and not self.generative
                else actor.identity.remote(None if self.backends is None
                                           else sorted(self.backends), self.generative))
        self.devices.append(device)
        return device

    def _replace(self, device: _Device, detail: str) -> None:
        """Retire ``device`` (kill its worker) and start a successor if the cluster still offers
        a unit of its profile. A successor that lands on a quarantined device keeps that unit
        occupied and gets no work."""
        import ray

        if device.actor is not None:
            ray.kill(device.actor, no_restart=True)
            device.actor = None
        device.state = "dead"
        device.job = device.ref = device.ready_ref = None
        self._notify(device, detail)
        if self._units_free(device.profile) > 0:
            self._spawn(device.profile)

    @staticmethod
    def _physical(device: _Device) -> str:
        return physical_device(device.identity, device.device_id, device.profile)

    def _units_free(self, profile_name: str) -> int:
        """Device units of ``profile_name`` in the cluster not held by a live worker of ours."""
        import ray

        resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
        units = int(resources.get(device_resource(profile_name), 0))
        # A quarantined device's worker stays, idle, so that its unit is not handed to another.
        held = sum(d.profile == profile_name and d.actor is not None for d in self.devices)
        return units - held

    def _notify(self, device: _Device, detail: str = "") -> None:
        """Tell the farm registry the device's state (see :class:`StateReporter`)."""
        self._reporter.report(device.identity.get("device_id", device.device_id), device.profile,
                              device.identity.get("node_id", ""), device.state, detail)

    def idle(self, profile_name: str) -> int:
        """Devices of ``profile_name`` that could take a job now, less the jobs already queued."""
        ready = sum(d.profile == profile_name and d.state in ("idle", "starting")
                    for d in self.devices)
        return max(0, ready - len(self.queues[profile_name]))

    def in_flight(self) -> int:
        return sum(d.state == "busy" for d in self.devices) + sum(map(len, self.queues.values()))

    # -- jobs --------------------------------------------------------------------------------

    def submit(self, job: Job) -> None:
        if not self._started:
            self.start()
        if job.candidate.device_profile not in self.profiles:
            raise DeviceError(f"no device profile {job.candidate.device_profile!r} in this "
                              f"campaign (it has {sorted(self.profiles)})")
        self.queues[job.candidate.device_profile].append(job)
        self._dispatch()

    def _dispatch(self) -> None:
        for device in self.devices:
            queue = self.queues[device.profile]
            if device.state == "idle" and queue:
                job = queue.popleft()
                device.job = job
                device.state = "busy"
                device.deadline = time.monotonic() + job.timeout_s
                # Screening only when asked: a stand-in worker class need not know of it.
                extra = () if job.screening is None else (job.screening,)
                args = ((job.candidate, job.training, job.measure, *extra)
                        if job.method == "evaluate" else job.args)
                device.ref = getattr(device.actor, job.method).remote(*args)
                self._notify(device)

    def wait(self, timeout_s: float | None = None) -> list[Done]:
        """Finished jobs, at least one unless ``timeout_s`` passes first (then maybe none).

        Raises DeviceError when jobs wait for a profile that has no device left.
        """
        import ray

        give_up = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            done: list[Done] = []
            refs = {d.ref: d for d in self.devices if d.state == "busy"}
            refs.update({d.ready_ref: d for d in self.devices if d.state == "starting"})
            if refs:
                tick = TICK_S if give_up is None else max(0.0, min(TICK_S, give_up - time.monotonic()))
                # Wake on the first result, then take whatever else is ready at that moment.
                ready, rest = ray.wait(list(refs), num_returns=1, timeout=tick)
                if ready and rest:
                    ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
                for ref in ready:
                    device = refs[ref]
                    if ref is device.ready_ref:
                        self._started_or_not(device, ref)
                    else:
                        done.extend(self._finished(device, ref))
            done.extend(self._overdue())
            self._check_devices_left()
            self._dispatch()
            if done or (give_up is not None and time.monotonic() >= give_up):
                return done
            if not refs:
                time.sleep(TICK_S)

    def _started_or_not(self, device: _Device, ref: Any) -> None:
        import ray
        from ray.exceptions import RayError

        try:
            device.identity = ray.get(ref)
        except RayError as exc:
            device.state = "dead"
            device.ready_ref = None
            self._notify(device, f"worker failed to start: {exc}")
            return
        device.ready_ref = None
        why = self.quarantine.reasons.get(self._physical(device))
        device.state = "idle" if why is None else "quarantined"
        self._notify(device, why or "")

    def _finished(self, device: _Device, ref: Any) -> list[Done]:
        import ray
        from ray.exceptions import NodeDiedError, ObjectLostError, RayActorError, WorkerCrashedError

        job = device.job
        assert job is not None
        device_name = device.identity.get("device_id", device.device_id)
        try:
            # An exception raised inside the worker's evaluate (a dse bug: candidate faults come
            # back as results) propagates from here to the driver.
            answer: Any = ray.get(ref)
        except (RayActorError, WorkerCrashedError, NodeDiedError, ObjectLostError) as exc:
            # The worker or its node died: not the candidate's verdict. Run it elsewhere.
            job.attempts.append(death_reason(device_name, exc))
            self._replace(device, job.attempts[-1])
            if retry_allowed(job.attempts, self.max_retries):
                self.queues[job.candidate.device_profile].appendleft(job)
                return []
            return [Done(job, failed_everywhere(job.candidate.candidate_id, job.attempts), "")]
        device.job = device.ref = None
        device.state = "idle"
        if job.method != "evaluate":
            return [Done(job, Measurement(job.candidate.candidate_id, "ok"), device_name, answer)]
        measurement: Measurement = answer
        measurement.provenance["attempts"] = str(len(job.attempts) + 1)
        if job.attempts:
            measurement.provenance["earlier_attempts"] = "; ".join(job.attempts)
        self._count(device, measurement.status == "failed", measurement.reason)
        return [Done(job, measurement, device_name)]

    def _overdue(self) -> list[Done]:
        now = time.monotonic()
        done = []
        for device in list(self.devices):
            if device.state == "busy" and now > device.deadline:
                job = device.job
                assert job is not None
                reason = f"timed out after {job.timeout_s:g} s; worker restarted"
                name = device.identity.get("device_id", device.device_id)
                if job.method == "evaluate":
                    self._count(device, True, reason)
                # A hung worker must go either way; a successor on a quarantined device idles.
                self._replace(device, reason)
                done.append(Done(job, Measurement(job.candidate.candidate_id, "failed",
                                                  reason=reason), name))
            elif device.state == "starting" and now - device.started > START_TIMEOUT_S:
                self._replace(device, f"worker did not start within {START_TIMEOUT_S:g} s")
        return done

    def _count(self, device: _Device, failed: bool, reason: str) -> None:
        """Count the trial against its physical device; quarantine the device at the limit."""
        why = self.quarantine.record(self._physical(device), failed, reason)
        if why is not None:
            device.state = "quarantined"
            self._notify(device, why)

    def _check_devices_left(self) -> None:
        for name, queue in self.queues.items():
            if not queue:
                continue
            alive = [d for d in self.devices if d.profile == name
                     and d.state in ("starting", "idle", "busy")]
            if not alive and self._units_free(name) > 0:
                alive.append(self._spawn(name))
            if not alive:
                states = [f"{d.identity.get('device_id', d.device_id)}: {d.state}"
                          for d in self.devices if d.profile == name]
                raise DeviceError(f"no device of profile {name!r} is left to measure on "
                                  f"({', '.join(states) or 'none joined'})")

    def quarantined(self) -> dict[str, str]:
        """Quarantined devices (node/GPU) and why."""
        return dict(self.quarantine.reasons)

    # -- the blocking form -------------------------------------------------------------------

    def evaluate(self, candidate: Candidate, training: TrainingSpec, measure: MeasureSpec,
                 timeout_s: float) -> Measurement:
        """Measure one candidate and wait for it (retries, timeouts and quarantine apply)."""
        key = -next(self._serial) - 1
        self.submit(Job(key, candidate, training, measure, timeout_s))
        while True:
            for done in self.wait():
                if done.job.key == key:
                    return done.measurement

    def calibrate(self, measure: MeasureSpec, runs: int, gap_s: float,
                  timeout_s: float) -> list[dict[str, Any]]:
        """Every device measures its run-to-run variation (``DeviceWorker.calibrate``), all at
        once; one result per device, with ``error`` where it failed or ran past ``timeout_s``."""
        import ray

        self.start()
        calls = [(device, device.actor.calibrate.remote(measure, runs, gap_s))
                 for device in self.devices if device.actor is not None]
        results: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout_s
        for device, ref in calls:
            try:
                done = ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
            except (ray.exceptions.RayError, TimeoutError) as exc:
                done = {"device_id": device.device_id,
                        "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
            results.append({"profile": device.profile, **done})
        return results

    def one_call(self, profile_name: str, method: str, args: tuple[Any, ...],
                 timeout_s: float) -> Any:
        """Call ``DeviceWorker.<method>(*args)`` on one device of ``profile_name`` (one worker
        started, without the campaign's warm-up) and wait for it: ``dse profile``, ``export``
        and ``verify``. The worker's answer, or the reason, in one line, when no device of the
        profile answers in ``timeout_s``."""
        import ray

        self.start(one_job=True)
        device = next((d for d in self.devices
                       if d.profile == profile_name and d.actor is not None), None)
        if device is None:
            return f"no device of profile {profile_name!r} has joined the farm"
        try:
            return ray.get(getattr(device.actor, method).remote(*args), timeout=timeout_s)
        except (ray.exceptions.RayError, TimeoutError) as exc:
            # A task error's own first line is Ray's banner; the worker's exception says why.
            cause = getattr(exc, "cause", None) or exc
            text = str(cause).strip()
            return f"device {device.device_id}: {type(cause).__name__}: " \
                   f"{text.splitlines()[0][:300] if text else 'no message'}"

    def cancel(self) -> None:
        """Stop whatever is in flight (on Ctrl-C): kill every worker and forget the queues; a new
        :meth:`start` brings them back."""
        import ray

        for device in self.devices:
            if device.actor is not None:
                ray.kill(device.actor, no_restart=True)
                device.actor = None
        self.devices.clear()
        for queue in self.queues.values():
            queue.clear()
        self._started = False
