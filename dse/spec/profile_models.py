"""The hardware profile's model: a device kind, what it runs, and its ``telemetry:`` probes (each
entry checked against the registered probe's settings)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Union

from pydantic import (
    Field,
    model_validator,
)

from dse.spec.fields import NAME_PATTERN, BackendName, DeviceKind, Precision, ProbeName, Strict
from dse.spec.space_models import REPLAY_TABLE_SUFFIXES
from dse.spec.telemetry import checked_entry, entries_json_schema

# One `telemetry:` entry, kept as plain data: a probe name, or {probe: {setting: value, ...}}.
TelemetryEntry = Union[ProbeName, dict[ProbeName, dict[str, object]]]  # noqa: UP007 - runtime Union


class _TelemetryRules:
    """Validation and JSON schema of a profile's `telemetry:` list (pydantic's hooks).

    Each entry's settings are checked against those its probe declares (``settings_model`` of the
    registered probe class: :mod:`dse.spec.telemetry`).
    """

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: object) -> object:
        from pydantic_core import core_schema

        entry = core_schema.no_info_plain_validator_function(_telemetry_entry)
        return core_schema.no_info_after_validator_function(_each_probe_once,
                                                            core_schema.list_schema(entry))

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: object, handler: object) -> dict[str, object]:
        return entries_json_schema()


def _telemetry_entry(entry: object) -> object:
    return checked_entry(entry)


def _each_probe_once(entries: list[object]) -> list[object]:
    # Two entries of one probe would share its trace's name, and the first would shadow the second.
    names = [str(next(iter(e))) if isinstance(e, dict) else str(e) for e in entries]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"probe(s) {', '.join(twice)} listed more than once; list each probe "
                         f"once, with all its settings in one entry")
    return entries


class HardwareProfile(Strict):
    """A target device: what it is, what it runs, and which sensors it has."""

    name: str = Field(pattern=NAME_PATTERN, description="Profile name; also its Ray resource.")
    kind: DeviceKind = Field(
        description="Device kind: cpu, cuda, jetson, or replay (no hardware: measurements are "
                    "served from a recorded table).")
    description: str = Field(default="", description="Free text shown in reports.")
    backends: list[BackendName] = Field(
        default_factory=list,
        description="Backends installed on it (required but for replay, where a list limits the "
                    "backends searched).")
    precisions: list[Precision] = Field(
        default_factory=list,
        description="Precisions it supports (required but for replay, where a list limits the "
                    "precisions searched).")
    max_threads: int | None = Field(
        default=None, ge=1, description="CPU threads available to a runner (none: all cores).")
    compute_capability: float | None = Field(
        default=None, gt=0, le=20,
        description="CUDA compute capability of the device's GPU (e.g. 9.0); combinations below "
                    "a capability entry's floor are not offered. None: checked when compiling.")
    telemetry: Annotated[list[TelemetryEntry], _TelemetryRules] = Field(
        default_factory=lambda: list[TelemetryEntry](["process_memory"]),
        description="Telemetry probes to use: each a probe name, or {probe: {setting: value}} "
                    "to set the probe's settings (e.g. interval_s).")
    peak_gflops: float | None = Field(default=None, gt=0,
                                      description="Peak compute, for the roofline.")
    peak_bandwidth_gbs: float | None = Field(default=None, gt=0,
                                             description="Peak memory bandwidth, for the roofline.")
    peak_gflops_by_precision: dict[Precision, Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict,
        description="Peak dense compute per precision in GFLOP/s (GOP/s for int8), for the "
                    "roofline; peak_gflops is the fp32 figure.")
    peak_source: str = Field(default="", description="Where the peak figures come from "
                                                     "(datasheet, whitepaper), for the reader.")
    power_modes: list[str] = Field(
        default_factory=list,
        description="Power modes the device offers (nvpmodel modes on Jetson, power caps on GPUs).")
    power_mode: str | None = Field(
        default=None, description="The power mode measurements are taken in; one of power_modes.")
    table: Path | None = Field(
        default=None,
        description="Replay profiles only: the recorded CSV or parquet table (a column per "
                    "parameter, a column per metric), relative to this file.")

    @model_validator(mode="after")
    def _known_power_mode(self) -> HardwareProfile:
        if self.power_mode is not None and self.power_mode not in self.power_modes:
            raise ValueError(f"power_mode {self.power_mode!r} is not one of power_modes "
                             f"{self.power_modes}")
        return self

    @model_validator(mode="after")
    def _replay_has_a_table(self) -> HardwareProfile:
        if self.kind == "replay":
            if self.table is None:
                raise ValueError("a replay profile needs table: a CSV or parquet file of recorded "
                                 "parameters and metrics")
            if self.table.suffix.lower() not in REPLAY_TABLE_SUFFIXES:
                raise ValueError(f"table {str(self.table)!r} must be a CSV or parquet file "
                                 f"({', '.join(REPLAY_TABLE_SUFFIXES)})")
            return self
        if self.table is not None:
            raise ValueError(f"table is for replay profiles only; this profile is kind "
                             f"{self.kind!r}")
        for name in ("backends", "precisions"):
            if not getattr(self, name):
                raise ValueError(f"a {self.kind} profile needs {name}: at least one")
        return self
