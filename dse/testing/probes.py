"""The telemetry probe suite: what every probe must do, the life cycle of
:class:`dse.measure.telemetry.Probe` checked on the probe itself. dse's own probes pass it
(``tests/measure/test_probe_suite.py``), and a plugin's probe proves itself with the same suite:
its test subclasses :class:`ProbeSuite` and supplies the fixture ``probe_name``.

    import pytest
    from dse.testing import ProbeSuite

    class TestMySensor(ProbeSuite):
        @pytest.fixture
        def probe_name(self) -> str:
            return "my_sensor"

Run it where the plugin is loaded: ``DSE_PLUGINS=mylab.sensors pytest tests/test_my_sensor.py``.
The life-cycle test reads the sensor of the machine it runs on, and is skipped, with the probe's
own reason, where ``available()`` says no; a probe that reads files can be pointed at a fixture
tree in the real layout by overriding the fixture ``probe``.

This module needs pytest (dse's ``dev`` extra; a plugin's test environment has it), which
``import dse.testing`` does not import.
"""

from __future__ import annotations

import inspect
import math
import time

import pytest

from dse.measure import PROBES, Probe, ProbeResult, ProbeSettings, Trace, Window, make_probe

__all__ = ["ProbeSuite"]

# The window the life-cycle test reads the probe over.
WINDOW_SECONDS = 0.05


class ProbeSuite:
    """The tests every telemetry probe passes; subclass it in a test module and supply
    ``probe_name``.

    Fixtures a subclass supplies:
        probe_name: the registered name of the probe under test (required).

    Fixtures it may override:
        probe: the instance the life-cycle tests read (the probe built from its name alone, as a
            profile's ``telemetry: [name]`` builds it).
    """

    @pytest.fixture
    def probe_name(self) -> str:
        pytest.fail(f"{type(self).__name__} supplies the fixture probe_name: the registered name "
                    "of the probe under test")

    @pytest.fixture
    def probe(self, probe_name: str) -> Probe:
        return make_probe(probe_name)

    # --- the class: what a profile and the other layers read without building it -------------

    def test_registered_under_its_name(self, probe_name: str) -> None:
        probe_class = PROBES[probe_name]
        assert inspect.isclass(probe_class) and issubclass(probe_class, Probe)
        assert probe_class.name == probe_name

    def test_declares_its_metrics_and_units(self, probe_name: str) -> None:
        probe_class = PROBES[probe_name]
        provides = probe_class.provides
        assert isinstance(provides, tuple) and provides, f"{probe_name} provides no metric"
        assert all(isinstance(name, str) and name for name in provides)
        assert len(set(provides)) == len(provides), f"{probe_name} lists a metric twice"
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in probe_class.units.items())

    def test_settings_are_constructor_keywords_with_its_defaults(self, probe_name: str) -> None:
        probe_class = PROBES[probe_name]
        settings = probe_class.settings_model
        assert issubclass(settings, ProbeSettings)
        assert "interval_s" in settings.model_fields
        parameters = inspect.signature(probe_class.__init__).parameters
        for field_name, field in settings.model_fields.items():
            assert field_name in parameters, \
                f"{probe_name}: setting {field_name} is not a keyword of its constructor"
            assert field.default == parameters[field_name].default, \
                f"{probe_name}.{field_name}: the setting's default is not the constructor's"

    def test_a_name_alone_builds_the_probe_with_its_defaults(self, probe_name: str) -> None:
        probe_class = PROBES[probe_name]
        probe = make_probe(probe_name)
        assert type(probe) is probe_class
        assert probe.interval_s == probe_class.settings_model.model_fields["interval_s"].default
        assert make_probe({probe_name: {"interval_s": 0.25}}).interval_s == 0.25

    def test_an_unknown_setting_is_refused_naming_it(self, probe_name: str) -> None:
        with pytest.raises(ValueError, match=rf"{probe_name}\.no_such_setting: unknown setting"):
            make_probe({probe_name: {"no_such_setting": 1}})

    # --- the instance: its life cycle --------------------------------------------------------

    def test_available_says_why_not(self, probe: Probe) -> None:
        ok, why = probe.available()
        assert isinstance(ok, bool) and isinstance(why, str)
        assert ok or why, f"{probe.name} is unavailable without a reason"

    def test_life_cycle_over_a_window(self, probe: Probe) -> None:
        ok, why = probe.available()
        if not ok:
            pytest.skip(f"{probe.name} is not available here: {why}")
        reading = probe.read()
        assert all(isinstance(k, str) and isinstance(v, float | int) for k, v in reading.items())
        probe.start()
        start = time.time()
        time.sleep(WINDOW_SECONDS)  # the window's work: none, the probe's thread samples
        end = time.time()
        trace = probe.stop()
        self._check_trace(probe, trace)
        result = probe.summarize(trace, Window(start, end, inferences=100))
        self._check_result(probe, result)
        facts = probe.provenance(trace)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in facts.items()), facts

    @staticmethod
    def _check_trace(probe: Probe, trace: Trace) -> None:
        assert isinstance(trace, Trace)
        assert trace.probe == probe.name
        # At least the two readings start() and stop() take, in time order.
        assert len(trace.timestamps) >= 2
        assert trace.timestamps == sorted(trace.timestamps)
        for channel, values in trace.channels.items():
            assert len(values) == len(trace.timestamps), f"{channel}: not one value per reading"
            assert channel in trace.units, f"channel {channel} has no unit"

    @staticmethod
    def _check_result(probe: Probe, result: ProbeResult) -> None:
        assert isinstance(result, ProbeResult)
        reported, missing = set(result.metrics), set(result.missing)
        assert not reported & missing, f"both measured and missing: {sorted(reported & missing)}"
        # Every metric it provides is measured, or missing with the reason.
        assert reported | missing == set(probe.provides), (
            f"summarize gave {sorted(reported | missing)}; the probe provides "
            f"{sorted(probe.provides)}")
        for name, value in result.metrics.items():
            assert isinstance(value, float | int) and math.isfinite(value), f"{name} = {value!r}"
        for name, why in result.missing.items():
            assert isinstance(why, str) and why, f"{name} is missing without a reason"
