"""dse: hardware-aware design-space exploration and neural architecture search.

``import dse`` stays light: the API is loaded on first use of one of its names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.core.version import __version__

_API = {
    "load_experiment": "dse.app.api",
    "validate_files": "dse.app.api",
    "run_campaign": "dse.app.api",
    "write_report": "dse.app.api",
    "CampaignResult": "dse.app.api",
    "calibrate": "dse.app.calibration",
    "DeviceCalibration": "dse.app.calibration",
    "profile": "dse.app.trial_profile",
    "TrialProfile": "dse.app.trial_profile",
    "export": "dse.app.bundle_export",
    "ExportedBundle": "dse.app.bundle_export",
    "verify": "dse.app.bundle_verify",
    "VerifyReport": "dse.app.bundle_verify",
    "Candidate": "dse.core.candidate",
    "Measurement": "dse.core.measurement",
    "METRICS": "dse.core.metrics",
    "MetricSpec": "dse.core.metrics",
    "measure_latency": "dse.measure.harness",
    "measure_offline": "dse.measure.scenarios",
    "LatencyStats": "dse.measure.stats",
    "pareto_mask": "dse.search.pareto",
    "pareto_front": "dse.search.pareto",
    "hypervolume": "dse.search.pareto",
    "hypervolume_history": "dse.search.pareto",
    "noise_aware_mask": "dse.search.pareto",
    "InfeasibleCandidate": "dse.search.evaluators.dispatchers",
    "ReplayEvaluator": "dse.search.evaluators.dispatchers",
    "DseError": "dse.core.exceptions",
    "SpecError": "dse.core.exceptions",
    "DeployedModel": "dse.accuracy.user_evaluator",
    "graph_stats": "dse.models.graph_stats",
    "GraphStats": "dse.models.graph_stats",
    "CampaignStorage": "dse.storage",
    "load_campaign": "dse.results.run_files",
    "list_parts": "dse.app.catalog",
    "markdown_table": "dse.app.catalog",
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
    from dse.accuracy.user_evaluator import DeployedModel
    from dse.app.api import (
        CampaignResult,
        load_experiment,
        run_campaign,
        validate_files,
        write_report,
    )
    from dse.app.bundle_export import ExportedBundle, export
    from dse.app.bundle_verify import VerifyReport, verify
    from dse.app.calibration import DeviceCalibration, calibrate
    from dse.app.catalog import list_parts, markdown_table
    from dse.app.trial_profile import TrialProfile, profile
    from dse.core.candidate import Candidate
    from dse.core.exceptions import DseError, SpecError
    from dse.core.measurement import Measurement
    from dse.core.metrics import METRICS, MetricSpec
    from dse.measure.harness import measure_latency
    from dse.measure.scenarios import measure_offline
    from dse.measure.stats import LatencyStats
    from dse.models.graph_stats import GraphStats, graph_stats
    from dse.results.run_files import load_campaign
    from dse.search.evaluators.dispatchers import InfeasibleCandidate, ReplayEvaluator
    from dse.search.pareto import (
        hypervolume,
        hypervolume_history,
        noise_aware_mask,
        pareto_front,
        pareto_mask,
    )
    from dse.storage import CampaignStorage


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
