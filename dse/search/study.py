"""The Optuna study of a campaign: storage on disk, directions from the metrics table, sampler."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dse.candidate import stable_hash
from dse.exceptions import SpecError
from dse.metrics import metric
from dse.spec import SamplerSpec, SearchSpace

if TYPE_CHECKING:
    import optuna


def storage_url(run_dir: Path) -> str:
    return f"sqlite:///{run_dir / 'study.db'}"


def make_sampler(spec: SamplerSpec, resumed_trials: int) -> optuna.samplers.BaseSampler:
    """Optuna's own samplers. The seed is offset by the trials already run, so a resumed campaign
    continues the sequence instead of replaying the first proposals."""
    import optuna

    seed = spec.seed + resumed_trials
    if spec.name == "tpe":
        # constant_liar: with several devices measuring at once, TPE treats the running trials as
        # bad results instead of proposing the same region to every idle device.
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=spec.startup_trials,
                                          multivariate=True, constant_liar=True)
    if spec.name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)


# The parts of a space that change what a trial means; a resumed study must not mix two of them.
_SPACE_SECTIONS = ("model", "training", "deployment", "constraints")


def space_fingerprint(space: SearchSpace) -> dict[str, str]:
    dumped = space.model_dump(mode="json")
    return {section: stable_hash(dumped[section]) for section in _SPACE_SECTIONS}


def study_name(campaign: str, profile: str, device_count: int) -> str:
    """A single-device campaign's study is named like the campaign; with several devices each
    profile has its own study, ``<campaign>@<profile>``, in the same storage."""
    return campaign if device_count == 1 else f"{campaign}@{profile}"


def open_studies(run_dir: Path, campaign: str, space: SearchSpace, sampler: SamplerSpec,
                 profiles: list[str]) -> dict[str, optuna.Study]:
    """One study per device profile (see :func:`study_name`), created or resumed."""
    studies = {}
    for profile in profiles:
        study = open_study(run_dir, study_name(campaign, profile, len(profiles)), space, sampler)
        study.set_user_attr("campaign", campaign)
        study.set_user_attr("device_profile", profile)
        studies[profile] = study
    return studies


def open_study(run_dir: Path, name: str, space: SearchSpace, sampler: SamplerSpec) -> optuna.Study:
    """Create the campaign's study, or load it to resume.

    Refuses to resume a study made with other objectives or another space: its trials would not
    be comparable (and Optuna cannot change a parameter's choices within one study).
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    run_dir.mkdir(parents=True, exist_ok=True)
    objectives = [o.metric for o in space.objectives]
    constraints = [str(c) for c in space.constraints]
    storage = storage_url(run_dir)
    existing = optuna.study.get_all_study_names(storage)
    resumed = 0
    if name in existing:
        previous = optuna.load_study(study_name=name, storage=storage)
        if previous.user_attrs.get("objectives") != objectives:
            raise SpecError([
                f"{run_dir / 'study.db'}: objectives: the stored study optimises "
                f"{previous.user_attrs.get('objectives')}, the experiment asks {objectives}; "
                f"rename the campaign or delete its run folder"])
        stored = previous.user_attrs.get("space_fingerprint", {})
        changed = [k for k, v in space_fingerprint(space).items() if stored.get(k) != v]
        if changed:
            raise SpecError([
                f"{run_dir / 'study.db'}: {', '.join(changed)}: the search space {space.name!r} "
                f"changed since this campaign's study was created; rename the campaign to start "
                f"a new study, or delete {run_dir} to start over"])
        resumed = len(previous.trials)
    study = optuna.create_study(
        storage=storage, study_name=name, load_if_exists=True,
        directions=[metric(m).direction.value for m in objectives],
        sampler=make_sampler(sampler, resumed),
    )
    study.set_user_attr("campaign", name)
    study.set_user_attr("objectives", objectives)
    study.set_user_attr("constraints", constraints)
    study.set_user_attr("space_fingerprint", space_fingerprint(space))
    return study
