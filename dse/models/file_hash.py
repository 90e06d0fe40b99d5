"""A model file's SHA-256, remembered while the file stays the same: a campaign's candidates carry
the hash of the ONNX or GGUF file they name, and the worker checks it before loading."""

from __future__ import annotations

import hashlib
from pathlib import Path


def file_sha256(path: Path) -> str:
    """The file's SHA-256 (remembered while its size and modification time stay the same: every
    trial asks); ValueError naming the file when it cannot be read."""
    try:
        stat = path.stat()
        stamp = (str(path), stat.st_size, stat.st_mtime_ns)
        if stamp not in _HASHES:
            digest = hashlib.sha256()
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            _HASHES[stamp] = digest.hexdigest()
    except OSError as exc:
        raise ValueError(f"cannot read the model file {path}: {exc.strerror or exc}") from None
    return _HASHES[stamp]


_HASHES: dict[tuple[str, int, int], str] = {}
