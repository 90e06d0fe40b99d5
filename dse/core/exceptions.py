"""The error hierarchy.

A *result* (a candidate that cannot build or run) is recorded on its trial; an *error* stops the run.
Every class here is an error: raise it for bad input or a broken environment, never for a candidate
that merely failed on its device (see ``Measurement.status``).
"""

from __future__ import annotations


class DseError(Exception):
    """Base class of every error dse raises on purpose.

    Catching it tells dse's deliberate errors (bad input, a broken environment) from bugs.

    Examples:
        >>> from dse import DseError, SpecError
        >>> issubclass(SpecError, DseError)
        True
        >>> try:
        ...     raise DseError("storage: not writable")
        ... except DseError as exc:
        ...     print(exc)
        storage: not writable
    """


class SpecError(DseError):
    """A YAML spec is invalid. ``problems`` holds one line per problem (file, field, found, allowed).

    Args:
        problems: One line per problem; the error's message is these lines joined by newlines.

    Attributes:
        problems: The problems, one line each, as a new list.

    Examples:
        >>> from dse import SpecError
        >>> try:
        ...     raise SpecError(["a.yaml: budget.trials: found -1; allowed: >= 1",
        ...                      "a.yaml: devices: found nothing; allowed: one or more profiles"])
        ... except SpecError as exc:
        ...     print(len(exc.problems))
        ...     print(exc)
        2
        a.yaml: budget.trials: found -1; allowed: >= 1
        a.yaml: devices: found nothing; allowed: one or more profiles
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class BuildError(DseError):
    """A candidate could not be turned into a deployable artifact (export, quantization, compile)."""


class DeviceError(DseError):
    """A device (or the cluster that hosts it) cannot be reached or used."""


class MeasurementError(DseError):
    """A measurement could not be taken (runner crashed, no samples)."""


class Terminated(KeyboardInterrupt):
    """A stop signal other than Ctrl-C (SIGTERM from systemd, Docker, Kubernetes or a batch
    scheduler; SIGHUP when the terminal goes), handled exactly like Ctrl-C: the trials in flight
    are failed as interrupted, the study stays consistent, and the process exits 128 + signal."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by signal {signum}")


def interrupt_exit_code(exc: KeyboardInterrupt) -> int:
    """The shell's convention: 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM)."""
    return 128 + (exc.signum if isinstance(exc, Terminated) else 2)
