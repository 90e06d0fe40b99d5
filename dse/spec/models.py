"""Pydantic models of the three YAML kinds: search space, hardware profile, experiment (campaign).

Every model forbids unknown keys, so a misspelt key is an error rather than a silently ignored line.
Names of backends and precisions are closed sets here; which combinations a device can run is the
capability table's business (``dse.backends.capabilities``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    ModelWrapValidatorHandler,
    Tag,
    field_validator,
    model_validator,
)

from dse.metrics import (
    METRICS,
    RENAMED_METRICS,
    Direction,
    MetricSpec,
    current_metric_name,
    value_range,
)


def _known_backend(name: str) -> str:
    """``name`` when a backend of that name is registered (built in, or from ``$DSE_PLUGINS``);
    ValueError naming the allowed ones otherwise."""
    from dse.parts.backends import backend_names

    names = backend_names()
    if name not in names:
        shown = repr(name) if len(name) <= 60 else repr(name[:57] + "...")
        raise ValueError(f"found {shown}; allowed: {', '.join(names)}")
    return name


class _BackendEnum:
    """The JSON schema of a backend name: an enum of the registered backends, read when the
    schema is written (the registry fills on first use, after this module is imported)."""

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        from dse.parts.backends import backend_names

        schema: dict[str, Any] = handler(core_schema)
        schema["enum"] = list(backend_names())
        return schema


BackendName = Annotated[str, AfterValidator(_known_backend), _BackendEnum]
Precision = Literal["fp32", "fp16", "bf16", "int8", "fp8"]
DeviceKind = Literal["cpu", "cuda", "jetson", "replay"]
FamilyName = Literal["cnn", "transformer"]
DatasetName = Literal["digits", "sequences"]
SamplerName = Literal["tpe", "nsga2", "nsga3", "gp", "random", "grid"]
PercentileName = Literal["p50", "p90", "p95", "p99", "p999"]
# latency_p99_ms, latency_p99_ci_low_ms, ...: the metrics that need a percentile's samples.
_PERCENTILE_METRIC = re.compile(r"^latency_(?P<p>p50|p90|p95|p99|p999)_")
ProbeName = Literal["process_memory", "rapl", "thermal_zones", "cpufreq", "cpu_throttle",
                    "jetson_power", "jetson_clocks", "tegrastats", "nvml", "cuda_memory",
                    "cpu_interference", "gpu_interference"]

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


def checked_values(spec: ParamSpec) -> list[Scalar]:
    """The values that stand for a parameter when its values are checked before a search: each
    choice, or a range's two ends (every value between them is checked by the same rule)."""
    return [spec.low, spec.high] if isinstance(spec, RangeParam) else list(spec)


_MODULE_FUNCTION = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")


def _module_function(value: str) -> str:
    if not _MODULE_FUNCTION.match(value):
        raise ValueError(f"must read module:function (e.g. dse.examples.evaluators:zdt1), "
                         f"got {value!r}")
    return value


EvaluatorRef = Annotated[str, AfterValidator(_module_function)]


