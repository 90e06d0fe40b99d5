"""The building blocks of the YAML models: names of registered parts (checked against their
registries, with JSON-schema enums read from them), closed name sets, the strict base model, searched
parameters (choices or ranges) and ``module:function`` references."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    model_validator,
)

from dse.plugins import BackendDeviceKind
from dse.plugins import Precision as Precision
from dse.spec.near_names import allowed_hint


class _RegisteredNames:
    """Pydantic's hooks for a field naming a registered part: checked against ``kind_names()``
    (the registry, filled on first use: built-in parts and ``$DSE_PLUGINS``), with a JSON-schema
    enum of the names read when the schema is written."""

    def __init__(self, kind_names: Callable[[], tuple[str, ...]]) -> None:
        self.kind_names = kind_names

    def check(self, name: str) -> str:
        names = self.kind_names()
        if name not in names:
            shown = repr(name) if len(name) <= 60 else repr(name[:57] + "...")
            raise ValueError(f"found {shown}; {allowed_hint(name, names)}")
        return name

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict[str, Any]:
        schema: dict[str, Any] = handler(core_schema)
        schema["enum"] = list(self.kind_names())
        return schema


def _backend_names() -> tuple[str, ...]:
    from dse.plugins import backend_names

    return backend_names()


def _probe_names() -> tuple[str, ...]:
    from dse.plugins import probe_names

    return probe_names()


def _family_names() -> tuple[str, ...]:
    from dse.plugins import family_names

    return family_names()


def _dataset_names() -> tuple[str, ...]:
    from dse.plugins import dataset_names

    return dataset_names()


def _sampler_names() -> tuple[str, ...]:
    from dse.plugins import sampler_names

    return sampler_names()


_BACKENDS = _RegisteredNames(_backend_names)
_SAMPLERS = _RegisteredNames(_sampler_names)
_PROBES = _RegisteredNames(_probe_names)
_FAMILIES = _RegisteredNames(_family_names)
_DATASETS = _RegisteredNames(_dataset_names)
BackendName = Annotated[str, AfterValidator(_BACKENDS.check), _BACKENDS]
SamplerName = Annotated[str, AfterValidator(_SAMPLERS.check), _SAMPLERS]
ProbeName = Annotated[str, AfterValidator(_PROBES.check), _PROBES]
FamilyName = Annotated[str, AfterValidator(_FAMILIES.check), _FAMILIES]
DatasetName = Annotated[str, AfterValidator(_DATASETS.check), _DATASETS]
# A replay device (a recorded table) runs no backend: the one kind beside the backends' own.
DeviceKind = Literal[BackendDeviceKind, "replay"]
PercentileName = Literal["p50", "p90", "p95", "p99", "p999"]
# latency_p99_ms, latency_p99_ci_low_ms, ...: the metrics that need a percentile's samples.
PERCENTILE_METRIC = re.compile(r"^latency_(?P<p>p50|p90|p95|p99|p999)_")
# ttft_p99_ms, tpot_p50_ci_low_ms, ...: a generative model's percentiles (dse.measure.generation).
GENERATION_PERCENTILE_METRIC = re.compile(r"^(ttft|tpot|e2e)_(?P<p>p50|p99)_")

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
