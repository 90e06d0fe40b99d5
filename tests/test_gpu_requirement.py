"""``DSE_REQUIRE_GPU=1`` makes a gpu test that skips fail (here, where no GPU is, every one does),
and leaves other skips alone; unset, gpu tests skip as before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

TESTS = '''\
import pytest


@pytest.mark.gpu
def test_on_the_gpu():
    pytest.skip("no CUDA device")


def test_elsewhere():
    pytest.skip("not here either")
'''


def _pytest(folder: Path, require: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DSE_REQUIRE_GPU"}
    env["PYTHONPATH"] = str(REPO)
    env["COLUMNS"] = "300"  # the summary line whole
    if require is not None:
        env["DSE_REQUIRE_GPU"] = require
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "tests.gpu_requirement", "-m", "gpu or not gpu",
                           "-o", "markers=gpu: needs a GPU", str(folder / "test_x.py")],
                          capture_output=True, text=True, cwd=folder, env=env, timeout=120)


def test_required_gpu_tests_fail_where_they_would_skip(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(TESTS)
    done = _pytest(tmp_path, "1")
    assert done.returncode == 1, done.stdout
    assert "1 failed, 1 skipped" in done.stdout, done.stdout
    assert "DSE_REQUIRE_GPU=1 and this gpu test skipped: no CUDA device" in done.stdout


def test_without_the_variable_gpu_tests_skip(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(TESTS)
    done = _pytest(tmp_path, None)
    assert done.returncode == 0 and "2 skipped" in done.stdout, done.stdout