class ModelSpec(Strict):
    """Where the models come from — a built-in family, the user's own torch factory, or a fixed
    ONNX file (exactly one) — and the architecture parameters searched."""

    family: FamilyName | None = Field(
        default=None, description="Built-in family that turns arch parameters into a model.")
    factory: EvaluatorRef | None = Field(
        default=None,
        description="Your own torch model, module:function: called with the arch parameters (a "
                    "dict), it returns a torch.nn.Module, or (module, example input batch).")
    onnx: str | None = Field(
        default=None,
        description="A fixed ONNX model file (relative to this file): precision, batch size, "
                    "backend and knobs are searched, the architecture is not.")
    input_shape: list[Annotated[int, Field(ge=1)]] | None = Field(
        default=None,
        description="One sample's shape (no batch axis), for a factory that returns only a "
                    "module.")
    dataset: DatasetName | None = Field(
        default=None,
        description="Dataset the accuracy is trained (family, factory) or evaluated (onnx) on; "
                    "a family's default is its own (cnn: digits, transformer: sequences).")
    evaluator: EvaluatorRef | None = Field(
        default=None,
        description="Your accuracy evaluator, module:function: handed the deployed model "
                    "(dse.DeployedModel), returns {metric: value}.")
    arch: dict[str, ParamSpec] = Field(
        default_factory=dict,
        description="Architecture parameters: a list of choices or a {low, high} range each.")

    @model_validator(mode="after")
    def _one_source(self) -> ModelSpec:
        given = [key for key in ("family", "factory", "onnx") if getattr(self, key) is not None]
        if len(given) != 1:
            raise ValueError(f"a model needs exactly one of family, factory or onnx; got "
                             f"{', '.join(given) or 'none'}")
        if self.onnx is not None and self.arch:
            raise ValueError("an onnx model has a fixed architecture: remove arch (search "
                             "precision, batch size and backend under deployment)")
        if self.input_shape is not None and self.factory is None:
            raise ValueError("input_shape is for a factory that returns only a module; a family "
                             "or an ONNX file knows its own")
        return self

    @property
    def source(self) -> str:
        """``family``, ``factory`` or ``onnx``."""
        return "family" if self.family else "factory" if self.factory else "onnx"


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

    metric: str = Field(description="Metric name from dse.metrics (e.g. latency_p99_ms) or one "
                                    "the space declares under metrics:; a metric's former name "
                                    "is read as its current one.")

    @field_validator("metric")
    @classmethod
    def _known(cls, value: str) -> str:
        return _check_metric(value)


_CONSTRAINT_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=)\s*([-+0-9.eE]+)\s*$")


class ConstraintSpec(Strict):
    """A bound on a metric, written ``"process_rss_peak_mb <= 512"`` or as {metric, op, value}."""

    metric: str = Field(description="Metric name from dse.metrics or the space's metrics:; a "
                                    "metric's former name is read as its current one.")
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
        return _check_metric(value)

    @model_validator(mode="after")
    def _can_hold(self) -> ConstraintSpec:
        if not math.isfinite(self.value):
            raise ValueError(f"the bound of '{self.metric} {self.op} ...' must be a finite number, "
                             f"got {self.value}")
        low, high = value_range(self.metric)
        if (self.op == ">=" and self.value > high) or (self.op == "<=" and self.value < low):
            raise ValueError(f"constraint '{self}' can never hold: {self.metric} lies in "
                             f"[{low:g}, {high:g}]")
        return self

    def violation(self, measured: float) -> float:
        """Optuna's constraint value: <= 0 when satisfied, the overshoot otherwise."""
        return measured - self.value if self.op == "<=" else self.value - measured

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.value:g}"


# The metric names that the search space being validated declares: its objectives and constraints
# may name them besides the built-in table (set by SearchSpace around the validation of its fields,
# so that an unknown name is still reported at its own field path).
_DECLARED_NAMES: ContextVar[frozenset[str]] = ContextVar("declared_metric_names",
                                                         default=frozenset())


def _check_metric(name: str) -> str:
    """The current name of metric ``name`` (a renamed metric's former name is read as its new
    one, see ``dse.metrics.RENAMED_METRICS``); ValueError when no such metric exists."""
    name = current_metric_name(name)
    declared = _DECLARED_NAMES.get() - set(METRICS)
    if name not in METRICS and name not in declared:
        extra = f"; declared: {', '.join(sorted(declared))}" if declared else ""
        raise ValueError(f"unknown metric {name!r}; allowed: {', '.join(sorted(METRICS))}{extra}")
    return name


IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"
REPLAY_TABLE_SUFFIXES = (".csv", ".parquet", ".pq")

# Names a free parameter may not take: they would collide with the candidate's own fields in
# result tables (``param.backend``) and in the Optuna study.
RESERVED_PARAMETER_NAMES = frozenset({"family", "arch", "precision", "batch_size", "backend",
                                      "knob", "knobs", "params", "device", "device_profile"})


