"""dse: hardware-aware design-space exploration and neural architecture search.

``import dse`` stays light: the API is loaded on first use of one of its names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.version import __version__

_API = {
    "load_experiment": "dse.api",
    "validate_files": "dse.api",
    "run_campaign": "dse.api",
    "write_report": "dse.api",
    "CampaignResult": "dse.api",
    "calibrate": "dse.calibration",
    "DeviceCalibration": "dse.calibration",
    "profile": "dse.trial_profile",
    "TrialProfile": "dse.trial_profile",
    "export": "dse.bundle_export",
    "ExportedBundle": "dse.bundle_export",
    "verify": "dse.bundle_verify",
    "VerifyReport": "dse.bundle_verify",
    "Candidate": "dse.candidate",
    "Measurement": "dse.measurement",
    "METRICS": "dse.metrics",
    "MetricSpec": "dse.metrics",
    "measure_latency": "dse.measure.harness",
    "measure_offline": "dse.measure.scenarios",
    "LatencyStats": "dse.measure.stats",
    "pareto_mask": "dse.search.pareto",
    "pareto_front": "dse.search.pareto",
    "hypervolume": "dse.search.pareto",
    "hypervolume_history": "dse.search.pareto",
    "noise_aware_mask": "dse.search.pareto",
    "InfeasibleCandidate": "dse.search.evaluators",
    "ReplayEvaluator": "dse.search.evaluators",
    "DseError": "dse.exceptions",
    "SpecError": "dse.exceptions",
    "DeployedModel": "dse.quality.user_evaluator",
    "graph_stats": "dse.models.graph_stats",
    "GraphStats": "dse.models.graph_stats",
    "CampaignStorage": "dse.storage",
    "load_campaign": "dse.results.export",
    "list_parts": "dse.catalog",
    "markdown_table": "dse.catalog",
}

__all__ = [
    "METRICS",
    "CampaignResult",
    "CampaignStorage",
    "Candidate",
    "DeployedModel",
    "DeviceCalibration",
    "DseError",
    "ExportedBundle",
    "GraphStats",
    "InfeasibleCandidate",
    "LatencyStats",
    "Measurement",
    "MetricSpec",
    "ReplayEvaluator",
    "SpecError",
    "TrialProfile",
    "VerifyReport",
    "__version__",
    "calibrate",
    "export",
    "graph_stats",
    "hypervolume",
    "hypervolume_history",
    "list_parts",
    "load_campaign",
    "load_experiment",
    "markdown_table",
    "measure_latency",
    "measure_offline",
    "noise_aware_mask",
    "pareto_front",
    "pareto_mask",
    "profile",
    "run_campaign",
    "validate_files",
    "verify",
    "write_report",
]

if TYPE_CHECKING:
    from dse.api import (
        CampaignResult,
        load_experiment,
        run_campaign,
        validate_files,
        write_report,
    )
    from dse.bundle_export import ExportedBundle, export
    from dse.bundle_verify import VerifyReport, verify
    from dse.calibration import DeviceCalibration, calibrate
    from dse.candidate import Candidate
    from dse.catalog import list_parts, markdown_table
    from dse.exceptions import DseError, SpecError
    from dse.measure.harness import measure_latency
    from dse.measure.scenarios import measure_offline
    from dse.measure.stats import LatencyStats
    from dse.measurement import Measurement
    from dse.metrics import METRICS, MetricSpec
    from dse.models.graph_stats import GraphStats, graph_stats
    from dse.quality.user_evaluator import DeployedModel
    from dse.results.export import load_campaign
    from dse.search.evaluators import InfeasibleCandidate, ReplayEvaluator
    from dse.search.pareto import (
        hypervolume,
        hypervolume_history,
        noise_aware_mask,
        pareto_front,
        pareto_mask,
    )
    from dse.storage import CampaignStorage
    from dse.trial_profile import TrialProfile, profile


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'dse' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    # The lazy loader above resolves these on first use; without this, dir(dse) would list only
    # what this module imported itself.
    return sorted(set(globals()) | set(__all__))
