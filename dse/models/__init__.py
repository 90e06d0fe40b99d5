"""Model families: arch parameters -> ``torch.nn.Module``.

Importing this package imports no torch; the families register themselves when the registry is
first read (:mod:`dse.plugins.families`).
"""

from dse.models.checks import model_problems
from dse.models.family import FAMILIES, ModelFamily, get_family, register_family
from dse.models.file_hash import file_sha256
from dse.models.graph_statistics import GraphStats, NodeCost, graph_stats, node_costs
from dse.models.llm import (
    LLM_PREFIX,
    LanguageModel,
    checked_arch,
    is_llm_source,
    llm_candidate_source,
    load_language_model,
    weights_key,
)
from dse.models.llm_folder import save_hf_folder
from dse.models.onnx_file import onnx_input
from dse.models.op_costs import FUSED_BASE_OPS, TypedShape, cost_from_shapes
from dse.models.output_check import CHECK_SECONDS, space_output_problems
from dse.models.sources import (
    FACTORY_PREFIX,
    ModelSource,
    candidate_source,
    is_onnx_source,
    load_function,
    model_source,
    source_dataset,
)
from dse.models.transformer import FEATURES, NUM_CLASSES

__all__ = [
    "CHECK_SECONDS",
    "FACTORY_PREFIX",
    "FAMILIES",
    "FEATURES",
    "FUSED_BASE_OPS",
    "LLM_PREFIX",
    "NUM_CLASSES",
    "GraphStats",
    "LanguageModel",
    "ModelFamily",
    "ModelSource",
    "NodeCost",
    "TypedShape",
    "candidate_source",
    "checked_arch",
    "cost_from_shapes",
    "file_sha256",
    "get_family",
    "graph_stats",
    "is_llm_source",
    "is_onnx_source",
    "llm_candidate_source",
    "load_function",
    "load_language_model",
    "model_problems",
    "model_source",
    "node_costs",
    "onnx_input",
    "register_family",
    "save_hf_folder",
    "source_dataset",
    "space_output_problems",
    "weights_key",
]