class MetricDeclaration(Strict):
    """A metric that a custom evaluator or a replay table reports, beside the built-in table."""

    name: str = Field(pattern=IDENTIFIER,
                      description="Metric name, as objectives and constraints write it.")
    unit: str = Field(min_length=1,
                      description="Unit shown in every column and axis (ms, mJ, 1 for none).")
    direction: Literal["minimize", "maximize"] = Field(description="Which way is better.")
    description: str = Field(default="", description="What the metric measures.")

    @field_validator("name")
    @classmethod
    def _new(cls, value: str) -> str:
        if value in METRICS:
            raise ValueError(f"metric {value!r} is built in (dse.metrics); declare only new "
                             f"metrics")
        if value in RENAMED_METRICS:
            raise ValueError(f"metric {value!r} is the former name of the built-in "
                             f"{RENAMED_METRICS[value]!r} (dse.metrics); declare only new "
                             f"metrics")
        return value

    @field_validator("unit")
    @classmethod
    def _unbracketed(cls, value: str) -> str:
        if "[" in value or "]" in value:
            raise ValueError(f"unit {value!r} must not contain [ or ]: columns read 'name [unit]'")
        return value

    def spec(self) -> MetricSpec:
        return MetricSpec(self.name, self.unit, Direction(self.direction), self.description)


class SearchSpace(Strict):
    """A search space: model family and arch parameters, deployment stack, free parameters,
    objectives, constraints. It has a model family, free parameters, or both."""

    name: str = Field(pattern=NAME_PATTERN, description="Name of the space.")
    description: str = Field(default="", description="What the space explores.")
    model: ModelSpec | None = Field(
        default=None, description="Model family and architecture parameters; none for a space of "
                                  "free parameters only (custom evaluator or replay device).")
    parameters: dict[str, ParamSpec] = Field(
        default_factory=dict,
        description="Free parameters, handed to a custom evaluator or matched in a replay table: "
                    "a list of choices or a {low, high} range each.")
    training: TrainingSpec = Field(default_factory=TrainingSpec,
                                   description="Accuracy training settings.")
    deployment: DeploymentSpec | None = Field(
        default=None, description="Backends, precisions and batch sizes; required with a model.")
    metrics: list[MetricDeclaration] = Field(
        default_factory=list,
        description="Metrics a custom evaluator or replay table reports beyond the built-in "
                    "table; objectives and constraints may name them.")
    objectives: list[ObjectiveSpec] = Field(
        min_length=1, description="Metrics to optimise; directions come from the metrics table "
                                  "or the metric's declaration.")
    constraints: list[ConstraintSpec] = Field(
        default_factory=list, description="Bounds a feasible candidate must meet.")

    @model_validator(mode="wrap")
    @classmethod
    def _declared_metrics_count(cls, data: Any,
                                handler: ModelWrapValidatorHandler[SearchSpace]) -> SearchSpace:
        token = _DECLARED_NAMES.set(_declared_names(data))
        try:
            return handler(data)
        finally:
            _DECLARED_NAMES.reset(token)

    @field_validator("parameters")
    @classmethod
    def _parameter_names(cls, value: dict[str, ParamSpec]) -> dict[str, ParamSpec]:
        for key in value:
            if not re.match(IDENTIFIER, key):
                raise ValueError(f"free parameter name {key!r} must be a Python identifier "
                                 f"(letters, digits, _)")
            if key in RESERVED_PARAMETER_NAMES:
                raise ValueError(f"free parameter name {key!r} is reserved; reserved: "
                                 f"{', '.join(sorted(RESERVED_PARAMETER_NAMES))}")
        return value

    @field_validator("constraints")
    @classmethod
    def _consistent(cls, value: list[ConstraintSpec]) -> list[ConstraintSpec]:
        # The tightest lower and upper bound of each metric must leave some value feasible.
        for name in dict.fromkeys(c.metric for c in value):
            lows = [c for c in value if c.metric == name and c.op == ">="]
            highs = [c for c in value if c.metric == name and c.op == "<="]
            if lows and highs:
                low = max(lows, key=lambda c: c.value)
                high = min(highs, key=lambda c: c.value)
                if low.value > high.value:
                    raise ValueError(f"constraints '{low}' and '{high}' contradict: no value of "
                                     f"{name} meets both")
        return value

    @model_validator(mode="after")
    def _distinct_objectives(self) -> SearchSpace:
        names = [o.metric for o in self.objectives]
        if len(set(names)) != len(names):
            raise ValueError(f"objectives repeat a metric: {names}")
        declared = [m.name for m in self.metrics]
        if len(set(declared)) != len(declared):
            raise ValueError(f"metrics declare a name twice: {declared}")
        if self.model is None and not self.parameters:
            raise ValueError("a search space needs a model (family and arch) or free parameters "
                             "(parameters:), or both")
        if self.model is not None and self.deployment is None:
            raise ValueError("a space with a model needs deployment: backends, precisions and "
                             "batch_sizes to measure it with")
        return self

    def metric_specs(self) -> list[MetricSpec]:
        """The metrics this space declares, as metric-table rows."""
        return [m.spec() for m in self.metrics]


