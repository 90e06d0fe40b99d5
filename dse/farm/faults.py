"""The dispatcher's fault policy: a job whose device died runs again elsewhere, up to a limit, then
fails with every reason; a physical device whose trials fail too often in a row is quarantined for
the rest of the campaign.

Workers come and go (a timed-out one is replaced), so streaks and quarantines belong to the
hardware behind a worker, named by :func:`physical_device`.
"""

from __future__ import annotations

from collections.abc import Mapping

from dse.core import Measurement


def physical_device(identity: Mapping[str, str], device_id: str, profile: str) -> str:
    """What identifies the physical device behind a worker: its node and GPU, from the worker's
    ``identity`` (its dispatcher ``device_id`` and ``profile`` while it has not answered yet)."""
    gpus = identity.get("cuda_visible_devices")
    where = f"gpu{gpus}" if gpus else profile
    return f"{identity.get('node_id', device_id)}/{where}"


def death_reason(device_name: str, exc: BaseException) -> str:
    """One line for an attempt that ended with its device's death (not the candidate's verdict)."""
    return (f"device {device_name} died: {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}")


def retry_allowed(attempts: list[str], max_retries: int) -> bool:
    """Whether a job whose ``attempts`` all ended with their device's death may run once more."""
    return len(attempts) <= max_retries


def failed_everywhere(candidate_id: str, attempts: list[str]) -> Measurement:
    """The result of a job every device of which died under it."""
    return Measurement(candidate_id, "failed",
                       reason=f"failed on {len(attempts)} devices: " + "; ".join(attempts))


class Quarantine:
    """Failed trials in a row per physical device, and the devices quarantined at ``after``."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.streaks: dict[str, int] = {}  # physical device -> failed trials in a row
        self.reasons: dict[str, str] = {}  # physical device -> why it is quarantined

    def record(self, device: str, failed: bool, reason: str) -> str | None:
        """Count one trial of ``device``; why it is quarantined when this trial puts it there,
        else None."""
        self.streaks[device] = self.streaks.get(device, 0) + 1 if failed else 0
        if self.streaks[device] < self.after:
            return None
        self.reasons[device] = f"{self.streaks[device]} failed trials in a row; last: {reason}"
        return self.reasons[device]
