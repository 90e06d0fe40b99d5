"""`Measurement`: what a device worker returns for one candidate. Plain data, picklable, versioned."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

SCHEMA_VERSION = 1

Status = Literal["ok", "infeasible", "failed"]


@dataclass
class Measurement:
    """Metrics of one candidate on one device.

    ``status`` is ``ok`` when every requested metric could be taken; ``infeasible`` when the
    candidate cannot exist on the device (unsupported combination, build error, out of memory);
    ``failed`` when something broke while measuring (crash, timeout). ``reason`` says why.
    A metric whose sensor is absent appears in ``missing`` with the reason, never as a made-up value.
    """

    candidate_id: str
    status: Status
    reason: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)
    provenance: dict[str, str] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
