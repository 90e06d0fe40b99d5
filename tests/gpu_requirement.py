"""``DSE_REQUIRE_GPU=1``: every skipped test marked ``gpu`` fails instead, naming why it would have
skipped. On a machine that has the GPU, a skip means the suite tested less than it claims (a CUDA
build of torch missing, NVML absent): this makes that visible. A pytest plugin, loaded by the
suite's conftest (and by ``pytest -p tests.gpu_requirement`` anywhere)."""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

REQUIRE_ENV = "DSE_REQUIRE_GPU"


def required(environ: dict[str, str] | None = None) -> bool:
    value = (os.environ if environ is None else environ).get(REQUIRE_ENV, "")
    return value.strip().lower() not in ("", "0", "false", "no")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, None, None]:
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and required() and item.get_closest_marker("gpu") is not None):
        return
    longrepr = report.longrepr
    why = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    why = why.removeprefix("Skipped: ")
    report.outcome = "failed"
    report.longrepr = f"{REQUIRE_ENV}=1 and this gpu test skipped: {why}"