def _declared_names(data: Any) -> frozenset[str]:
    """Names under ``metrics:`` of raw (or already validated) search-space data."""
    if isinstance(data, SearchSpace):
        return frozenset(m.name for m in data.metrics)
    entries = data.get("metrics") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return frozenset()
    return frozenset(e["name"] for e in entries if isinstance(e, dict) and isinstance(e.get("name"), str))


# One `telemetry:` entry, kept as plain data: a probe name, or {probe: {setting: value, ...}}.
TelemetryEntry = Union[ProbeName, dict[ProbeName, dict[str, object]]]  # noqa: UP007 - runtime Union


class _TelemetryRules:
    """Validation and JSON schema of a profile's `telemetry:` list (pydantic's hooks).

    Each entry's settings are checked against those its probe declares, which live with the probes
    (``dse.measure.telemetry.entries``) and are imported on first need: a plain name is checked
    here, so loading a profile without settings does not load the measurement stack.
    """

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: object) -> object:
        from pydantic_core import core_schema

        entry = core_schema.no_info_plain_validator_function(_telemetry_entry)
        return core_schema.no_info_after_validator_function(_each_probe_once,
                                                            core_schema.list_schema(entry))

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: object, handler: object) -> dict[str, object]:
        from dse.measure.telemetry.entries import entries_json_schema

        return entries_json_schema()


def _telemetry_entry(entry: object) -> object:
    from typing import get_args

    if isinstance(entry, str) and entry in get_args(ProbeName):
        return entry
    from dse.measure.telemetry.entries import checked_entry

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


class SamplerSpec(Strict):
    """The Optuna sampler that proposes candidates."""

    name: SamplerName = Field(
        default="tpe",
        description="Sampler: tpe (multi-objective TPE), nsga2, nsga3 (genetic), gp (Gaussian "
                    "process, constrained multi-objective), random, or grid (every combination "
                    "of a small space once; ranges need a step).")
    seed: int = Field(default=0, ge=0, description="Sampler seed.")
    startup_trials: int = Field(default=10, ge=1,
                                description="Random trials before tpe or gp kicks in.")
    population_size: int | None = Field(
        default=None, ge=2,
        description="Trials per generation of nsga2/nsga3 (none: Optuna's default of 50); keep "
                    "it well under the budget, or the search never leaves its random first "
                    "generation (benchmarks/search_efficiency.py: about 16 suits budgets of "
                    "100-150).")


_WARM_START_WORDS = {"auto": {}, "off": {"enabled": False}}


