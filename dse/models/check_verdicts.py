"""Passing verdicts of the model output check, kept on disk between processes.

Building a user's model means importing torch and the libraries the factory uses (transformers
alone takes seconds), which would make every ``dse validate`` of an unchanged space slow. A pass
is kept with what decided it: the SHA-256 of every source file outside the standard library and
the installed distributions that was loaded when the check ran (the factory's module, the user's
own modules, dse's), and the version of every installed distribution then loaded. A later check
of the same spec reuses the pass only while all of these are unchanged; anything else (a problem,
a time-out) is checked afresh every time, so a fix is seen at once. What a factory reads at run
time (a local config or weights file) is not tracked: ``recheck`` (``dse validate
--recheck-models``) builds again.
"""

from __future__ import annotations

import hashlib
import json
import sys
import sysconfig
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from dse.core import __version__
from dse.util import atomic_write_text, user_cache_root

_FORMAT = 1


def cache_folder() -> Path:
    """``model-checks`` in the user's dse cache (``dse.util.user_cache``): per user, not per campaign,
    as ``dse validate`` has no campaign."""
    return user_cache_root() / "model-checks"


def spec_key(*parts: str) -> str:
    """One file name per checked spec: the parts (file, model spec, batch sizes) and dse's version."""
    text = json.dumps([_FORMAT, __version__, *parts])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def passed_before(key: str) -> bool:
    """Whether a pass was recorded under ``key`` and every file and version it depended on is
    as it was then. A cache that cannot be read is no pass."""
    try:
        record = json.loads((cache_folder() / f"{key}.json").read_text())
        files: dict[str, str] = record["files"]
        versions: dict[str, str] = record["distributions"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    for name, version in versions.items():
        try:
            if metadata.version(name) != version:
                return False
        except metadata.PackageNotFoundError:
            return False
    return all(_digest(Path(path)) == digest for path, digest in files.items())


def remember_pass(key: str, extra_files: Iterable[Path] = ()) -> None:
    """Record a pass under ``key`` with the sources and distributions loaded in this process now
    (after the check imported what the model needs). A disk that refuses the write only loses
    the shortcut."""
    files = {str(path): _digest(path) for path in sorted({*_loaded_sources(), *extra_files})}
    record = {"files": {path: digest for path, digest in files.items() if digest is not None},
              "distributions": _loaded_distributions()}
    try:
        folder = cache_folder()
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(folder / f"{key}.json", json.dumps(record, sort_keys=True))
    except OSError:
        pass


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.add(str(Path(sys.base_prefix)))  # the interpreter's own files, wherever they sit
    return tuple(sorted(roots))


def _module_file(module: object) -> Path | None:
    name = getattr(module, "__file__", None)
    return None if not isinstance(name, str) else Path(name)


def _loaded_sources() -> set[Path]:
    """Files of loaded modules that no installed distribution or the standard library owns: the
    user's code (and dse's, in a source checkout)."""
    roots = _library_roots()
    found = set()
    for module in list(sys.modules.values()):
        path = _module_file(module)
        if path is not None and not str(path).startswith(roots) and path.is_file():
            found.add(path.resolve())
    return found


def _loaded_distributions() -> dict[str, str]:
    """Name -> version of every installed distribution with a module loaded now."""
    owners = metadata.packages_distributions()
    top_levels = {name.partition(".")[0] for name in list(sys.modules)}
    versions = {}
    for top in top_levels:
        for distribution in owners.get(top, []):
            try:
                versions[distribution] = metadata.version(distribution)
            except metadata.PackageNotFoundError:
                continue
    return dict(sorted(versions.items()))


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
