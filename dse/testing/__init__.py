"""What dse's own tests use, shipped so that a plugin's tests can use it too.

- :class:`BackendSuite` (``dse.testing.backends``): the conformance suite every backend passes.
  A backend's test subclasses it and supplies the fixture ``backend_name``.
- :class:`ProbeSuite` (``dse.testing.probes``): the same for a telemetry probe, with the fixture
  ``probe_name``.
- Trial records written the way the search loop writes them (``dse.testing.records``), for tests
  and demos of reports and results without hardware.

The two suites need pytest (dse's ``dev`` extra; a plugin's test environment has it): importing
``dse.testing`` imports neither suite, and each loads on first use of its name.

Examples:
    >>> from dse.testing import campaign_study, candidate, record_trial
    >>> study = campaign_study("demo", ["accuracy", "latency_p99_ms"])
    >>> record_trial(study, candidate("onnxruntime", "fp32", 1.0, 1),
    ...              metrics={"accuracy": 0.9, "latency_p99_ms": 2.0})
    0
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.testing.records import (
    EXAMPLE_CONSTRAINT,
    EXAMPLE_FRONT,
    EXAMPLE_OBJECTIVES,
    campaign_study,
    candidate,
    example_run,
    example_study,
    record_trial,
)

if TYPE_CHECKING:
    from dse.testing.backends import BackendSuite
    from dse.testing.probes import ProbeSuite

# The suites import pytest: loaded when their name is first used.
_SUITES = {"BackendSuite": "dse.testing.backends", "ProbeSuite": "dse.testing.probes"}

__all__ = [
    "EXAMPLE_CONSTRAINT",
    "EXAMPLE_FRONT",
    "EXAMPLE_OBJECTIVES",
    "BackendSuite",
    "ProbeSuite",
    "campaign_study",
    "candidate",
    "example_run",
    "example_study",
    "record_trial",
]


def __getattr__(name: str) -> Any:
    module = _SUITES.get(name)
    if module is None:
        raise AttributeError(f"module 'dse.testing' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
