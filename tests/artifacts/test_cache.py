"""The content-addressed artifact cache."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dse.artifacts import ArtifactCache
from dse.core.candidate import stable_hash
from dse.core.exceptions import BuildError


def test_path_is_the_hash_of_the_key(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    key = {"stage": "export", "weights": "abc"}
    assert cache.path_for(key, ".onnx") == tmp_path / f"{stable_hash(key)}.onnx"
    assert cache.path_for({"weights": "abc", "stage": "export"}, ".onnx") == \
        cache.path_for(key, ".onnx")
    assert cache.path_for({**key, "weights": "abd"}, ".onnx") != cache.path_for(key, ".onnx")


@pytest.mark.parametrize("suffix", ["onnx", "", "./x", "a/b"])
def test_suffix_must_be_an_extension(tmp_path: Path, suffix: str) -> None:
    with pytest.raises(ValueError, match="suffix must be a file extension"):
        ArtifactCache(tmp_path).path_for({"k": 1}, suffix)


def test_builds_once_then_hits(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path / "artifacts")  # created on first build
    calls: list[Path] = []

    def builder(path: Path) -> None:
        calls.append(path)
        assert path.parent.parent == tmp_path / "artifacts"  # a scratch folder beside the entry
        assert path.suffix == ".bin"
        path.write_bytes(b"payload")

    path, built = cache.get_or_build({"k": 1}, ".bin", builder)
    assert built
    assert path.read_bytes() == b"payload"
    assert cache.get_or_build({"k": 1}, ".bin", builder) == (path, False)
    assert len(calls) == 1
    assert sorted(p.name for p in (tmp_path / "artifacts").iterdir()) == [
        path.name, path.name + ".sha256"]


def test_a_corrupted_or_unrecorded_entry_is_detected_by_its_hash_and_rebuilt(
        tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    builds: list[int] = []

    def builder(path: Path) -> None:
        builds.append(1)
        path.write_bytes(b"the real artifact")

    path, _ = cache.get_or_build({"k": 1}, ".onnx", builder)
    path.write_bytes(b"the real artif")  # truncated, as by a full disk
    assert cache.get_or_build({"k": 1}, ".onnx", builder) == (path, True)
    assert path.read_bytes() == b"the real artifact"
    (tmp_path / (path.name + ".sha256")).unlink()  # an entry from before digests, or a crash
    assert cache.get_or_build({"k": 1}, ".onnx", builder) == (path, True)
    assert cache.get_or_build({"k": 1}, ".onnx", builder) == (path, False)
    assert len(builds) == 3


def test_a_failing_builder_caches_nothing(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)

    def builder(path: Path) -> None:
        path.write_bytes(b"half")
        (path.parent / "side-file").write_bytes(b"junk")
        raise BuildError("boom")

    with pytest.raises(BuildError, match="boom"):
        cache.get_or_build({"k": 2}, ".bin", builder)
    assert list(tmp_path.iterdir()) == []
    def good(path: Path) -> None:
        path.write_bytes(b"ok")

    path, built = cache.get_or_build({"k": 2}, ".bin", good)
    assert built
    assert path.read_bytes() == b"ok"


def test_a_builder_that_writes_nothing_is_a_build_error(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="wrote no file"):
        ArtifactCache(tmp_path).get_or_build({"k": 3}, ".bin", lambda p: None)
    assert list(tmp_path.iterdir()) == []


def test_importing_build_imports_no_torch_or_onnxruntime() -> None:
    code = ("import sys, dse.artifacts; "
            "print([m for m in ('torch', 'onnxruntime', 'onnx') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
