"""The public Python API: load and validate specs, run a campaign, read its results."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
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
from dse.spec.loading import load_profile, load_search_space
from dse.spec.models import ParamSpec, checked_values

if TYPE_CHECKING:
    import pandas as pd

    from dse.backends.base import Backend
    from dse.results.fidelity import ScreeningSummary
    from dse.search.lease import Lease
    from dse.search.loop import JobDispatcher
    from dse.spec import HardwareProfile
    from dse.spec.loading import Evaluator


def _check_space(path: Path, space: SearchSpace) -> list[str]:
    """Checks that need the registries: the model source, arch parameters, backend knob names."""
    from dse.backends import get_backend
    from dse.models.checks import model_problems

    backends = {} if space.deployment is None else space.deployment.backends
    problems = [] if space.model is None else model_problems(
        path, space.model, backends=list(backends),
        batch_sizes=[] if space.deployment is None else space.deployment.batch_sizes,
        metrics=[o.metric for o in space.objectives] + [c.metric for c in space.constraints])
    for name, backend_spec in backends.items():
        backend = get_backend(name)
        for knob, values in backend_spec.knobs.items():
            field = f"{path}: deployment.backends.{name}.knobs.{knob}"
            if knob not in backend.knobs:
                problems.append(f"{field}: unknown knob of {name}; "
                                f"allowed: {', '.join(sorted(backend.knobs))}")
                continue
            problems.extend(f"{field}: {problem}" for problem in _knob_value_problems(
                backend, knob, values))
    return problems


def _knob_value_problems(backend: Backend, knob: str, values: ParamSpec) -> list[str]:
    """What ``compile`` would say of each value a knob may take (a range: its two ends)."""
    from dse.exceptions import BuildError

    problems = []
    for value in dict.fromkeys(checked_values(values)):  # each value once, in order
        try:
            backend.check_knob_values({knob: value})
        except BuildError as exc:
            problems.append(str(exc))
    return problems


def load_experiment(path: str | os.PathLike[str]) -> Experiment:
    """Load a campaign YAML with its search space and device profiles; SpecError lists problems."""
    path = Path(path)
    experiment = load_experiment_files(path)
    problems = _check_space(path.parent / experiment.spec.search_space, experiment.space)
    problems.extend(_check_replay_tables(experiment))
    if not problems:  # the sampler and baseline checks assume a valid space
        from dse.search.study import search_problems

        problems.extend(search_problems(experiment))
    if problems:
        raise SpecError(problems)
    return experiment


def _check_replay_tables(experiment: Experiment) -> list[str]:
    """Each replay table has a column for every parameter of the space and one metric column."""
    from dse.search.evaluators import ReplayEvaluator

    problems = []
    for profile in experiment.devices:
        if profile.table is not None:
            try:
                ReplayEvaluator(profile.table, experiment.space)
            except SpecError as exc:
                problems.extend(exc.problems)
    return problems


def validate_files(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """Every problem in the given spec files, one line each; empty when all are valid."""
    problems: list[str] = []
    for raw in paths:
        path = Path(raw)
        try:
            kind = guess_kind(path, read_yaml(path))
            if kind == "experiment":
                load_experiment(path)
            elif kind == "hw_profile":
                load_profile(path)
            else:
                if kind == "search_space":
                    problems.extend(_check_space(path, load_search_space(path)))
                else:
                    load_model(path, KINDS[kind])
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

        return trials_frame(load_campaign(self.run_dir, self.experiment.storage))

    def screening(self) -> ScreeningSummary | None:
        """Trials screened out and device-seconds spent and saved (None with screening off)."""
        from dse.results import screening_summary

        return screening_summary(self.trials)

    def pareto(self) -> pd.DataFrame:
        """The feasible Pareto front over the campaign's objectives."""
        from dse.results import front_frame

        return front_frame(self.trials, self.objectives)


