"""Pydantic models of the three YAML kinds: search space, hardware profile, experiment (campaign).

Every model forbids unknown keys, so a misspelt key is an error rather than a silently ignored line.
Names of backends and precisions are closed sets here; which combinations a device can run is the
capability table's business (``dse.backends.capabilities``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from dse.metrics import METRICS

BackendName = Literal["onnxruntime", "onnxruntime_cuda", "onnxruntime_tensorrt", "tensorrt", "torch",
                      "torch_compile"]
Precision = Literal["fp32", "fp16", "bf16", "int8", "fp8"]
DeviceKind = Literal["cpu", "cuda", "jetson"]
FamilyName = Literal["cnn"]
DatasetName = Literal["digits"]
SamplerName = Literal["tpe", "nsga2", "random"]
ProbeName = Literal["process_memory", "rapl", "thermal_zones", "cpufreq", "cpu_throttle",
                    "jetson_power", "jetson_clocks", "tegrastats", "nvml", "cuda_memory"]

Scalar = Union[int, float, str, bool]  # noqa: UP007 - pydantic needs the runtime Union
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RangeParam(Strict):
    """A numeric range. Integers when ``low`` and ``high`` are both integers, else floats."""

    low: float | int = Field(description="Smallest value (inclusive).")
    high: float | int = Field(description="Largest value (inclusive).")
    step: float | int | None = Field(default=None, description="Grid step; none for continuous.")
    log: bool = Field(default=False, description="Sample on a log scale (low must be > 0).")

    @model_validator(mode="after")
    def _ordered(self) -> RangeParam:
        if self.low > self.high:
            raise ValueError(f"`low <= high` must hold, but got low={self.low}, high={self.high}")
        if self.log and self.low <= 0:
            raise ValueError(f"a log range needs low > 0, but got low={self.low}")
        return self

    @property
    def is_int(self) -> bool:
        return isinstance(self.low, int) and isinstance(self.high, int) and (
            self.step is None or isinstance(self.step, int))


Choices = Annotated[list[Scalar], Field(min_length=1)]


def _param_form(value: object) -> str:
    return "choices" if isinstance(value, list) else "range"


# A list is a categorical choice, a mapping a numeric range; the tag keeps errors to one line each.
ParamSpec = Annotated[
    Union[Annotated[Choices, Tag("choices")], Annotated[RangeParam, Tag("range")]],  # noqa: UP007
    Discriminator(_param_form),
]


class ModelSpec(Strict):
    """Which model family is searched, and its architecture parameters."""

    family: FamilyName = Field(description="Model family that turns arch parameters into a model.")
    dataset: DatasetName = Field(default="digits", description="Dataset the accuracy is trained on.")
    arch: dict[str, ParamSpec] = Field(
        description="Architecture parameters: a list of choices or a {low, high} range each.")


class TrainingSpec(Strict):
    """The short, seeded accuracy training run once per architecture."""

    epochs: int = Field(default=10, ge=1, le=500, description="Passes over the training split.")
    batch_size: int = Field(default=64, ge=1, le=4096, description="Training mini-batch size.")
    learning_rate: float = Field(default=0.01, gt=0, le=10, description="Adam learning rate.")
    seed: int = Field(default=0, ge=0, description="Seed of data split, initialisation and order.")
    threads: int = Field(default=2, ge=1, le=256, description="Torch threads used for training.")


class BackendSpec(Strict):
    """A compiler/runtime offered to the search, with its runtime knobs."""

    knobs: dict[str, ParamSpec] = Field(
        default_factory=dict, description="Runtime knobs searched for this backend.")


class DeploymentSpec(Strict):
    """The deployment stack searched jointly with the architecture."""

    backends: dict[BackendName, BackendSpec] = Field(
        min_length=1, description="Backends to search, each with its knobs.")
    precisions: list[Precision] = Field(min_length=1, description="Numeric precisions to search.")
    batch_sizes: list[Annotated[int, Field(ge=1, le=65536)]] = Field(
        min_length=1, description="Batch sizes to search.")


class ObjectiveSpec(Strict):
    """An objective: a metric from the metrics table; its direction comes from the table."""

    metric: str = Field(description="Metric name from dse.metrics (e.g. latency_p99_ms).")

    @field_validator("metric")
    @classmethod
    def _known(cls, value: str) -> str:
        _check_metric(value)
        return value


_CONSTRAINT_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=)\s*([-+0-9.eE]+)\s*$")


class ConstraintSpec(Strict):
    """A bound on a metric, written ``"memory_peak_mb <= 512"`` or as {metric, op, value}."""

    metric: str = Field(description="Metric name from dse.metrics.")
    op: Literal["<=", ">="] = Field(description="Comparison: <= or >=.")
    value: float = Field(description="The bound, in the metric's unit.")

    @model_validator(mode="before")
    @classmethod
    def _parse_text(cls, data: object) -> object:
        if isinstance(data, str):
            match = _CONSTRAINT_RE.match(data)
            if match is None:
                raise ValueError(
                    f"constraint must read '<metric> <= <number>' or '<metric> >= <number>', "
                    f"got {data!r}")
            return {"metric": match[1], "op": match[2], "value": float(match[3])}
        return data

    @field_validator("metric")
    @classmethod
    def _known(cls, value: str) -> str:
        _check_metric(value)
        return value

    def violation(self, measured: float) -> float:
        """Optuna's constraint value: <= 0 when satisfied, the overshoot otherwise."""
        return measured - self.value if self.op == "<=" else self.value - measured

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.value:g}"


