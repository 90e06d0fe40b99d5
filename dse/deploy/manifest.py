"""A bundle's SHA-256 manifest, in ``sha256sum``'s format (``sha256sum -c MANIFEST.sha256``
checks it without dse): every file of the bundle but the manifest itself and the reports
``dse verify`` writes under ``verify/``."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from dse.deploy.layout import MANIFEST
from dse.util import atomic_write_text

# Written into a bundle after export, by dse verify; never part of what is checked.
REPORTS_DIR = "verify"
_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")


def file_sha256(path: Path) -> str:
    """Every byte read, every time: an integrity check cannot use a digest remembered by size
    and modification time (``dse.models.sources.file_sha256``), which an edit can keep."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def bundle_files(folder: Path) -> list[str]:
    """The files the manifest covers, as relative POSIX paths, sorted."""
    found = []
    for path in folder.rglob("*"):
        relative = path.relative_to(folder).as_posix()
        if path.is_file() and relative != MANIFEST and not relative.startswith(
                f"{REPORTS_DIR}/") and "__pycache__" not in path.parts:
            found.append(relative)
    return sorted(found)


def write_manifest(folder: Path) -> Path:
    """Hash every file of the bundle into its manifest."""
    lines = [f"{file_sha256(folder / name)}  {name}" for name in bundle_files(folder)]
    return atomic_write_text(folder / MANIFEST, "\n".join(lines) + "\n")


def manifest_problems(folder: Path) -> list[str]:
    """What does not match the manifest: a file listed but missing or altered, a file the
    bundle's own layout needs that is not listed, an unreadable manifest; empty when all match."""
    path = folder / MANIFEST
    if not path.is_file():
        return [f"no {MANIFEST}: not an exported bundle, or its manifest was removed"]
    problems = []
    listed: dict[str, str] = {}
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        match = _LINE.match(line)
        if match is None:
            return [f"{MANIFEST} line {number} is not '<sha256>  <file>': {line[:80]!r}"]
        listed[match.group(2)] = match.group(1)
    for name, expected in listed.items():
        target = folder / name
        if ".." in Path(name).parts or not target.is_file():
            problems.append(f"{name} is missing")
        elif file_sha256(target) != expected:
            problems.append(f"{name} was altered (its SHA-256 is not the manifest's)")
    return problems
