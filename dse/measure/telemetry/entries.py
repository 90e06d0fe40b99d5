"""A device profile's ``telemetry:`` entries turned into probes on the device (the entries were
checked when the profile was loaded: :mod:`dse.spec.telemetry`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from dse.measure.telemetry.base import PROBES, Probe
from dse.spec import entry_name, parse_entry

__all__ = ["entry_name", "make_probe", "make_probes", "parse_entry"]


def make_probe(entry: object) -> Probe:
    """The probe an entry describes, built with its settings (unset ones keep the probe's defaults)."""
    name, settings = parse_entry(entry)
    return cast(Probe, PROBES[name](**settings.model_dump(exclude_unset=True)))


def make_probes(entries: Iterable[object]) -> list[Probe]:
    """One probe per entry of a profile's ``telemetry:`` list, in the listed order."""
    return [make_probe(entry) for entry in entries]
