"""The telemetry probes a device profile may list, by name (:data:`PROBES`), each registered by
its own module with :func:`register_probe`: dse's own under ``dse/measure/telemetry/``, others
from ``$DSE_PLUGINS``. A probe class carries what the other layers ask about it without building
it: ``provides`` (the metrics it can fill) and ``settings_model`` (what a profile may set on it).
The YAML enum of probe names and the checks of a profile's ``telemetry:`` entries are derived from
here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from dse.plugins.registry import Registry

# Probe classes (subclasses of dse.measure.telemetry.Probe, which lives in a higher layer).
PROBES: Registry[type[Any]] = Registry("probe", ("dse.measure.telemetry",),
                                       lambda cls: f"{cls.__module__}.{cls.__qualname__}")

_P = TypeVar("_P", bound=type[Any])


def register_probe(name: str) -> Callable[[_P], _P]:
    """Class decorator: make a probe available to device profiles under ``name`` (a name given
    twice is refused)."""

    def add(cls: _P) -> _P:
        PROBES.register(name, cls)
        return cls

    return add


def probe_names() -> tuple[str, ...]:
    """Every registered probe's name, sorted."""
    return PROBES.names()
