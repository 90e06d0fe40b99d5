"""dse: hardware-aware design-space exploration and neural architecture search.

``import dse`` stays light: the API is loaded on first use of one of its names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.core import __version__ as __version__
from dse.util import lazy_names

if TYPE_CHECKING:
    from dse.accuracy.user_evaluator import DeployedModel as DeployedModel
    from dse.app.api import CampaignResult as CampaignResult
    from dse.app.api import load_experiment as load_experiment
    from dse.app.api import run_campaign as run_campaign
    from dse.app.api import validate_files as validate_files
    from dse.app.api import write_report as write_report
    from dse.app.bundle_export import ExportedBundle as ExportedBundle
    from dse.app.bundle_export import export as export
    from dse.app.bundle_verify import VerifyReport as VerifyReport
    from dse.app.bundle_verify import verify as verify
    from dse.app.calibration import DeviceCalibration as DeviceCalibration
    from dse.app.calibration import calibrate as calibrate
    from dse.app.catalog import list_parts as list_parts
    from dse.app.catalog import markdown_table as markdown_table
    from dse.app.trial_profile import TrialProfile as TrialProfile
    from dse.app.trial_profile import profile as profile
    from dse.core.candidate import Candidate as Candidate
    from dse.core.exceptions import DseError as DseError
    from dse.core.exceptions import SpecError as SpecError
    from dse.core.measurement import Measurement as Measurement
    from dse.core.metrics import METRICS as METRICS
    from dse.core.metrics import MetricSpec as MetricSpec
    from dse.measure.harness import measure_latency as measure_latency
    from dse.measure.scenarios import measure_offline as measure_offline
    from dse.measure.stats import LatencyStats as LatencyStats
    from dse.models.graph_statistics import GraphStats as GraphStats
    from dse.models.graph_statistics import graph_stats as graph_stats
    from dse.results.run_files import load_campaign as load_campaign
    from dse.search.evaluators.dispatchers import InfeasibleCandidate as InfeasibleCandidate
    from dse.search.evaluators.dispatchers import ReplayEvaluator as ReplayEvaluator
    from dse.search.pareto import hypervolume as hypervolume
    from dse.search.pareto import hypervolume_history as hypervolume_history
    from dse.search.pareto import noise_aware_mask as noise_aware_mask
    from dse.search.pareto import pareto_front as pareto_front
    from dse.search.pareto import pareto_mask as pareto_mask
    from dse.storage import CampaignStorage as CampaignStorage

# The public API: each name loads its module on first use (see dse.util.faces).
_NAMES = {
    "CampaignResult": "dse.app.api",
    "CampaignStorage": "dse.storage",
    "Candidate": "dse.core.candidate",
    "DeployedModel": "dse.accuracy.user_evaluator",
    "DeviceCalibration": "dse.app.calibration",
    "DseError": "dse.core.exceptions",
    "ExportedBundle": "dse.app.bundle_export",
    "GraphStats": "dse.models.graph_statistics",
    "InfeasibleCandidate": "dse.search.evaluators.dispatchers",
    "LatencyStats": "dse.measure.stats",
    "METRICS": "dse.core.metrics",
    "Measurement": "dse.core.measurement",
    "MetricSpec": "dse.core.metrics",
    "ReplayEvaluator": "dse.search.evaluators.dispatchers",
    "SpecError": "dse.core.exceptions",
    "TrialProfile": "dse.app.trial_profile",
    "VerifyReport": "dse.app.bundle_verify",
    "calibrate": "dse.app.calibration",
    "export": "dse.app.bundle_export",
    "graph_stats": "dse.models.graph_statistics",
    "hypervolume": "dse.search.pareto",
    "hypervolume_history": "dse.search.pareto",
    "list_parts": "dse.app.catalog",
    "load_campaign": "dse.results.run_files",
    "load_experiment": "dse.app.api",
    "markdown_table": "dse.app.catalog",
    "measure_latency": "dse.measure.harness",
    "measure_offline": "dse.measure.scenarios",
    "noise_aware_mask": "dse.search.pareto",
    "pareto_front": "dse.search.pareto",
    "pareto_mask": "dse.search.pareto",
    "profile": "dse.app.trial_profile",
    "run_campaign": "dse.app.api",
    "validate_files": "dse.app.api",
    "verify": "dse.app.bundle_verify",
    "write_report": "dse.app.api",
}
__all__ = sorted([*_NAMES, "__version__"])
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
