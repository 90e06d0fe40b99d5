"""One measured trial of a campaign, found by device and number for a command that works on it
(``dse profile``, ``dse export``): a one-line DseError naming what is wrong otherwise."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.core import DseError, StudyAttr, TrialAttr
from dse.results.run_files import load_campaign

if TYPE_CHECKING:
    import optuna

    from dse.spec import Experiment, HardwareProfile


def farm_device(experiment: Experiment, name: str | None, purpose: str) -> HardwareProfile:
    """The device profile whose trial is to be ``purpose``d (``profile``, ``export``):
    ``name``, or the campaign's only farm device."""
    if experiment.evaluator is not None:
        raise DseError(f"{experiment.path}: this campaign is measured by an evaluator, not on "
                       f"the device farm: there is no runtime to {purpose}")
    names = [p.name for p in experiment.devices]
    if name is None:
        farm = [p for p in experiment.devices if p.kind != "replay"]
        if len(farm) != 1:
            raise DseError(f"{experiment.path}: the campaign has devices {names}; name one "
                           f"with --device")
        return farm[0]
    chosen = next((p for p in experiment.devices if p.name == name), None)
    if chosen is None:
        raise DseError(f"{experiment.path}: --device {name!r} is not a device of this campaign "
                       f"(it has {names})")
    if chosen.kind == "replay":
        raise DseError(f"{experiment.path}: device {name!r} replays a recorded table: there is "
                       f"no runtime to {purpose}")
    return chosen


def device_study(experiment: Experiment, device: HardwareProfile) -> optuna.Study:
    """``device``'s study in the campaign (read only); DseError when there is none yet."""
    studies = load_campaign(experiment.run_dir, experiment.storage)
    study = next((s for s in studies if s.user_attrs.get(StudyAttr.DEVICE_PROFILE) == device.name),
                 studies[0] if len(studies) == 1 else None)
    if study is None:
        raise DseError(f"{experiment.path}: no study of device {device.name!r} in "
                       f"{experiment.run_dir}; run the campaign first")
    return study


def measured_trial(experiment: Experiment, study: optuna.Study, device: HardwareProfile,
                   number: int, purpose: str, *,
                   full_only: bool = False) -> optuna.trial.FrozenTrial:
    """Trial ``number`` of ``device``'s ``study`` (:func:`device_study`), measured ok (with
    ``full_only``, by the full protocol, not screened out after a screening measurement);
    DseError in one line otherwise."""
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    frozen = trials.get(number)
    if frozen is None:
        shown = f"0 to {max(trials)}" if trials else "none"
        raise DseError(f"{experiment.path}: device {device.name!r} has no trial {number} "
                       f"(its trials: {shown})")
    status = frozen.user_attrs.get(TrialAttr.STATUS)
    if TrialAttr.CANDIDATE not in frozen.user_attrs:
        raise DseError(f"{experiment.path}: trial {number} on {device.name} has no candidate "
                       f"recorded (state {frozen.state.name}): nothing to {purpose}")
    if status != "ok":
        reason = str(frozen.user_attrs.get(TrialAttr.REASON) or "no result")
        raise DseError(f"{experiment.path}: trial {number} on {device.name} is "
                       f"{status or frozen.state.name.lower()} ({reason.splitlines()[0][:200]}): "
                       f"only a measured trial can be {_participle(purpose)}")
    if full_only and frozen.user_attrs.get(TrialAttr.FIDELITY) == "screen":
        # The worker keeps the screen's verdict in the trial's provenance.
        provenance = frozen.user_attrs.get(TrialAttr.PROVENANCE) or {}
        verdict = str(provenance.get("screen_verdict") or "dominated")
        raise DseError(f"{experiment.path}: trial {number} on {device.name} was screened out "
                       f"({verdict.splitlines()[0][:200]}): it was never measured in full, so "
                       f"there is no measurement to {purpose} with it")
    return frozen


def _participle(verb: str) -> str:
    return verb + ("d" if verb.endswith("e") else "ed")


def original_trial(study: optuna.Study, frozen: optuna.trial.FrozenTrial
                   ) -> optuna.trial.FrozenTrial:
    """The trial whose measurement ``frozen`` reused (``reused_from``), else ``frozen``: the
    one holding the provenance and samples."""
    source = frozen.user_attrs.get(TrialAttr.REUSED_FROM)
    if not isinstance(source, int):
        return frozen
    found = next((t for t in study.get_trials(deepcopy=False) if t.number == source), None)
    return frozen if found is None else found
