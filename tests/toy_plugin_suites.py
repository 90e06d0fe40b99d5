"""The toy parts' own tests, written as a plugin's author writes them: dse.testing's suites,
subclassed, each with the fixture that names the part under test.

Not collected with dse's tests (the name does not start with ``test_``): the toys exist only
where they are loaded as a plugin, and ``tests/test_plugin_suite.py`` runs this file so, in a
pytest of its own: ``DSE_PLUGINS=tests.test_toy_parts:register pytest tests/toy_plugin_suites.py``.
"""

from __future__ import annotations

import pytest

from dse.testing import BackendSuite, ProbeSuite
from tests.test_toy_parts import NAME, PROBE


class TestToyBackend(BackendSuite):
    @pytest.fixture
    def backend_name(self) -> str:
        return NAME

    # int8 too, which its capability refuses on a CPU: those runner tests skip, with its reason.
    @pytest.fixture(params=["fp32", "int8"])
    def precision(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)


class TestToyProbe(ProbeSuite):
    @pytest.fixture
    def probe_name(self) -> str:
        return PROBE
