"""Exported bundles (``dse export``, ``dse verify``): the bundle's layout and manifest, its
standalone ``run.py``, and the verdict of a verification against the recorded measurement. Plain
files and numbers: building and measuring happen on the device (``dse.trial``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.util import lazy_names

if TYPE_CHECKING:
    from dse.deploy.bundle_read import Bundle as Bundle
    from dse.deploy.bundle_read import read_bundle as read_bundle
    from dse.deploy.bundle_write import RecordedTrial as RecordedTrial
    from dse.deploy.bundle_write import check_target as check_target
    from dse.deploy.bundle_write import write_bundle as write_bundle
    from dse.deploy.compare import DEFAULT_ACCURACY_TOLERANCE as DEFAULT_ACCURACY_TOLERANCE
    from dse.deploy.compare import DEFAULT_TOLERANCE as DEFAULT_TOLERANCE
    from dse.deploy.compare import Comparison as Comparison
    from dse.deploy.compare import MetricCheck as MetricCheck
    from dse.deploy.compare import latency_checks as latency_checks
    from dse.deploy.compare import score_checks as score_checks
    from dse.deploy.confirm import DEFAULT_CONFIRM_GAP_S as DEFAULT_CONFIRM_GAP_S
    from dse.deploy.confirm import DEFAULT_CONFIRM_RUNS as DEFAULT_CONFIRM_RUNS
    from dse.deploy.confirm import Run as Run
    from dse.deploy.confirm import decided as decided
    from dse.deploy.confirm import is_disturbed as is_disturbed
    from dse.deploy.confirm import settled as settled
    from dse.deploy.confirm import summary as summary
    from dse.deploy.exported import CarriedData as CarriedData
    from dse.deploy.exported import ExportedGenerator as ExportedGenerator
    from dse.deploy.exported import ExportedModel as ExportedModel
    from dse.deploy.exported import GenerationVerifyRequest as GenerationVerifyRequest
    from dse.deploy.exported import VerifiedModel as VerifiedModel
    from dse.deploy.exported import VerifyRequest as VerifyRequest
    from dse.deploy.exported import folder_files as folder_files
    from dse.deploy.exported import write_folder_files as write_folder_files
    from dse.deploy.generation_bundle import GENERATION_KIND as GENERATION_KIND
    from dse.deploy.generation_bundle import write_generation_bundle as write_generation_bundle
    from dse.deploy.layout import DEPLOYMENT as DEPLOYMENT
    from dse.deploy.layout import DEVICE_PROFILE as DEVICE_PROFILE
    from dse.deploy.layout import MAX_SAMPLES as MAX_SAMPLES
    from dse.deploy.manifest import REPORTS_DIR as REPORTS_DIR
    from dse.deploy.manifest import bundle_files as bundle_files

# Each name loads its module on first use (see dse.util.faces).
_NAMES = {
    "Bundle": "dse.deploy.bundle_read",
    "CarriedData": "dse.deploy.exported",
    "Comparison": "dse.deploy.compare",
    "DEFAULT_ACCURACY_TOLERANCE": "dse.deploy.compare",
    "DEFAULT_CONFIRM_GAP_S": "dse.deploy.confirm",
    "DEFAULT_CONFIRM_RUNS": "dse.deploy.confirm",
    "DEFAULT_TOLERANCE": "dse.deploy.compare",
    "DEPLOYMENT": "dse.deploy.layout",
    "DEVICE_PROFILE": "dse.deploy.layout",
    "ExportedGenerator": "dse.deploy.exported",
    "ExportedModel": "dse.deploy.exported",
    "GENERATION_KIND": "dse.deploy.generation_bundle",
    "GenerationVerifyRequest": "dse.deploy.exported",
    "MAX_SAMPLES": "dse.deploy.layout",
    "MetricCheck": "dse.deploy.compare",
    "REPORTS_DIR": "dse.deploy.manifest",
    "RecordedTrial": "dse.deploy.bundle_write",
    "Run": "dse.deploy.confirm",
    "VerifiedModel": "dse.deploy.exported",
    "VerifyRequest": "dse.deploy.exported",
    "bundle_files": "dse.deploy.manifest",
    "check_target": "dse.deploy.bundle_write",
    "decided": "dse.deploy.confirm",
    "folder_files": "dse.deploy.exported",
    "is_disturbed": "dse.deploy.confirm",
    "latency_checks": "dse.deploy.compare",
    "read_bundle": "dse.deploy.bundle_read",
    "score_checks": "dse.deploy.compare",
    "settled": "dse.deploy.confirm",
    "summary": "dse.deploy.confirm",
    "write_bundle": "dse.deploy.bundle_write",
    "write_folder_files": "dse.deploy.exported",
    "write_generation_bundle": "dse.deploy.generation_bundle",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
