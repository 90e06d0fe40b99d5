"""The registries of dse's pluggable parts (:mod:`dse.plugins.registry`) and what each kind of part
declares (:mod:`dse.plugins.backends`). Just above the contracts: imports nothing of dse but
:mod:`dse.core`; the parts register themselves from their own modules."""

from dse.plugins.backends import (
    BACKEND_DECLARATIONS,
    BUILT_FORMATS,
    DEVICE_KINDS,
    PRECISIONS,
    ArtifactFormat,
    BackendDeclaration,
    BackendDeviceKind,
    Capability,
    Conversion,
    ConversionRequest,
    Precision,
    Standalone,
    backend_names,
    backends_loading,
    capability,
    declaration,
    generation_capability,
    is_converted,
)
from dse.plugins.datasets import (
    DATASETS,
    DatasetDeclaration,
    dataset_names,
    dataset_problem,
    dataset_sample_shape,
    register_dataset,
)
from dse.plugins.families import FAMILIES, family_names
from dse.plugins.probes import PROBES, probe_names, register_probe
from dse.plugins.proxies import PROXIES, ProxyDeclaration, register_proxy
from dse.plugins.registry import Registry
from dse.plugins.samplers import (
    SAMPLERS,
    SamplerDeclaration,
    SamplerSettings,
    register_sampler,
    sampler_names,
)

__all__ = [
    "BACKEND_DECLARATIONS",
    "BUILT_FORMATS",
    "DATASETS",
    "DEVICE_KINDS",
    "FAMILIES",
    "PRECISIONS",
    "PROBES",
    "PROXIES",
    "SAMPLERS",
    "ArtifactFormat",
    "BackendDeclaration",
    "BackendDeviceKind",
    "Capability",
    "Conversion",
    "ConversionRequest",
    "DatasetDeclaration",
    "Precision",
    "ProxyDeclaration",
    "Registry",
    "SamplerDeclaration",
    "SamplerSettings",
    "Standalone",
    "backend_names",
    "backends_loading",
    "capability",
    "dataset_names",
    "dataset_problem",
    "dataset_sample_shape",
    "declaration",
    "family_names",
    "generation_capability",
    "is_converted",
    "probe_names",
    "register_dataset",
    "register_probe",
    "register_proxy",
    "register_sampler",
    "sampler_names",
]
