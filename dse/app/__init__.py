"""The application's use-cases, the layer under the CLI: a campaign (load, validate, run, report),
device calibration, a trial's profile, a bundle's export and verification, the catalog of parts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.util import lazy_names

if TYPE_CHECKING:
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
    from dse.app.campaign_setup import ResumeNotice as ResumeNotice
    from dse.app.catalog import list_parts as list_parts
    from dse.app.catalog import markdown_table as markdown_table
    from dse.app.trial_profile import TrialProfile as TrialProfile
    from dse.app.trial_profile import profile as profile

# Each name loads its module on first use (see dse.util.faces).
_NAMES = {
    "CampaignResult": "dse.app.api",
    "DeviceCalibration": "dse.app.calibration",
    "ExportedBundle": "dse.app.bundle_export",
    "ResumeNotice": "dse.app.campaign_setup",
    "TrialProfile": "dse.app.trial_profile",
    "VerifyReport": "dse.app.bundle_verify",
    "calibrate": "dse.app.calibration",
    "export": "dse.app.bundle_export",
    "list_parts": "dse.app.catalog",
    "load_experiment": "dse.app.api",
    "markdown_table": "dse.app.catalog",
    "profile": "dse.app.trial_profile",
    "run_campaign": "dse.app.api",
    "validate_files": "dse.app.api",
    "verify": "dse.app.bundle_verify",
    "write_report": "dse.app.api",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