def write_report(experiment: Experiment) -> tuple[Path, Path, Path]:
    """Write trials.parquet, pareto.csv and the dashboard of a campaign, and refresh the
    dashboards folder's index.html; returns the first three paths. A write the disk refuses is a
    DseError of one line; the files are written atomically, so the previous ones stay whole."""
    from dse.report import write_dashboard
    from dse.report.index import write_index
    from dse.results import load_campaign, write_results
    from dse.storage.write_failure import REPORT_ADVICE, refused_writes_as_errors

    _declare_metrics(experiment)
    with refused_writes_as_errors(experiment.run_dir, REPORT_ADVICE):
        studies = load_campaign(experiment.run_dir, experiment.storage)
        trials, front = write_results(studies, experiment.run_dir,
                                      [o.metric for o in experiment.space.objectives])
    # The dashboards folder may sit on another disk: a refusal there names that folder.
    with refused_writes_as_errors(experiment.dashboard_path.parent, REPORT_ADVICE):
        dashboard = write_dashboard(experiment.run_dir, experiment.dashboard_path,
                                    title=experiment.name, storage=experiment.storage)
        write_index(dashboard.parent)
    return trials, front, dashboard


def _declare_metrics(experiment: Experiment) -> None:
    """Make the space's declared metrics known to the metric lookups (see dse.metrics.declare)."""
    from dse.metrics import declare

    try:
        declare(experiment.space.metric_specs())
    except ValueError as exc:
        raise SpecError([f"{experiment.path.parent / experiment.spec.search_space}: metrics: "
                         f"{exc}"]) from None


def _check_farm_can_measure(experiment: Experiment, on_farm: list[HardwareProfile]) -> None:
    """Devices of the farm build and measure models; free parameters mean nothing to them."""
    space = experiment.space
    if not on_farm or (space.model is not None and not space.parameters):
        return
    has = "no model" if space.model is None else "free parameters"
    raise SpecError([
        f"{experiment.path}: devices: {', '.join(p.name for p in on_farm)} would be measured on "
        f"the device farm, which builds models, but the search space {space.name!r} has {has}: "
        f"name an evaluator (evaluator: module:function, or run_campaign(evaluator=...)) or "
        f"use replay devices"])


def _dispatcher(experiment: Experiment, evaluator: Evaluator | None,
                on_farm: list[HardwareProfile], address: str | None) -> JobDispatcher:
    """In-process evaluators for replay devices (their tables) and, with an evaluator, for every
    other device; the farm for the devices left, on Ray, started only when some are left."""
    from dse.search.evaluators import (
        EvaluatorDispatcher,
        MixedDispatcher,
        ReplayEvaluator,
        known_metrics,
    )

    local: dict[str, Evaluator] = {}
    for profile in experiment.devices:
        if profile.table is not None:
            local[profile.name] = ReplayEvaluator(profile.table, experiment.space)
        elif evaluator is not None:
            local[profile.name] = evaluator
    evaluators = EvaluatorDispatcher(local, known_metrics(experiment.space))
    if not on_farm:
        return evaluators

    from dse.farm.cluster import connect, start_embedded
    from dse.farm.dispatcher import Dispatcher

    address = address or experiment.spec.farm.address
    if address:
        connect(address)
    else:
        start_embedded(on_farm)
    farm_spec = experiment.spec.farm
    farm = Dispatcher(on_farm, experiment.cache_dir, max_retries=farm_spec.max_retries,
                      quarantine_after=farm_spec.quarantine_after)
    return MixedDispatcher(farm, evaluators) if local else farm


def _report_what_fits(experiment: Experiment, run_dir: Path) -> None:
    """Write the tables and page after a stopped run; a write the disk refuses is left to the
    error that stopped the run (the files are written atomically: the old ones stay whole)."""
    from dse.storage.write_failure import describe_write_failure

    try:
        write_report(experiment)
    except Exception as exc:
        if describe_write_failure(exc, run_dir) is None:
            raise