class WarmStartSpec(Strict):
    """Seeding a device's new study with the feasible Pareto front of another device's study of
    the campaign (in the same storage). Written ``auto``, ``off``, or ``{from: <profile>,
    max_trials: N}``."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_by_name=True,
                              validate_by_alias=True)

    enabled: bool = Field(default=True, description="Seed new studies at all (off: false).")
    source: str | None = Field(
        default=None, alias="from", pattern=NAME_PATTERN,
        description="Device profile whose study seeds the others (none: the study with the most "
                    "completed trials).")
    max_trials: int | None = Field(
        default=None, ge=1,
        description="At most this many seeded trials per study (none: half the budget).")

    @model_validator(mode="before")
    @classmethod
    def _words(cls, data: object) -> object:
        # YAML 1.1 reads a bare `off` as false and `on` as true.
        if isinstance(data, bool):
            data = "auto" if data else "off"
        if isinstance(data, str):
            if data not in _WARM_START_WORDS:
                raise ValueError(f"warm_start must be auto, off or {{from: <profile>, "
                                 f"max_trials: N}}, got {data!r}")
            return _WARM_START_WORDS[data]
        return data

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: Any) -> Any:
        return {"anyOf": [{"enum": list(_WARM_START_WORDS), "type": "string"}, handler(schema)]}


class ScreeningSpec(Strict):
    """Multi-fidelity measurement: a short screening timing for every candidate; the full
    protocol only for those that could still enter the device's noise-aware front."""

    enabled: bool = Field(default=False, description="Screen candidates before the full protocol.")
    target_rel_ci: float = Field(
        default=0.05, gt=0, lt=1,
        description="Screening stops once the 95% CI of the median is within ± this fraction.")
    max_seconds: float = Field(default=0.5, gt=0,
                               description="Most seconds of screening timing per candidate.")
    margin: float = Field(
        default=0.05, ge=0, lt=1,
        description="Optimism for metrics measured without a confidence interval (memory, "
                    "energy, throughput): a screened value counts as this fraction better.")


class SearchSpec(Strict):
    """How the search spends device time across devices and measurement fidelities."""

    warm_start: WarmStartSpec = Field(
        default_factory=WarmStartSpec,
        description="auto, off, or {from: <profile>, max_trials: N}: seed a device's new study "
                    "with another device's front.")
    screening: ScreeningSpec = Field(default_factory=ScreeningSpec,
                                     description="Screening measurement before the full one.")


class BaselineSpec(Strict):
    """The user's current configuration: measured first on every device that can run it, and
    the reference every trial is reported against. It names a value for each parameter of the
    search space, as the space groups them; every value must lie in the space."""

    arch: dict[str, Scalar] = Field(
        default_factory=dict,
        description="A value for every architecture parameter of the space (spaces with a model).")
    backend: BackendName | None = Field(
        default=None, description="Backend of the current deployment (spaces with a deployment).")
    precision: Precision | None = Field(
        default=None, description="Precision of the current deployment (spaces with a deployment).")
    batch_size: int | None = Field(
        default=None, ge=1, le=65536,
        description="Batch size of the current deployment (spaces with a deployment).")
    knobs: dict[str, Scalar] = Field(
        default_factory=dict,
        description="A value for every knob the space searches for this backend.")
    params: dict[str, Scalar] = Field(
        default_factory=dict,
        description="A value for every free parameter of the space (spaces with parameters:).")


class BudgetSpec(Strict):
    """When the campaign stops."""

    trials: int = Field(ge=1, le=1_000_000, description="Completed trials the campaign aims for.")
    max_failed: int = Field(default=50, ge=1,
                            description="Stop, with an error, after this many failed or "
                                        "infeasible trials in one run.")
    trial_timeout_s: float = Field(default=600.0, gt=0,
                                   description="A trial still running after this is failed.")


