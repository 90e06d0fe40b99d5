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

    Attributes:
        candidate_id: The measured candidate's :attr:`Candidate.candidate_id`.
        status: ``ok``, ``infeasible`` or ``failed`` (see above).
        reason: Why the status is not ``ok``; empty when it is.
        metrics: Metric name -> value, in the metric's unit (``dse.core.metrics``).
        missing: Metric name -> why it could not be taken.
        samples: Raw samples by name (e.g. the timed latencies).
        provenance: Where and how it was measured, as text.
        schema_version: The version of this record's layout.

    Examples:
        >>> from dse import Measurement
        >>> m = Measurement("0123456789abcdef", "ok", metrics={"latency_p50_ms": 1.5},
        ...                 missing={"power_mean_w": "no power sensor"})
        >>> m.status, m.metrics["latency_p50_ms"], sorted(m.to_dict())[:3]
        ('ok', 1.5, ['candidate_id', 'metrics', 'missing'])
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
        """Every field as plain data."""
        return asdict(self)
