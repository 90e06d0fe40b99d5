"""The telemetry probes a device profile may list, by name (:data:`PROBES`), each registered by
its own module with :func:`register_probe`: dse's own under ``dse/measure/telemetry/``, others
from ``$DSE_PLUGINS``. A probe class carries what the other layers ask about it without building
it: ``provides`` (the metrics it can fill) and ``settings_model`` (what a profile may set on it).
The YAML enum of probe names and the checks of a profile's ``telemetry:`` entries are derived from
here.
"""

from __future__ import annotations

from typing import Any, TypeVar

from dse.plugins.registry import Registry

# Probe classes (subclasses of dse.measure.telemetry.Probe, which lives in a higher layer).
PROBES: Registry[type[Any]] = Registry("probe", ("dse.measure.telemetry",),
                                       lambda cls: f"{cls.__module__}.{cls.__qualname__}")

_P = TypeVar("_P", bound=type[Any])


def register_probe(cls: _P) -> _P:
    """Class decorator: make a probe class available to device profiles under its ``name``
    attribute (a name given twice, or none, is refused)."""
    name = cls.__dict__.get("name")
    if not isinstance(name, str) or not name:
        raise TypeError(f"{cls.__qualname__}: a probe names itself: set the class attribute "
                        f"name = \"...\"")
    PROBES.register(name, cls)
    return cls


def probe_names() -> tuple[str, ...]:
    """Every registered probe's name, sorted."""
    return PROBES.names()
