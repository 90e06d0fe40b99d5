"""The error hierarchy.

A *result* (a candidate that cannot build or run) is recorded on its trial; an *error* stops the run.
Every class here is an error: raise it for bad input or a broken environment, never for a candidate
that merely failed on its device (see ``Measurement.status``).
"""

from __future__ import annotations


class DseError(Exception):
    """Base class of every error dse raises on purpose."""


class SpecError(DseError):
    """A YAML spec is invalid. ``problems`` holds one line per problem (file, field, found, allowed)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class BuildError(DseError):
    """A candidate could not be turned into a deployable artifact (export, quantization, compile)."""


class DeviceError(DseError):
    """A device (or the cluster that hosts it) cannot be reached or used."""


class MeasurementError(DseError):
    """A measurement could not be taken (runner crashed, no samples)."""
