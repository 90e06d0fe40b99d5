"""A fresh virtual environment holding only a runtime (and what it depends on), for testing a
bundle's ``run.py`` as a user without dse runs it.

The environment is a real ``python -m venv``; instead of downloading the runtime again, the
installed distributions it needs (the closure of their declared requirements) are linked from
this interpreter's site-packages into a folder the new environment reads through a ``.pth``
file. dse, pytest and everything else not required stay out of reach.
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path


def _name(requirement: str) -> str | None:
    """The distribution a requirement line names, or None for one that only an extra or
    another platform asks for."""
    if ";" in requirement:
        marker = requirement.split(";", 1)[1]
        if "extra" in marker:
            return None
        from packaging.markers import Marker

        if not Marker(marker).evaluate():
            return None
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return match.group(1) if match else None


def _closure(names: list[str]) -> list[metadata.Distribution]:
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional dependency not installed here: the runtime runs without it
        seen[key] = dist
        todo.extend(n for n in map(_name, dist.requires or []) if n)
    return list(seen.values())


def _top_level(dist: metadata.Distribution) -> set[str]:
    """The top-level files and folders of site-packages a distribution installed."""
    tops: set[str] = set()
    for file in dist.files or []:
        first = Path(str(file)).parts[0]
        if first == ".." or first.endswith((".dist-info", ".egg-info")) or first == "__pycache__":
            if first.endswith(".dist-info"):
                tops.add(first)
            continue
        tops.add(first)
    return tops


def runtime_only_python(folder: Path, distributions: list[str]) -> Path:
    """A new virtual environment in ``folder`` where only ``distributions`` and their
    dependencies can be imported; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    linked = folder / "runtime-packages"
    linked.mkdir()
    for dist in _closure(distributions):
        root = Path(str(dist.locate_file("")))
        for top in _top_level(dist):
            source = root / top
            target = linked / top
            if source.exists() and not target.exists():
                target.symlink_to(source)
    (site / "runtime.pth").write_text(f"{linked}\n")
    return python
