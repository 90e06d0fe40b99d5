"""The pydantic models of the three YAML kinds — search space, hardware profile, experiment —
in one namespace (each kind's models live in their own module; this one only gathers them).

Every model forbids unknown keys, so a misspelt key is an error rather than a silently ignored line.
Names of pluggable parts (backends, probes, families, datasets, samplers) are checked against their
registries; which combinations a device can run is the capability table's business
(``dse.backends.capabilities``).
"""

from __future__ import annotations

from dse.spec.experiment_models import (
    BaselineSpec,
    BudgetSpec,
    ExperimentSpec,
    FarmSpec,
    InterferenceSpec,
    MeasureSpec,
    SamplerSpec,
    ScreeningSpec,
    SearchSpec,
    WarmStartSpec,
)
from dse.spec.fields import (
    NAME_PATTERN,
    BackendName,
    Choices,
    DatasetName,
    DeviceKind,
    EvaluatorRef,
    FamilyName,
    ParamSpec,
    PercentileName,
    Precision,
    ProbeName,
    RangeParam,
    SamplerName,
    Scalar,
    Strict,
    checked_values,
)
from dse.spec.llm_models import LlmSpec, WorkloadSpec
from dse.spec.profile_models import (
    HardwareProfile,
    TelemetryEntry,
)
from dse.spec.space_models import (
    IDENTIFIER,
    REPLAY_TABLE_SUFFIXES,
    RESERVED_PARAMETER_NAMES,
    BackendSpec,
    ConstraintSpec,
    DeploymentSpec,
    MetricDeclaration,
    ModelSpec,
    ObjectiveSpec,
    SearchSpace,
    TrainingSpec,
)

__all__ = [
    "IDENTIFIER",
    "NAME_PATTERN",
    "REPLAY_TABLE_SUFFIXES",
    "RESERVED_PARAMETER_NAMES",
    "BackendName",
    "BackendSpec",
    "BaselineSpec",
    "BudgetSpec",
    "Choices",
    "ConstraintSpec",
    "DatasetName",
    "DeploymentSpec",
    "DeviceKind",
    "EvaluatorRef",
    "ExperimentSpec",
    "FamilyName",
    "FarmSpec",
    "HardwareProfile",
    "InterferenceSpec",
    "LlmSpec",
    "MeasureSpec",
    "MetricDeclaration",
    "ModelSpec",
    "ObjectiveSpec",
    "ParamSpec",
    "PercentileName",
    "Precision",
    "ProbeName",
    "RangeParam",
    "SamplerName",
    "SamplerSpec",
    "Scalar",
    "ScreeningSpec",
    "SearchSpace",
    "SearchSpec",
    "Strict",
    "TelemetryEntry",
    "TrainingSpec",
    "WarmStartSpec",
    "WorkloadSpec",
    "checked_values",
]
