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


def test_the_litert_stack_is_pinned_and_covers_the_litert_extra() -> None:
    # `make setup` installs litert-stack.txt with --no-deps: every line must have its exact pin in
    # constraints.txt (else pip takes the newest), and the extra's own packages must be in it.
    stack = {line.strip().lower().replace("_", "-").replace(".", "-")
             for line in (REPO / "litert-stack.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")}
    pinned = {line.split("==")[0].strip().lower().replace("_", "-").replace(".", "-")
              for line in (REPO / "constraints.txt").read_text().splitlines() if "==" in line}
    assert stack - pinned == set()
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert _names(extras["litert"]) <= stack
    assert not _names(extras["litert"]) & JETPACK_PROVIDED
    assert not _names(extras["executorch"]) & JETPACK_PROVIDED
