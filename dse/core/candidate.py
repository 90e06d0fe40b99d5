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

    Attributes:
        family: The model's source (``cnn``, ``factory:pkg.mod:build``, ``onnx:model.onnx``);
            empty for a space without a model.
        arch: The architecture parameters, by name.
        precision: The deployed precision (``fp32``, ``int8``, ...).
        batch_size: The batch size the candidate is deployed and timed at.
        backend: The runtime that deploys it; empty for a space without a deployment stack.
        knobs: The backend's knob values, by name.
        device_profile: The name of the device profile it is measured on.
        params: The free parameters, by name.
        model: The model source's settings.

    Examples:
        >>> from dse import Candidate
        >>> candidate = Candidate(params={"x1": 0.5, "x2": 0.25}, device_profile="replay-example")
        >>> len(candidate.candidate_id)
        16
        >>> candidate.candidate_id == Candidate(params={"x2": 0.25, "x1": 0.5},
        ...                                     device_profile="replay-example").candidate_id
        True
        >>> candidate.to_dict()
        {'device_profile': 'replay-example', 'params': {'x1': 0.5, 'x2': 0.25}}
        >>> cnn = Candidate(family="cnn", arch={"depth": 2}, precision="int8", batch_size=4,
        ...                 backend="onnxruntime", knobs={"intra_op_threads": 1})
        >>> cnn.parameters()  # doctest: +NORMALIZE_WHITESPACE
        {'family': 'cnn', 'arch.depth': 2, 'backend': 'onnxruntime', 'precision': 'int8',
         'batch_size': 4, 'knob.intra_op_threads': 1}
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
        """Hash of the model alone: trained weights, accuracy and exports are cached by it.

        Returns:
            16 hex digits of the family, arch and (when set) model settings.
        """
        model: dict[str, Any] = {"family": self.family, "arch": self.arch}
        if self.model:  # only then, so a built-in family's ids stay what they were
            model["model"] = self.model
        return stable_hash(model)

    @property
    def candidate_id(self) -> str:
        """Hash of everything: two candidates with the same id are the same measurement.

        Returns:
            16 hex digits of :meth:`to_dict`, stable across processes.
        """
        return stable_hash(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """The parts the candidate has. Leaving out the absent ones keeps a model candidate's dict,
        and so its id, what it was before free parameters existed.

        Returns:
            The fields as plain data, less ``params`` and ``model`` when empty, less ``family``
            and ``arch`` without a family, and less the deployment fields without a backend.
        """
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
        ``batch_size``, ``knob.<name>``, and each free parameter by its own name.

        Returns:
            Flat name -> value; the model's and the deployment's entries only where the
            candidate has them.
        """
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
        """The candidate whose :meth:`to_dict` (or any subset of the fields) is ``data``.

        Args:
            data: Field name -> value; absent fields take their defaults.

        Returns:
            The candidate.

        Raises:
            TypeError: When ``data`` names a field the candidate does not have.
        """
        return cls(**data)