@contextmanager
def _campaign_lease(experiment: Experiment,
                    on_notice: Callable[[str], object] | None) -> Iterator[Lease]:
    """Hold the campaign's lease (one driver per campaign) while the block runs; a lease taken
    over from a dead driver is said once, through ``on_notice`` and the ``dse`` logger."""
    from dse.search.lease import Lease
    from dse.storage.write_failure import RESUME_ADVICE, refused_writes_as_errors

    storage = experiment.storage
    with refused_writes_as_errors(experiment.run_dir, RESUME_ADVICE):
        experiment.run_dir.mkdir(parents=True, exist_ok=True)
        storage.check_writable()
        storage.remember()
    with Lease(storage.lease_url, experiment.name, where=str(experiment.path),
               failure=storage.failure) as lease:
        if lease.took_over:
            notice = f"campaign {experiment.name}: took over the lease of {lease.took_over}"
            logging.getLogger("dse").warning(notice)
            if on_notice is not None:
                on_notice(notice)
        yield lease


def run_campaign(experiment: Experiment | str | os.PathLike[str], *,
                 on_trial: ProgressCallback | None = None, report: bool = True,
                 address: str | None = None,
                 evaluator: Evaluator | None = None,
                 on_notice: Callable[[str], object] | None = None) -> CampaignResult:
    """Run (or resume) a campaign until every device profile's budget of completed trials is met.

    Without an address (argument, else the experiment's ``farm.address``) an embedded local Ray
    starts with one device per profile; with one, the campaign runs on the devices that
    ``dse worker`` joined to that cluster. Drives one Optuna study per profile and writes results
    and the dashboard. Ctrl-C leaves the studies consistent; calling again resumes.

    A custom ``evaluator`` (else the experiment's ``evaluator:``), ``function(candidate) ->
    {metric: value}``, measures the candidates of every device but replay ones instead of the
    farm, under ``budget.trial_timeout_s``: an importable function in a worker process on this
    machine, any other callable in a thread of this process; a replay device's candidates are
    served from its recorded table (see ``dse.search.evaluators``). Ray starts only for the
    devices left to the farm, if any.
    """
    from dse.search.loop import SearchLoop
    from dse.search.study import open_experiment_studies
    from dse.storage.write_failure import RESUME_ADVICE, refused_writes_as_errors

    if not isinstance(experiment, Experiment):
        experiment = load_experiment(experiment)
    evaluator = evaluator if evaluator is not None else experiment.evaluator
    on_farm = [p for p in experiment.devices if p.kind != "replay" and evaluator is None]
    _check_farm_can_measure(experiment, on_farm)
    _declare_metrics(experiment)
    run_dir = experiment.run_dir
    profiles = list(experiment.devices)
    farm_names = {p.name for p in on_farm}
    with _campaign_lease(experiment, on_notice) as lease:
        with refused_writes_as_errors(run_dir, RESUME_ADVICE):
            studies = open_experiment_studies(
                experiment, evaluated=[p.name for p in profiles if p.name not in farm_names])
            declared = [spec.to_dict() for spec in experiment.space.metric_specs()]
            for study in studies.values():
                # Results and reports read units and directions of declared metrics from it.
                study.set_user_attr("metrics", declared)
        dispatcher = _dispatcher(experiment, evaluator, on_farm, address)
        loop = SearchLoop(experiment, studies, dispatcher, run_dir, on_trial=on_trial,
                          evaluated=[p.name for p in profiles if p.name not in farm_names],
                          lease_check=lease.check)
        try:
            loop.run()
        except DseError:
            if report:  # the run stopped (too many failures, a full disk): what was measured
                _report_what_fits(experiment, run_dir)  # still gets its tables, where it fits
            raise
        finally:
            dispatcher.cancel()  # the workers go; caches on disk stay for the next run
    dashboard = write_report(experiment)[2] if report else None
    return CampaignResult(experiment, run_dir, dashboard)
