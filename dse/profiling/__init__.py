"""Profiling one candidate on its device (``dse profile``): the backend's own per-operator
profiler, the roofline verdict per operator, and the system profilers present there (Linux
``perf``, NVIDIA Nsight). Plain-data modules (``summary``) are importable without any runtime."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.util import lazy_names

if TYPE_CHECKING:
    from dse.profiling.folder import profile_folder as profile_folder
    from dse.profiling.folder import write_profile as write_profile
    from dse.profiling.generation_session import check_phase as check_phase
    from dse.profiling.generation_session import profile_generator as profile_generator
    from dse.profiling.session import DeviceProfile as DeviceProfile
    from dse.profiling.session import ProfileSettings as ProfileSettings
    from dse.profiling.session import profile_runner as profile_runner
    from dse.profiling.summary import COMPUTE_BOUND as COMPUTE_BOUND
    from dse.profiling.summary import MEMORY_BOUND as MEMORY_BOUND
    from dse.profiling.summary import OP_COLUMNS as OP_COLUMNS
    from dse.profiling.summary import OPS_CSV as OPS_CSV
    from dse.profiling.summary import OPS_PARQUET as OPS_PARQUET
    from dse.profiling.summary import OVERHEAD_BOUND as OVERHEAD_BOUND
    from dse.profiling.summary import SUMMARY_FILE as SUMMARY_FILE
    from dse.profiling.summary import UNKNOWN as UNKNOWN
    from dse.profiling.summary import VERDICTS as VERDICTS
    from dse.profiling.summary import Ceilings as Ceilings
    from dse.profiling.summary import NsightSection as NsightSection
    from dse.profiling.summary import PerfSection as PerfSection
    from dse.profiling.summary import ProfileSummary as ProfileSummary
    from dse.profiling.summary import read_summary as read_summary

# Each name loads its module on first use (see dse.util.faces).
_NAMES = {
    "COMPUTE_BOUND": "dse.profiling.summary",
    "Ceilings": "dse.profiling.summary",
    "DeviceProfile": "dse.profiling.session",
    "MEMORY_BOUND": "dse.profiling.summary",
    "NsightSection": "dse.profiling.summary",
    "OPS_CSV": "dse.profiling.summary",
    "OPS_PARQUET": "dse.profiling.summary",
    "OP_COLUMNS": "dse.profiling.summary",
    "OVERHEAD_BOUND": "dse.profiling.summary",
    "PerfSection": "dse.profiling.summary",
    "ProfileSettings": "dse.profiling.session",
    "ProfileSummary": "dse.profiling.summary",
    "SUMMARY_FILE": "dse.profiling.summary",
    "UNKNOWN": "dse.profiling.summary",
    "VERDICTS": "dse.profiling.summary",
    "check_phase": "dse.profiling.generation_session",
    "profile_folder": "dse.profiling.folder",
    "profile_generator": "dse.profiling.generation_session",
    "profile_runner": "dse.profiling.session",
    "read_summary": "dse.profiling.summary",
    "write_profile": "dse.profiling.folder",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
