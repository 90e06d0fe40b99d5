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
    """A co-designed configuration: architecture plus deployment stack, for one device profile.

    A space of free parameters (measured by a custom evaluator or a replay table) may have no model
    (``family`` empty) or no deployment stack (``backend`` empty); its free parameters are
    ``params``. ``family`` names the model's source (``cnn``, ``factory:pkg.mod:build``,
    ``onnx:model.onnx``) and ``model`` holds that source's settings (``dse.models.sources``).
    """

    family: str = ""
    arch: dict[str, Any] = field(default_factory=dict)
    precision: str = ""
    batch_size: int = 0
    backend: str = ""
    knobs: dict[str, Any] = field(default_factory=dict)
    device_profile: str = "local-cpu"
    params: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)

    @property
    def arch_id(self) -> str:
        """Hash of the model alone: trained weights, accuracy and exports are cached by it."""
        model: dict[str, Any] = {"family": self.family, "arch": self.arch}
        if self.model:  # only then, so a built-in family's ids stay what they were
            model["model"] = self.model
        return stable_hash(model)

    @property
    def candidate_id(self) -> str:
        """Hash of everything: two candidates with the same id are the same measurement."""
        return stable_hash(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """The parts the candidate has. Leaving out the absent ones keeps a model candidate's dict,
        and so its id, what it was before free parameters existed."""
        data = asdict(self)
        if not self.params:
            del data["params"]
        if not self.model:
            del data["model"]
        if not self.family:
            for key in ("family", "arch"):
                del data[key]
        if not self.backend:
            for key in ("backend", "precision", "batch_size", "knobs"):
                del data[key]
        return data

    def parameters(self) -> dict[str, Any]:
        """The candidate as flat named values, named as result tables name them without their
        ``param.`` prefix: ``family``, ``arch.<name>``, ``backend``, ``precision``,
        ``batch_size``, ``knob.<name>``, and each free parameter by its own name."""
        flat: dict[str, Any] = {}
        if self.family:
            flat["family"] = self.family
            flat.update({f"arch.{key}": value for key, value in self.arch.items()})
        if self.backend:
            flat.update(backend=self.backend, precision=self.precision,
                        batch_size=self.batch_size)
            flat.update({f"knob.{key}": value for key, value in self.knobs.items()})
        flat.update(self.params)
        return flat

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        return cls(**data)
