"""Hands candidates to the device worker of their profile and waits for the measurement.

One actor per device profile, created with that profile's Ray resource so it lands on its device.
A trial that outlives its timeout is failed and its actor replaced, so a hung runner cannot stall
the campaign.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dse.candidate import Candidate
from dse.farm.cluster import device_resource
from dse.measurement import Measurement
from dse.spec import HardwareProfile, MeasureSpec, TrainingSpec


class Dispatcher:
    """Owns the device actors of a campaign; ``evaluate`` is blocking and interruptible."""

    def __init__(self, profiles: list[HardwareProfile], cache_dir: Path) -> None:
        self.profiles = {p.name: p for p in profiles}
        self.cache_dir = cache_dir
        self._actors: dict[str, Any] = {}
        self._in_flight: Any = None

    def _actor(self, profile_name: str) -> Any:
        if profile_name not in self._actors:
            import ray

            from dse.farm.worker import DeviceWorker

            remote_cls = ray.remote(
                num_cpus=0, resources={device_resource(profile_name): 1}, max_restarts=0,
            )(DeviceWorker)
            self._actors[profile_name] = remote_cls.remote(
                self.profiles[profile_name], str(self.cache_dir))
        return self._actors[profile_name]

    def evaluate(self, candidate: Candidate, training: TrainingSpec, measure: MeasureSpec,
                 timeout_s: float) -> Measurement:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        actor = self._actor(candidate.device_profile)
        self._in_flight = actor.evaluate.remote(candidate, training, measure)
        try:
            result: Measurement = ray.get(self._in_flight, timeout=timeout_s)
            return result
        except GetTimeoutError:
            self._replace(candidate.device_profile)
            return Measurement(candidate.candidate_id, "failed",
                               reason=f"timed out after {timeout_s:g} s; worker restarted")
        except RayActorError as exc:
            self._replace(candidate.device_profile)
            return Measurement(candidate.candidate_id, "failed",
                               reason=f"device worker died: {exc}")
        finally:
            self._in_flight = None

    def cancel(self) -> None:
        """Stop whatever is in flight (on Ctrl-C): kill the actors; they are re-created on demand."""
        for name in list(self._actors):
            self._replace(name)

    def _replace(self, profile_name: str) -> None:
        import ray

        actor = self._actors.pop(profile_name, None)
        if actor is not None:
            ray.kill(actor, no_restart=True)
