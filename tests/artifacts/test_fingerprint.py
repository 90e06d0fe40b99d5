"""The device fingerprint and the one folder every backend's device artifacts live under."""

from __future__ import annotations

from pathlib import Path

import pytest

from dse.artifacts.fingerprint import (
    ABSENT,
    DEVICE_CACHE_ENV,
    device_cache_root,
    device_fingerprint,
    fingerprint_id,
)
from dse.backends.onnxruntime.gpu import tensorrt_cache_dir
from dse.backends.tensorrt.settings import engine_cache_root


def test_both_tensorrt_paths_share_the_workers_device_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEVICE_CACHE_ENV, str(tmp_path))
    assert device_cache_root() == tmp_path
    assert engine_cache_root() == tmp_path / "trt-engines"
    assert tensorrt_cache_dir().is_relative_to(tmp_path)


def test_unset_the_cache_is_a_per_user_temp_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEVICE_CACHE_ENV, raising=False)
    assert device_cache_root().name.startswith("dse-device-cache-")


def test_what_cannot_be_read_is_absent_and_the_id_is_stable() -> None:
    from tests.backends._devices import has_cuda

    fingerprint = device_fingerprint()
    if not has_cuda():  # no GPU: what a GPU would tell is recorded as absent, never guessed
        assert fingerprint["gpu_name"] == fingerprint["compute_capability"] == ABSENT
    assert fingerprint["onnxruntime"].startswith("onnxruntime")
    assert fingerprint_id(fingerprint) == fingerprint_id(dict(fingerprint))
    assert fingerprint_id({**fingerprint, "driver": "570.1"}) != fingerprint_id(fingerprint)
