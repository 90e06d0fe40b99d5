"""What `pip install dse` pulls: on a Jetson, torch and onnxruntime are JetPack's builds, so the
core dependencies must not name them (PyPI's wheels would replace NVIDIA's)."""

from __future__ import annotations

import re

import tomllib

from tests.conftest import REPO

JETPACK_PROVIDED = {"torch", "onnxruntime", "onnxruntime-gpu", "tensorrt", "torchvision"}


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_core_dependencies_leave_jetpacks_runtimes_alone() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not _names(project["dependencies"]) & JETPACK_PROVIDED
    extras = project["optional-dependencies"]
    assert not _names(extras["jetson"]) & JETPACK_PROVIDED
    # A laptop or CPU server gets both runtimes from one extra; development installs that.
    assert "dse[torch,onnxruntime]" in extras["cpu"]
    assert "dse[cpu]" in extras["dev"]
    assert {"torch", "onnxscript"} <= _names(extras["torch"])