def _check_metric(name: str) -> None:
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; allowed: {', '.join(sorted(METRICS))}")


class SearchSpace(Strict):
    """A search space: model family and arch parameters, deployment stack, objectives, constraints."""

    name: str = Field(pattern=NAME_PATTERN, description="Name of the space.")
    description: str = Field(default="", description="What the space explores.")
    model: ModelSpec = Field(description="Model family and architecture parameters.")
    training: TrainingSpec = Field(default_factory=TrainingSpec,
                                   description="Accuracy training settings.")
    deployment: DeploymentSpec = Field(description="Backends, precisions and batch sizes.")
    objectives: list[ObjectiveSpec] = Field(
        min_length=1, description="Metrics to optimise; directions come from the metrics table.")
    constraints: list[ConstraintSpec] = Field(
        default_factory=list, description="Bounds a feasible candidate must meet.")

    @model_validator(mode="after")
    def _distinct_objectives(self) -> SearchSpace:
        names = [o.metric for o in self.objectives]
        if len(set(names)) != len(names):
            raise ValueError(f"objectives repeat a metric: {names}")
        return self


class HardwareProfile(Strict):
    """A target device: what it is, what it runs, and which sensors it has."""

    name: str = Field(pattern=NAME_PATTERN, description="Profile name; also its Ray resource.")
    kind: DeviceKind = Field(description="Device kind: cpu, cuda or jetson.")
    description: str = Field(default="", description="Free text shown in reports.")
    backends: list[BackendName] = Field(min_length=1, description="Backends installed on it.")
    precisions: list[Precision] = Field(min_length=1, description="Precisions it supports.")
    max_threads: int | None = Field(
        default=None, ge=1, description="CPU threads available to a runner (none: all cores).")
    compute_capability: float | None = Field(
        default=None, gt=0, le=20,
        description="CUDA compute capability of the device's GPU (e.g. 9.0); combinations below "
                    "a capability entry's floor are not offered. None: checked when compiling.")
    telemetry: list[ProbeName] = Field(
        default_factory=lambda: list[ProbeName](["process_memory"]),
        description="Telemetry probes to use.")
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

    @model_validator(mode="after")
    def _known_power_mode(self) -> HardwareProfile:
        if self.power_mode is not None and self.power_mode not in self.power_modes:
            raise ValueError(f"power_mode {self.power_mode!r} is not one of power_modes "
                             f"{self.power_modes}")
        return self


class SamplerSpec(Strict):
    """The Optuna sampler that proposes candidates."""

    name: SamplerName = Field(default="tpe", description="Sampler: tpe, nsga2 or random.")
    seed: int = Field(default=0, ge=0, description="Sampler seed.")
    startup_trials: int = Field(default=10, ge=1,
                                description="Random trials before a model-based sampler kicks in.")