class InterferenceSpec(Strict):
    """What a measurement window may share with other work on its device, and what to do when it
    shared more (figures from the ``cpu_interference`` probe, which runs in every window, and on
    an NVIDIA GPU from the ``gpu_interference`` probe)."""

    max_foreign_cpu_pct: float = Field(
        default=20.0, ge=0, le=100, allow_inf_nan=False,
        description="Most CPU time other processes may use in a window, as a share of all the "
                    "CPUs' time in it (interference_cpu_pct), once they took CPU from the "
                    "measurement (max_cpu_wait_pct).")
    max_cpu_wait_pct: float = Field(
        default=5.0, ge=0, le=100, allow_inf_nan=False,
        description="Other processes beyond max_foreign_cpu_pct disturb a window only when the "
                    "measuring process's threads also waited for a CPU longer than this share "
                    "of their runnable time (cpu_wait_pct): work on free cores beside the "
                    "measurement is not interference. Measured on a 2-core VM: 0.1% beside one "
                    "busy loop on the other core, 45% with two.")
    max_steal_pct: float = Field(
        default=5.0, ge=0, le=100, allow_inf_nan=False,
        description="Most time the hypervisor may give the CPUs to other guests (steal_pct).")
    max_gpu_foreign_pct: float = Field(
        default=5.0, ge=0, le=100, allow_inf_nan=False,
        description="Most of the NVIDIA GPU's SMs other processes may use in a window "
                    "(gpu_foreign_pct).")
    max_gpu_foreign_processes: int = Field(
        default=0, ge=0,
        description="Most other processes that may hold a compute context on the NVIDIA GPU at "
                    "once during a window (gpu_foreign_processes).")
    action: Literal["remeasure", "flag", "ignore"] = Field(
        default="remeasure",
        description="remeasure: wait, then time the candidate again, up to max_remeasures times, "
                    "and flag it disturbed if it never ran clean; flag: flag it at once; ignore: "
                    "record the figures only.")
    max_remeasures: int = Field(
        default=2, ge=0, le=10,
        description="Re-measurements at most of a window that was disturbed or unstable (its "
                    "halves' medians more than 5% apart), with action remeasure.")
    wait_s: float = Field(default=1.0, ge=0, le=60, allow_inf_nan=False,
                          description="Seconds to wait before re-measuring, for the other work "
                                      "to pass.")


