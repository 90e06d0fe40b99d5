"""Reading Linux sysfs for the CPU probes, and their common base class.

sysfs attributes are small text files holding one value and a newline. A read can fail in ways
that say something about the host (no permission, a driver answering ENODATA), so failures become
:class:`SysfsError` with a message fit for ``ProbeResult.missing``.
"""

from __future__ import annotations

import abc
import math
import re
from pathlib import Path
from typing import Generic, TypeVar

from dse.measure.telemetry.base import Probe


class SysfsError(Exception):
    """A sysfs file could not be used; the message says which and why."""

    def __init__(self, message: str, *, denied: bool = False) -> None:
        super().__init__(message)
        self.denied = denied


def read_text(path: Path) -> str:
    """The file's content without its trailing newline; raises :class:`SysfsError`."""
    try:
        return path.read_text().strip()
    except PermissionError as exc:
        raise SysfsError(f"permission denied reading {path}", denied=True) from exc
    except FileNotFoundError as exc:
        raise SysfsError(f"{path} does not exist") from exc
    except OSError as exc:
        # sysfs passes driver errors through: EINVAL, ENODATA, EIO from a sensor that is off.
        raise SysfsError(f"cannot read {path}: {exc.strerror or exc}") from exc


def read_int(path: Path) -> int:
    """The integer a sysfs attribute holds; raises :class:`SysfsError`."""
    text = read_text(path)
    try:
        return int(text)
    except ValueError as exc:
        raise SysfsError(f"{path} holds {text!r}, not an integer") from exc


def read_or_nan(path: Path) -> float:
    """For ``Probe.read()``, which must not raise: a failed reading is NaN."""
    try:
        return float(read_int(path))
    except SysfsError:
        return math.nan


def numbered(folder: Path, pattern: str) -> list[Path]:
    """Entries of ``folder`` named by ``pattern`` (one ``\\d+`` group), in numeric order, so
    ``cpu10`` follows ``cpu9``; empty when the folder does not exist."""
    regex = re.compile(pattern)
    if not folder.is_dir():
        return []
    matches = [(regex.fullmatch(path.name), path) for path in folder.iterdir()]
    return [path for _, path in sorted((int(m.group(1)), path) for m, path in matches if m)]


SourceT = TypeVar("SourceT")


class SysfsProbe(Probe, Generic[SourceT]):
    """A probe reading files under ``root`` (``/`` on a host, a fixture tree in tests).

    Subclasses say in :meth:`discover` which sensors (``SourceT``: a domain, zone or CPU) this host
    has. Their channels are found on the host, so their units come from :meth:`channel_units`
    rather than the class-level ``units`` table.
    """

    def __init__(self, root: Path = Path("/"), interval_s: float = 0.1) -> None:
        super().__init__(interval_s)
        self.root = root
        self._sources: list[SourceT] | None = None

    @abc.abstractmethod
    def discover(self) -> list[SourceT]:
        """The sensors on this host, each checked readable; raises :class:`SysfsError` saying why
        there is none usable."""

    @abc.abstractmethod
    def channel_units(self) -> dict[str, str]:
        """Units of the channels ``read()`` returns on this host."""

    def available(self) -> tuple[bool, str]:
        try:
            self._sources = self.discover()
        except SysfsError as exc:
            return False, str(exc)
        return True, ""

    def sources(self) -> list[SourceT]:
        """What :meth:`discover` found; empty when it found nothing, ``available()`` says why."""
        if self._sources is None:
            try:
                self._sources = self.discover()
            except SysfsError:
                self._sources = []
        return self._sources

