"""YAML specs: search spaces, hardware profiles, experiments."""

from dse.spec.loading import (
    KINDS,
    Experiment,
    guess_kind,
    load_experiment_files,
    load_model,
    read_yaml,
    write_schemas,
)
from dse.spec.models import (
    BackendSpec,
    ConstraintSpec,
    DeploymentSpec,
    ExperimentSpec,
    FarmSpec,
    HardwareProfile,
    MeasureSpec,
    ModelSpec,
    ObjectiveSpec,
    RangeParam,
    SamplerSpec,
    SearchSpace,
    TrainingSpec,
)

__all__ = [
    "KINDS",
    "BackendSpec",
    "ConstraintSpec",
    "DeploymentSpec",
    "Experiment",
    "ExperimentSpec",
    "FarmSpec",
    "HardwareProfile",
    "MeasureSpec",
    "ModelSpec",
    "ObjectiveSpec",
    "RangeParam",
    "SamplerSpec",
    "SearchSpace",
    "TrainingSpec",
    "guess_kind",
    "load_experiment_files",
    "load_model",
    "read_yaml",
    "write_schemas",
]