class MeasureSpec(Strict):
    """How each candidate is timed: adaptive single-stream latency, optional offline and
    sustained runs."""

    target_rel_ci: float = Field(
        default=0.01, gt=0, lt=1,
        description="Stop once the 95% CI of the median is within ± this fraction of it.")
    min_iters: int = Field(default=30, ge=1, description="Fewest timed iterations (a floor).")
    max_iters: int = Field(default=1_000_000, ge=1, description="Most timed iterations (a cap).")
    min_seconds: float = Field(default=0.2, ge=0, allow_inf_nan=False,
                               description="Fewest seconds of timing.")
    max_seconds: float = Field(
        default=5.0, gt=0, allow_inf_nan=False,
        description="Most seconds of timing (a cap: a run it stops below a floor is "
                    "underpowered).")
    warmup_max_seconds: float = Field(
        default=1.0, ge=0, allow_inf_nan=False,
        description="Cap on the warm-up that runs until the median settles.")
    percentiles: list[PercentileName] | None = Field(
        default=None,
        description="Latency percentiles each run must give a 95% confidence interval (a floor "
                    "on samples: p99 needs at least 368, p999 3688); a percentile without one "
                    "is reported missing, never as a value. Default: p50 and every percentile "
                    "an objective or constraint uses.")
    blocks: int = Field(
        default=3, ge=1, le=50,
        description="Independent blocks each candidate is timed in, each warmed up afresh and "
                    "given an equal share of the floors and caps; every reported interval also "
                    "holds how much the blocks disagree (between_run_cv), which is what the next "
                    "run sees. 1: one block, within-run intervals only.")
    block_gap_s: float = Field(
        default=0.0, ge=0, le=60, allow_inf_nan=False,
        description="Seconds between blocks, spent calling the candidate untimed (the device stays "
                    "under the same load): spreads the blocks in time, so the intervals also hold "
                    "what drifts over that time, at that cost per candidate.")
    run_to_run: Literal["auto", "off"] = Field(
        default="auto",
        description="auto: where `dse calibrate` measured this device's run-to-run variation, "
                    "every interval is at least as wide as it (what a later run of the same "
                    "candidate would see); off: intervals from the run alone.")
    offline_concurrency: int = Field(
        default=0, ge=0, le=256,
        description="Requests kept in flight for the offline throughput run (0: no such run).")
    offline_seconds: float = Field(default=1.0, gt=0, allow_inf_nan=False,
                                   description="Length of the offline throughput run.")
    interference: InterferenceSpec = Field(
        default_factory=InterferenceSpec,
        description="Detecting other work during a window, and re-measuring or flagging it.")
    non_ok_on_front: bool = Field(
        default=False,
        description="Let trials whose measurement is not clean (measurement_quality "
                    "disturbed, underpowered or unstable) onto the reported front; by default "
                    "they are kept in every table, shown apart, and off the front.")
    sustained_seconds: float = Field(
        default=0.0, ge=0, allow_inf_nan=False,
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
        # Here, not at the top: the statistics import scipy, which loading a spec should not.
        from dse.measure.stats import percentile_quantile, samples_for_ci

        if self.blocks > self.max_iters:
            raise ValueError(f"`blocks <= max_iters` must hold, got {self.blocks}, "
                             f"{self.max_iters}")
        for name in self.percentiles or []:
            needed = samples_for_ci(percentile_quantile(name))
            if needed > self.max_iters:
                raise ValueError(f"max_iters = {self.max_iters} can never give {name} a 95% "
                                 f"confidence interval (that needs at least {needed} samples)")
        return self

    def for_metrics(self, names: Sequence[str]) -> MeasureSpec:
        """This spec with :attr:`percentiles` filled in where unset: p50 and every latency
        percentile (or its CI bound) among ``names``, the campaign's objectives and constraints."""
        if self.percentiles is not None:
            return self
        used: list[PercentileName] = ["p50"]
        for name in names:
            match = _PERCENTILE_METRIC.match(name)
            if match and match["p"] not in used:
                used.append(match["p"])  # type: ignore[arg-type]
        return self.model_copy(update={"percentiles": used})

    def required_quantiles(self) -> tuple[float, ...]:
        """The quantiles of :attr:`percentiles` (p50 alone where none are set)."""
        from dse.measure.stats import percentile_quantile

        return tuple(percentile_quantile(name) for name in self.percentiles or ["p50"])


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
    evaluator: EvaluatorRef | None = Field(
        default=None,
        description="A custom evaluator, module:function, that measures the candidates of every "
                    "device but replay ones instead of the farm: function(candidate) -> "
                    "{metric: value}. The module must be importable.")
    sampler: SamplerSpec = Field(default_factory=SamplerSpec, description="Sampler settings.")
    search: SearchSpec = Field(default_factory=SearchSpec,
                               description="Warm start across devices and screening.")
    baseline: BaselineSpec | None = Field(
        default=None,
        description="The current configuration, measured first and reported against (none: no "
                    "baseline).")
    budget: BudgetSpec = Field(description="Trial budget.")
    measurement: MeasureSpec = Field(default_factory=MeasureSpec,
                                     description="Latency sampling settings.")
    farm: FarmSpec = Field(default_factory=FarmSpec,
                           description="Device farm address and fault handling.")
    storage: str = Field(
        default="sqlite",
        description="Where the campaign's study lives: sqlite (study.db in the run folder, the "
                    "default), journal (Optuna's journal file, study.journal in the run folder), "
                    "postgresql://USER@HOST[:PORT]/DATABASE (a server shared by a team; the "
                    "password from PGPASSWORD or ~/.pgpass, never in this file), or env:NAME (an "
                    "environment variable holding such a URL).")
    runs_dir: Path = Field(default=Path("runs"),
                           description="Where run folders go, relative to this file.")
    dashboards_dir: Path = Field(default=Path("../dashboards"),
                                 description="Where the dashboard goes, relative to this file.")
    cache_dir: Path | None = Field(
        default=None,
        description="Build cache (trained weights, artifacts), relative to this file; campaigns "
                    "and farm workers that name the same folder share it. Default: the run "
                    "folder's cache/.")

    @field_validator("storage")
    @classmethod
    def _storage_form(cls, value: str) -> str:
        from dse.storage import STORAGE_FORMS, setting_problem

        problem = setting_problem(value)
        if problem is not None:
            raise ValueError(f"{problem}; allowed: {STORAGE_FORMS}")
        return value
