"""`Candidate`: one point of the design space, bound to one device profile.

It is the unit of work the driver hands to a device worker: frozen, picklable, and identified by a
stable hash so identical candidates are recognised across runs and processes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any


def stable_hash(obj: Any, length: int = 16) -> str:
    """A short hex digest of ``obj``'s canonical JSON (sorted keys), stable across processes."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


@dataclass(frozen=True)
class Candidate:
    """A co-designed configuration: architecture plus deployment stack, for one device profile."""

    family: str
    arch: dict[str, Any]
    precision: str
    batch_size: int
    backend: str
    knobs: dict[str, Any] = field(default_factory=dict)
    device_profile: str = "local-cpu"

    @property
    def arch_id(self) -> str:
        """Hash of the model alone: trained weights, accuracy and exports are cached by it."""
        return stable_hash({"family": self.family, "arch": self.arch})

    @property
    def candidate_id(self) -> str:
        """Hash of everything: two candidates with the same id are the same measurement."""
        return stable_hash(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        return cls(**data)
