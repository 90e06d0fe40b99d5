"""The public Python API: load and validate specs, run a campaign, read its results."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dse.exceptions import DseError, SpecError
from dse.search.loop import ProgressCallback
from dse.spec import (
    KINDS,
    Experiment,
    SearchSpace,
    guess_kind,
    load_experiment_files,
    load_model,
    read_yaml,
)

if TYPE_CHECKING:
    import pandas as pd


def _check_space(path: Path, space: SearchSpace) -> list[str]:
    """Checks that need the registries: arch parameter names and values, backend knob names."""
    from dse.backends import get_backend
    from dse.models import get_family
    from dse.spec import RangeParam

    family = get_family(space.model.family)
    problems = []
    for key, spec in space.model.arch.items():
        where = f"{path}: model.arch.{key}"
        if key not in family.arch_params:
            problems.append(f"{where}: unknown parameter of family {family.name!r}; allowed: "
                            f"{', '.join(sorted(family.arch_params))}")
            continue
        values = [spec.low, spec.high] if isinstance(spec, RangeParam) else list(spec)
        for value in values:
            try:
                family.validate({key: value})
            except ValueError as exc:
                problems.append(f"{where}: {exc}")
    for name, backend_spec in space.deployment.backends.items():
        allowed = get_backend(name).knobs
        problems.extend(
            f"{path}: deployment.backends.{name}.knobs.{knob}: unknown knob of {name}; "
            f"allowed: {', '.join(sorted(allowed))}"
            for knob in backend_spec.knobs if knob not in allowed)
    return problems


def load_experiment(path: str | os.PathLike[str]) -> Experiment:
    """Load a campaign YAML with its search space and device profiles; SpecError lists problems."""
    path = Path(path)
    experiment = load_experiment_files(path)
    problems = _check_space(path.parent / experiment.spec.search_space, experiment.space)
    if problems:
        raise SpecError(problems)
    return experiment


def validate_files(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """Every problem in the given spec files, one line each; empty when all are valid."""
    problems: list[str] = []
    for raw in paths:
        path = Path(raw)
        try:
            kind = guess_kind(path, read_yaml(path))
            if kind == "experiment":
                load_experiment(path)
            else:
                model = load_model(path, KINDS[kind])
                if isinstance(model, SearchSpace):
                    problems.extend(_check_space(path, model))
        except SpecError as exc:
            problems.extend(exc.problems)
    return problems


@dataclass
class CampaignResult:
    """A campaign's outcome: its run folder, trials table, front and dashboard."""

    experiment: Experiment
    run_dir: Path
    dashboard: Path | None

    @property
    def objectives(self) -> list[str]:
        return [o.metric for o in self.experiment.space.objectives]

    @property
    def trials(self) -> pd.DataFrame:
        """One row per trial: status, every parameter, every metric (unit in the column name)."""
        from dse.results import load_campaign, trials_frame

        return trials_frame(load_campaign(self.run_dir))

    def pareto(self) -> pd.DataFrame:
        """The feasible Pareto front over the campaign's objectives."""
        from dse.results import front_frame

        return front_frame(self.trials, self.objectives)


def write_report(experiment: Experiment) -> tuple[Path, Path, Path]:
    """Write trials.parquet, pareto.csv and the dashboard of a campaign; returns their paths."""
    from dse.report import write_dashboard
    from dse.results import load_campaign, write_results

    studies = load_campaign(experiment.run_dir)
    trials, front = write_results(studies, experiment.run_dir,
                                  [o.metric for o in experiment.space.objectives])
    dashboard = write_dashboard(experiment.run_dir, experiment.dashboard_path,
                                title=experiment.name)
    return trials, front, dashboard


def run_campaign(experiment: Experiment | str | os.PathLike[str], *,
                 on_trial: ProgressCallback | None = None, report: bool = True,
                 address: str | None = None) -> CampaignResult:
    """Run (or resume) a campaign until every device profile's budget of completed trials is met.

    Without an address (argument, else the experiment's ``farm.address``) an embedded local Ray
    starts with one device per profile; with one, the campaign runs on the devices that
    ``dse worker`` joined to that cluster. Drives one Optuna study per profile and writes results
    and the dashboard. Ctrl-C leaves the studies consistent; calling again resumes.
    """
    from dse.farm.cluster import connect, start_embedded
    from dse.farm.dispatcher import Dispatcher
    from dse.search.loop import SearchLoop
    from dse.search.study import open_studies

    if not isinstance(experiment, Experiment):
        experiment = load_experiment(experiment)
    run_dir = experiment.run_dir
    profiles = list(experiment.devices)
    studies = open_studies(run_dir, experiment.name, experiment.space, experiment.spec.sampler,
                           [p.name for p in profiles])
    address = address or experiment.spec.farm.address
    if address:
        connect(address)
    else:
        start_embedded(profiles)
    farm = experiment.spec.farm
    dispatcher = Dispatcher(profiles, experiment.cache_dir, max_retries=farm.max_retries,
                            quarantine_after=farm.quarantine_after)
    loop = SearchLoop(experiment, studies, dispatcher, run_dir, on_trial=on_trial)
    try:
        loop.run()
    except DseError:
        if report:  # the run stopped (too many failures): what was measured still gets its tables
            write_report(experiment)
        raise
    finally:
        dispatcher.cancel()  # the workers go; caches on disk stay for the next run
    dashboard = write_report(experiment)[2] if report else None
    return CampaignResult(experiment, run_dir, dashboard)
