"""A content-addressed artifact cache: a file's name is the hash of what it was built from."""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dse.core import BuildError, stable_hash

logger = logging.getLogger(__name__)


class ArtifactCache:
    """Files under ``root`` named ``<stable_hash(key)><suffix>``.

    A key should name everything the file depends on (stage, its settings, the id of its input,
    library versions), as Olive's output ids do; then a hit is always valid. Entries appear
    atomically (built under a temporary name, then renamed), so a crash or a concurrent builder
    never leaves a half-written file under a real name.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path_for(self, key: Mapping[str, Any], suffix: str) -> Path:
        """Where the entry for ``key`` lives (whether or not it exists yet)."""
        if not suffix.startswith(".") or "/" in suffix or os.sep in suffix:
            raise ValueError(f"suffix must be a file extension like '.onnx', got {suffix!r}")
        return self.root / f"{stable_hash(dict(key))}{suffix}"

    def get_or_build(self, key: Mapping[str, Any], suffix: str,
                     builder: Callable[[Path], None]) -> tuple[Path, bool]:
        """The entry's path, and whether it was built now (False: it was already cached).

        ``builder`` receives a temporary path inside the cache folder, ending in ``suffix``, and
        must write the file there. If it raises, nothing is cached and its exception propagates.
        """
        path = self.path_for(key, suffix)
        if path.is_file():
            if self._intact(path):
                return path, False
            logger.warning("artifact cache entry %s does not match its recorded SHA-256 (or has "
                           "none); rebuilding it", path.name)
        self.root.mkdir(parents=True, exist_ok=True)
        # A private folder beside the entry: same file system, so the rename is atomic, and any
        # side files a builder leaves (or a failed build) vanish with it.
        with tempfile.TemporaryDirectory(dir=self.root, prefix=".build-") as scratch:
            tmp = Path(scratch) / path.name
            builder(tmp)
            if not tmp.is_file():
                raise BuildError(f"the builder of {path.name} wrote no file at {tmp}")
            digest = Path(scratch) / _digest_path(path).name
            digest.write_text(_sha256(tmp) + "\n")
            os.replace(tmp, path)
            # The digest lands last: an entry without one (a crash in between) is rebuilt.
            os.replace(digest, _digest_path(path))
        return path, True

    @staticmethod
    def _intact(path: Path) -> bool:
        """Whether the entry's bytes still hash to the SHA-256 recorded when it was built: a
        truncated or corrupted file (a full disk, a bad sector, a stray edit) is rebuilt, never
        deployed."""
        try:
            recorded = _digest_path(path).read_text().strip()
        except OSError:
            return False
        return recorded == _sha256(path)


def _digest_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