class BudgetSpec(Strict):
    """When the campaign stops."""

    trials: int = Field(ge=1, le=1_000_000, description="Completed trials the campaign aims for.")
    max_failed: int = Field(default=50, ge=1,
                            description="Stop, with an error, after this many failed or "
                                        "infeasible trials in one run.")
    trial_timeout_s: float = Field(default=600.0, gt=0,
                                   description="A trial still running after this is failed.")


class MeasureSpec(Strict):
    """How each candidate is timed: adaptive single-stream latency, optional offline and
    sustained runs."""

    target_rel_ci: float = Field(
        default=0.01, gt=0, lt=1,
        description="Stop once the 95% CI of the median is within ± this fraction of it.")
    min_iters: int = Field(default=30, ge=1, description="Fewest timed iterations.")
    max_iters: int = Field(default=1_000_000, ge=1, description="Most timed iterations.")
    min_seconds: float = Field(default=0.2, ge=0, description="Fewest seconds of timing.")
    max_seconds: float = Field(default=5.0, gt=0, description="Most seconds of timing.")
    warmup_max_seconds: float = Field(
        default=1.0, ge=0, description="Cap on the warm-up that runs until the median settles.")
    offline_concurrency: int = Field(
        default=0, ge=0, le=256,
        description="Requests kept in flight for the offline throughput run (0: no such run).")
    offline_seconds: float = Field(default=1.0, gt=0,
                                   description="Length of the offline throughput run.")
    sustained_seconds: float = Field(
        default=0.0, ge=0,
        description="Run the candidate this long without pause and report latency drift beside "
                    "thermal telemetry (0: no sustained run).")

    @model_validator(mode="after")
    def _ordered(self) -> MeasureSpec:
        if self.min_iters > self.max_iters:
            raise ValueError(f"`min_iters <= max_iters` must hold, got {self.min_iters}, "
                             f"{self.max_iters}")
        if self.min_seconds > self.max_seconds:
            raise ValueError(f"`min_seconds <= max_seconds` must hold, got {self.min_seconds}, "
                             f"{self.max_seconds}")
        return self


class FarmSpec(Strict):
    """Where the devices are and how the farm treats faults."""

    address: str | None = Field(
        default=None,
        description="Ray head address (HOST:PORT) of a device farm; none: an embedded local Ray. "
                    "`dse run --address` overrides it.")
    max_retries: int = Field(
        default=2, ge=0, le=20,
        description="Times a trial whose device worker or node died is re-dispatched to another "
                    "device of the same profile before it is failed.")
    quarantine_after: int = Field(
        default=3, ge=1, le=1000,
        description="A device whose trials fail this many times in a row is quarantined: it gets "
                    "no more trials in this campaign.")


class ExperimentSpec(Strict):
    """A campaign: a search space on one or more devices, with a sampler and a budget."""

    name: str = Field(pattern=NAME_PATTERN, description="Campaign name; names its run folder.")
    description: str = Field(default="", description="What the campaign is for.")
    search_space: Path = Field(description="Search-space YAML, relative to this file.")
    devices: list[Path] = Field(min_length=1,
                                description="Hardware-profile YAMLs, relative to this file.")
    sampler: SamplerSpec = Field(default_factory=SamplerSpec, description="Sampler settings.")
    budget: BudgetSpec = Field(description="Trial budget.")
    measurement: MeasureSpec = Field(default_factory=MeasureSpec,
                                     description="Latency sampling settings.")
    farm: FarmSpec = Field(default_factory=FarmSpec,
                           description="Device farm address and fault handling.")
    runs_dir: Path = Field(default=Path("runs"),
                           description="Where run folders go, relative to this file.")
    dashboards_dir: Path = Field(default=Path("../dashboards"),
                                 description="Where the dashboard goes, relative to this file.")
    cache_dir: Path | None = Field(
        default=None,
        description="Build cache (trained weights, artifacts), relative to this file; campaigns "
                    "and farm workers that name the same folder share it. Default: the run "
                    "folder's cache/.")
