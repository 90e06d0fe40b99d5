"""``dse profile``: one trial of a campaign, profiled on a device of its profile through the farm.

The trial's exact configuration (its ``Candidate``, stored on the trial) is rebuilt from the
caches on a device worker, as for a measurement (node lock held), profiled
(:mod:`dse.profiling.session`) and written as a profile folder in the campaign's run folder, with
a dashboard page beside the campaign's dashboards and the index refreshed. The campaign's study is
only read.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.core import Candidate, DeviceError, DseError, TrialAttr
from dse.results import device_study, farm_device, measured_trial
from dse.spec import Experiment

if TYPE_CHECKING:
    import pandas as pd

    from dse.profiling import ProfileSettings, ProfileSummary
    from dse.spec import HardwareProfile

# Building a candidate from cold caches (training, conversion) plus the windows: the trial's own
# timeout, and this much more for the profilers.
_PROFILER_SECONDS = 600.0
# The campaign's p50 of one call of a language model's phase (a request's TTFT is its prefill).
_TRIAL_P50 = {"prefill": "ttft_p50_ms", "decode": "tpot_p50_ms"}


@dataclass(frozen=True)
class TrialProfile:
    """A profile made by :func:`profile`.

    Examples:
        >>> import dataclasses
        >>> from dse import TrialProfile
        >>> [field.name for field in dataclasses.fields(TrialProfile)]
        ['folder', 'page', 'summary', 'ops']

    Attributes:
        folder: the profile folder (``summary.json``, ``ops.csv``, ``ops.parquet``, the trace and
            the profilers' raw files).
        page: its dashboard page.
        summary: what ``summary.json`` holds.
        ops: the per-operator table, the longest first.
    """

    folder: Path
    page: Path
    summary: ProfileSummary
    ops: pd.DataFrame


def profile(experiment: Experiment | str | os.PathLike[str], trial: int, *,
            device: str | None = None, address: str | None = None,
            settings: ProfileSettings | None = None, phase: str | None = None) -> TrialProfile:
    """Profile one measured trial of a campaign on a device of its profile: the backend's own
    per-operator profiler, the roofline verdict per operator, Linux ``perf`` counters and call
    stacks, and Nsight on NVIDIA devices where installed.

    The trial's exact configuration is rebuilt from the campaign's caches on a device of the
    profile (through the farm: an embedded local Ray without ``address``), with the node lock
    held as for a measurement. The campaign's study is only read.

    Args:
        experiment: A loaded experiment, or the path of its YAML file.
        trial: The trial's number in ``device``'s study (the dashboard's trial column).
        device: The device profile's name; may be left out when the campaign has one device.
        address: The farm's Ray address; else the experiment's ``farm.address``, else an
            embedded local Ray.
        settings: Window lengths and which system profilers run
            (:class:`dse.profiling.session.ProfileSettings`); the defaults take a few seconds.
        phase: For a language model's trial, the phase one profiled call is: ``decode`` (one
            decode step; the default) or ``prefill`` (one request's prefill). Each phase has its
            own folder and page (``trial-NNNNN-decode``). A fixed-shape model has no phase.

    Returns:
        The :class:`TrialProfile`: the profile folder
        (``<run folder>/profiles/<device>/trial-NNNNN/``), its dashboard page, summary and
        per-operator table.

    Raises:
        DseError: One line when the campaign, device or trial cannot be profiled (no study yet,
            no such trial, a trial that failed or was infeasible, a replay device, an
            evaluator's campaign) or the device could not build or run the candidate.
        SpecError: When ``experiment`` is a path to an invalid experiment.

    Examples:
        A campaign measured by an evaluator has no runtime to profile:

        >>> from dse import profile
        >>> from dse.core.exceptions import DseError
        >>> try:
        ...     profile("experiments/custom-evaluator.yaml", trial=0)
        ... except DseError as exc:
        ...     print(exc)
        experiments/custom-evaluator.yaml: this campaign is measured by an evaluator, ...

        After ``dse run experiments/quickstart.yaml``, on this machine's CPU (a few seconds):

        >>> found = profile("experiments/quickstart.yaml", trial=3)  # doctest: +SKIP
        >>> found.ops[["name", "op_type", "ms_per_run", "verdict"]].head(3)  # doctest: +SKIP
    """
    from dse.app.api import load_experiment
    from dse.profiling import DeviceProfile, ProfileSettings, profile_folder, write_profile
    from dse.storage import REPORT_ADVICE, refused_writes_as_errors

    if not isinstance(experiment, Experiment):
        experiment = load_experiment(experiment)

    chosen = farm_device(experiment, device, "profile")
    frozen = measured_trial(experiment, device_study(experiment, chosen), chosen, trial,
                            "profile")
    try:
        candidate = Candidate.from_dict(dict(frozen.user_attrs[TrialAttr.CANDIDATE]))
    except TypeError as exc:  # recorded by a dse whose candidates had other fields
        raise DseError(f"{experiment.path}: trial {trial} on {chosen.name}: its recorded "
                       f"candidate does not fit this dse ({exc})") from None
    chosen_phase = _phase(experiment, candidate, trial, phase)
    metrics: dict[str, Any] = dict(frozen.user_attrs.get(TrialAttr.METRICS) or {})
    # What the campaign measured of one call: a forward pass, or the phase's own p50.
    p50 = metrics.get(_TRIAL_P50.get(chosen_phase, "latency_p50_ms"))
    trial_p50 = float(p50) if isinstance(p50, int | float) and math.isfinite(p50) else None
    settings = dataclasses.replace(settings or ProfileSettings(), phase=chosen_phase)
    found = _on_device(experiment, chosen, candidate, settings, address)
    if not isinstance(found, DeviceProfile):
        raise DeviceError(f"{experiment.path}: trial {trial} on {chosen.name}: {found}")
    folder = profile_folder(experiment.run_dir, chosen.name, trial, chosen_phase)
    with refused_writes_as_errors(experiment.run_dir, REPORT_ADVICE):
        summary, table = write_profile(folder, found, campaign=experiment.name,
                                       device=chosen.name,
                                       device_id=str(
                                           frozen.user_attrs.get(TrialAttr.DEVICE_ID, "")),
                                       trial=trial, candidate=candidate, trial_p50_ms=trial_p50)
    page = _page(experiment, folder, summary)
    return TrialProfile(folder, page, summary, table)


def _phase(experiment: Experiment, candidate: Candidate, trial: int, phase: str | None) -> str:
    """The phase to profile: ``decode`` by default for a language model; none for a fixed-shape
    model (DseError when one is asked of it, or a phase that does not exist)."""
    from dse.models import is_llm_source
    from dse.profiling import check_phase

    if not is_llm_source(candidate.family):
        if phase:
            raise DseError(f"{experiment.path}: trial {trial}: --phase {phase!r} is for a "
                           f"language model's trial; this one is a fixed-shape model, whose "
                           f"call is one forward pass")
        return ""
    try:
        return check_phase(phase or "")
    except ValueError as exc:
        raise DseError(f"{experiment.path}: trial {trial}: {exc}") from None


def _on_device(experiment: Experiment, device: HardwareProfile, candidate: Candidate,
               settings: ProfileSettings, address: str | None) -> Any:
    from dse.farm import call_device

    return call_device(device, experiment.cache_dir, address or experiment.spec.farm.address,
                       "profile_candidate", (candidate, experiment.space.training, settings),
                       experiment.spec.budget.trial_timeout_s + _PROFILER_SECONDS)


def _page(experiment: Experiment, folder: Path, summary: ProfileSummary) -> Path:
    """The profile's page; the index, and the campaign's dashboard where it has one (its trial's
    row then links the page), written again."""
    from dse.core import declare
    from dse.report import profile_page_name, write_dashboard, write_index, write_profile_page
    from dse.storage import REPORT_ADVICE, refused_writes_as_errors

    dashboards = experiment.dashboard_path.parent
    with refused_writes_as_errors(dashboards, REPORT_ADVICE):
        dashboards.mkdir(parents=True, exist_ok=True)
        page = write_profile_page(folder, dashboards / profile_page_name(
            summary.campaign, summary.device, summary.trial, summary.phase))
        if experiment.dashboard_path.exists():
            declare(experiment.space.metric_specs())
            write_dashboard(experiment.run_dir, experiment.dashboard_path, title=experiment.name,
                            storage=experiment.storage, experiment=experiment.path)
        write_index(dashboards)
    return page
