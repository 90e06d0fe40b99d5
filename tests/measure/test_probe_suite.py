"""dse's own telemetry probes pass dse.testing's probe suite, the one a plugin's probe passes: each
registered probe's declaration and settings, and its life cycle over a window where this machine
has its sensor (skipped with the probe's own reason where it has not; the sensors' parsers are
tested on fixture trees in the real layouts beside this file)."""

from __future__ import annotations

import pytest

from dse.measure.telemetry import PROBES
from dse.testing import ProbeSuite

# Constructor parameters that only tests set (fixture trees, a stand-in sensor library).
INTERNAL = {"root", "nvml"}


class TestEveryProbe(ProbeSuite):
    @pytest.fixture(params=sorted(PROBES))
    def probe_name(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    def test_settings_leave_out_what_only_tests_set(self, probe_name: str) -> None:
        assert not INTERNAL & set(PROBES[probe_name].settings_model.model_fields)
