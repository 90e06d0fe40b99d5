"""The search space's models: the model source, training, deployment (backends, precisions, batch
sizes), objectives, constraints, declared metrics and the ``SearchSpace`` that holds them."""

from __future__ import annotations

import math
import re
from contextvars import ContextVar
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    ModelWrapValidatorHandler,
    field_validator,
    model_validator,
)

from dse.core import METRICS, RENAMED_METRICS, Direction, MetricSpec, current_metric_name, value_range
from dse.spec.fields import (
    NAME_PATTERN,
    BackendName,
    DatasetName,
    EvaluatorRef,
    FamilyName,
    ParamSpec,
    Precision,
    Strict,
)
from dse.spec.llm_models import LlmSpec, WorkloadSpec
from dse.spec.near_names import allowed_hint


class ModelSpec(Strict):
    """Where the models come from — a built-in family, the user's own torch factory, a fixed
    ONNX file, or a generative language model (exactly one) — and the architecture parameters
    searched."""

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
    llm: LlmSpec | None = Field(
        default=None,
        description="A generative (causal) language model: a GGUF file, a Hugging Face folder, "
                    "or a transformers config whose parameters arch searches; timed as requests "
                    "of the space's workload (docs/llm.md).")
    arch: dict[str, ParamSpec] = Field(
        default_factory=dict,
        description="Architecture parameters: a list of choices or a {low, high} range each.")

    @model_validator(mode="after")
    def _one_source(self) -> ModelSpec:
        given = [key for key in ("family", "factory", "onnx", "llm")
                 if getattr(self, key) is not None]
        if len(given) != 1:
            raise ValueError(f"a model needs exactly one of family, factory, onnx or llm; got "
                             f"{', '.join(given) or 'none'}")
        if self.llm is not None:
            if self.arch and self.llm.config is None:
                raise ValueError(f"a {self.llm.kind} language model has a fixed architecture: "
                                 f"remove arch, or build it from a config (llm.config)")
            if self.dataset is not None or self.evaluator is not None:
                raise ValueError("a language model is scored on dse's held-out text against its "
                                 "fp32 reference: remove dataset and evaluator")
        if self.onnx is not None and self.arch:
            raise ValueError("an onnx model has a fixed architecture: remove arch (search "
                             "precision, batch size and backend under deployment)")
        if self.input_shape is not None and self.factory is None:
            raise ValueError("input_shape is for a factory that returns only a module; a family "
                             "or an ONNX file knows its own")
        return self

    @property
    def source(self) -> str:
        """``family``, ``factory``, ``onnx`` or ``llm``."""
        return ("family" if self.family else "factory" if self.factory
                else "llm" if self.llm else "onnx")


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

    metric: str = Field(description="Metric name from dse.core.metrics (e.g. latency_p99_ms) or one "
                                    "the space declares under metrics:; a metric's former name "
                                    "is read as its current one.")

    @field_validator("metric")
    @classmethod
    def _known(cls, value: str) -> str:
        return _check_metric(value)


_CONSTRAINT_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=)\s*([-+0-9.eE]+)\s*$")


class ConstraintSpec(Strict):
    """A bound on a metric, written ``"process_rss_peak_mb <= 512"`` or as {metric, op, value}."""

    metric: str = Field(description="Metric name from dse.core.metrics or the space's metrics:; a "
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
    one, see ``dse.core.metrics.RENAMED_METRICS``); ValueError when no such metric exists."""
    name = current_metric_name(name)
    declared = _DECLARED_NAMES.get() - set(METRICS)
    if name not in METRICS and name not in declared:
        # The space's own metrics first: a near miss is likelier among them.
        hint = allowed_hint(name, [*sorted(declared), *sorted(METRICS)],
                            full_list=METRICS_LISTED_AT)
        raise ValueError(f"unknown metric {name!r}; {hint}")
    return name


# Where a user reads every metric name, for an error that lists only the first few.
METRICS_LISTED_AT = "dse list metrics, or docs/metrics.md"
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
            raise ValueError(f"metric {value!r} is built in (dse.core.metrics); declare only new "
                             f"metrics")
        if value in RENAMED_METRICS:
            raise ValueError(f"metric {value!r} is the former name of the built-in "
                             f"{RENAMED_METRICS[value]!r} (dse.core.metrics); declare only new "
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
    workload: WorkloadSpec | None = Field(
        default=None,
        description="The requests a language model (model.llm) is timed with: prompt and output "
                    "tokens, prompt set, requests; only with one (defaults when left out).")
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
        generative = self.model is not None and self.model.llm is not None
        if self.workload is not None and not generative:
            raise ValueError("workload times a language model's requests: it needs model.llm")
        self._slo_constraint()
        return self

    def _slo_constraint(self) -> None:
        """The workload's SLO as a constraint: ``goodput >= min_goodput`` unless the space
        constrains goodput itself; goodput named without an SLO is an error."""
        slo = self.workload.slo if self.workload is not None else None
        named = [c for c in self.constraints if c.metric == "goodput"] \
            + [o for o in self.objectives if o.metric == "goodput"]
        if slo is None:
            if named:
                raise ValueError("goodput is the share of requests within the workload's SLO: "
                                 "name one under workload.slo (a preset such as "
                                 "mlperf-llama2-70b-interactive, or ttft_ms and tpot_ms)")
            return
        if not any(c.metric == "goodput" for c in self.constraints):
            # The model is frozen; the derived constraint is set once, here, while it is built,
            # so that every reader of .constraints (the sampler, the front, the report) sees it.
            added = ConstraintSpec(metric="goodput", op=">=", value=slo.min_goodput)
            self.__dict__["constraints"] = [*self.constraints, added]

    @property
    def generative(self) -> bool:
        """Whether the space's model is a generative language model (``model.llm``)."""
        return self.model is not None and self.model.llm is not None

    @property
    def llm_workload(self) -> WorkloadSpec:
        """The workload a language model is timed with: the space's, else the defaults."""
        return self.workload or WorkloadSpec()

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
