"""The public Python API: load and validate specs, run a campaign, read its results."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dse.app.campaign_checks import (
    check_experiment,
    dropped_combinations,
    experiment_output_problems,
    model_output_problems,
    space_problems,
)
from dse.app.campaign_setup import (
    campaign_finished,
    campaign_lease,
    check_farm_can_measure,
    check_model_output,
    declare_metrics,
    make_dispatcher,
    resume_notice,
)
from dse.core import DseError, SpecError, StudyAttr, TrialAttr
from dse.spec import Experiment, cap_per_file, check_search_space, guess_kind, load_profile, read_yaml

if TYPE_CHECKING:
    import optuna
    import pandas as pd

    from dse.results import ScreeningSummary
    from dse.search import ProgressCallback, SearchLoop
    from dse.spec import Evaluator


def load_experiment(path: str | os.PathLike[str]) -> Experiment:
    """Load a campaign YAML with its search space and device profiles; SpecError lists problems.

    Beyond the files' own fields, the search space is checked against the registries (model
    source, arch parameters, backend knobs and their values), each replay table against the
    space, the arch and knob values against each device's kind, each device against the
    capability table (none of the space's backend/precision combinations runs there), the
    sampler's options against the sampler and the budget, and the sampler and baseline against
    the space. Every problem is found in one pass (``dse.app.campaign_checks.check_experiment``).

    Args:
        path: The experiment's YAML file; the files it names are read relative to it.

    Returns:
        The experiment, with its search space and device profiles loaded and cross-checked.

    Raises:
        SpecError: When a file is missing, unreadable or invalid; ``problems`` lists every
            problem found, one line each.

    Examples:
        >>> from dse import load_experiment
        >>> experiment = load_experiment("experiments/custom-evaluator.yaml")
        >>> experiment.name, [profile.name for profile in experiment.devices]
        ('custom-evaluator', ['local-cpu', 'replay-example'])
        >>> [objective.metric for objective in experiment.space.objectives]
        ['zdt_f1', 'zdt_f2']
    """
    experiment, problems = check_experiment(Path(path))
    if problems:
        raise SpecError(problems)
    assert experiment is not None
    return experiment


def validate_files(paths: Iterable[str | os.PathLike[str]], *,
                   on_notice: Callable[[str], object] | None = None,
                   recheck_models: bool = False) -> list[str]:
    """Every problem in the given spec files, one line each; empty when all are valid.

    Each file's kind (experiment, search space, device profile) is told by its folder,
    else by its keys; an experiment is checked as :func:`load_experiment` checks it. Every
    problem a file has is reported in one pass (where one part of a file is invalid, the checks
    of its other parts still run), at most 20 lines a file. A factory's or ONNX file's model (not
    a built-in family) is also built once here and one forward's output judged against what dse
    scores (``dse.models.output_check``).

    Args:
        paths: The spec files to check.
        on_notice: Called with each one-line notice of a valid experiment: a backend or
            backend/precision combination of its space that a device is not offered, and why
            (``EXPERIMENT: local-cpu: onnxruntime/fp16 dropped: ...``), as ``dse run`` leaves it
            out.
        recheck_models: Build every factory's or ONNX file's model again, even where a pass was
            kept for the same spec, sources and library versions (``dse.models.check_verdicts``;
            what a factory reads at run time, such as a local weights file, is not tracked).

    Returns:
        The problems, one line each, in the order of ``paths``; empty when all are valid.

    Examples:
        >>> from dse import validate_files
        >>> validate_files(["experiments/custom-evaluator.yaml",
        ...                 "search_spaces/free-params-example.yaml", "hw_profiles/local-cpu.yaml"])
        []
        >>> validate_files(["experiments/no-such-campaign.yaml"])
        ['experiments/no-such-campaign.yaml: file not found']
        >>> notices: list[str] = []
        >>> validate_files(["experiments/bring-your-own.yaml"], on_notice=notices.append)
        []
        >>> notices[0][:74]
        'experiments/bring-your-own.yaml: local-cpu: onnxruntime/fp16 dropped: ONNX'
    """
    problems: list[str] = []
    for raw in paths:
        path = Path(raw)
        try:
            kind = guess_kind(path, read_yaml(path))
        except SpecError as exc:
            problems.extend(exc.problems)
            continue
        if kind == "experiment":
            problems.extend(_experiment_file_problems(path, on_notice, recheck_models))
        elif kind == "search_space":
            problems.extend(_space_file_problems(path, recheck_models))
        else:
            try:
                load_profile(path)
            except SpecError as exc:
                problems.extend(exc.problems)
    # An experiment repeats the lines of the files it names, which may be given too.
    return list(dict.fromkeys(problems))


def _experiment_file_problems(path: Path, on_notice: Callable[[str], object] | None,
                              recheck: bool) -> list[str]:
    experiment, problems = check_experiment(path)
    if experiment is None or problems:
        return problems
    if on_notice is not None:
        for notice in dropped_combinations(experiment):
            on_notice(f"{path}: {notice}")
    return experiment_output_problems(experiment, recheck=recheck)


def _space_file_problems(path: Path, recheck: bool) -> list[str]:
    space, problems = check_search_space(path)
    if space is not None:
        problems.extend(space_problems(path, space))
    if space is not None and not problems:
        problems.extend(model_output_problems(path, space, recheck=recheck))
    return cap_per_file(problems)


@dataclass
class CampaignResult:
    """A campaign's outcome: its run folder, trials table, front and dashboard.

    Attributes:
        experiment: The campaign's experiment.
        run_dir: Its run folder (the study, results and samples).
        dashboard: The dashboard's HTML file; None when the run wrote no report.

    Examples:
        >>> from pathlib import Path
        >>> from dse import CampaignResult, load_experiment
        >>> experiment = load_experiment("experiments/custom-evaluator.yaml")
        >>> result = CampaignResult(experiment, experiment.run_dir, dashboard=None)
        >>> result.objectives, result.run_dir.name
        (['zdt_f1', 'zdt_f2'], 'custom-evaluator')
    """

    experiment: Experiment
    run_dir: Path
    dashboard: Path | None

    @property
    def objectives(self) -> list[str]:
        """The metric names of the campaign's objectives, in the search space's order."""
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
    DseError of one line; the files are written atomically, so the previous ones stay whole.

    Args:
        experiment: The campaign, whose run folder holds its study.

    Returns:
        The paths of ``trials.parquet``, ``pareto.csv`` and the dashboard's HTML file.

    Raises:
        SpecError: When the search space's declared metrics clash with metrics already declared
            in this process.
        DseError: When the campaign's storage holds no study of it, or the disk refuses a write
            (one line).

    Examples:
        After a short campaign of a replay device (see :func:`run_campaign`), in a temporary
        folder; the run takes about a second, so the lines that need it are skipped as
        doctests:

        >>> import shutil, tempfile
        >>> from pathlib import Path
        >>> from dse import run_campaign, write_report
        >>> folder = Path(tempfile.mkdtemp())
        >>> space = Path("search_spaces/free-params-example.yaml").resolve()
        >>> replay = Path("hw_profiles/replay/replay-example.yaml").resolve()
        >>> _ = (folder / "replay.yaml").write_text(
        ...     f"{{name: replay, search_space: {space}, devices: [{replay}], "
        ...     f"budget: {{trials: 4}}, sampler: {{name: random, seed: 0}}}}")
        >>> result = run_campaign(folder / "replay.yaml", report=False)  # doctest: +SKIP
        >>> paths = write_report(result.experiment)  # doctest: +SKIP
        >>> [path.relative_to(folder).as_posix() for path in paths]  # doctest: +SKIP
        ['runs/replay/trials.parquet', 'runs/replay/pareto.csv', 'dashboards/replay.html']
        >>> shutil.rmtree(folder)
    """
    from dse.report import write_dashboard, write_index
    from dse.results import load_campaign, write_results
    from dse.storage import REPORT_ADVICE, refused_writes_as_errors

    declare_metrics(experiment)
    with refused_writes_as_errors(experiment.run_dir, REPORT_ADVICE):
        studies = load_campaign(experiment.run_dir, experiment.storage)
        trials, front = write_results(studies, experiment.run_dir,
                                      [o.metric for o in experiment.space.objectives])
    # The dashboards folder may sit on another disk: a refusal there names that folder.
    with refused_writes_as_errors(experiment.dashboard_path.parent, REPORT_ADVICE):
        dashboard = write_dashboard(experiment.run_dir, experiment.dashboard_path,
                                    title=experiment.name, storage=experiment.storage,
                                    experiment=experiment.path)
        write_index(dashboard.parent)
    return trials, front, dashboard


def _report_what_fits(experiment: Experiment, run_dir: Path) -> None:
    """Write the tables and page after a stopped run; a write the disk refuses is left to the
    error that stopped the run (the files are written atomically: the old ones stay whole)."""
    from dse.storage import describe_write_failure

    try:
        write_report(experiment)
    except Exception as exc:
        if describe_write_failure(exc, run_dir) is None:
            raise


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
    served from its recorded table (see ``dse.search.evaluators.dispatchers``). Ray starts only for the
    devices left to the farm, if any, and only when some device's budget is still open or a
    duel is left to run: a finished campaign (every device has its budget of completed trials,
    every chosen duel decided) only writes its report. At the end of the search, each farm
    device times its close calls again side by side (``measurement.duels``: pairs on or near
    its front whose intervals overlap on a timing objective); the fronts use their verdicts.

    Args:
        experiment: A loaded experiment, or the path of its YAML file.
        on_trial: Called with each trial's outcome as it finishes (for progress displays).
        report: Write the results tables and the dashboard at the end (and, when the run stops
            on an error, what fits).
        address: The farm's Ray address; else the experiment's ``farm.address``, else an
            embedded local Ray.
        evaluator: ``function(candidate) -> {metric: value}`` measuring every device but the
            replay ones; else the experiment's ``evaluator:``, else the farm.
        on_notice: Called with each one-line notice the user should see: each backend or
            backend/precision a device is not offered, and why (``local-cpu: torch/int8
            dropped: ...``); how far a resumed campaign already is (``resuming: 3 of 10 trials
            done``, per device when there are several; a ``dse.app.campaign_setup.ResumeNotice``,
            a str that also carries ``done`` and ``total``); a lease taken over from a dead
            driver; a device whose sampler found no new candidate.

    Returns:
        The campaign's :class:`CampaignResult` (``dashboard`` None without ``report``).

    Raises:
        SpecError: When ``experiment`` is a path to an invalid experiment, devices left to the
            farm (which builds models) face a search space without a model or with free
            parameters, or the space's declared metrics clash with metrics already declared in
            this process.
        DseError: When the run cannot go on: another driver holds the campaign's lease, the
            storage cannot be written or holds the campaign in another kind of storage, or too
            many trials failed (``budget.max_failed``).

    Examples:
        A campaign of a replay device (its measurements come from a recorded table: no Ray, no
        hardware), in a temporary folder; it takes about a second, so the lines that need it
        are skipped as doctests:

        >>> import shutil, tempfile
        >>> from pathlib import Path
        >>> from dse import run_campaign
        >>> folder = Path(tempfile.mkdtemp())
        >>> space = Path("search_spaces/free-params-example.yaml").resolve()
        >>> replay = Path("hw_profiles/replay/replay-example.yaml").resolve()
        >>> _ = (folder / "replay.yaml").write_text(
        ...     f"{{name: replay, search_space: {space}, devices: [{replay}], "
        ...     f"budget: {{trials: 4}}, sampler: {{name: random, seed: 0}}}}")
        >>> result = run_campaign(folder / "replay.yaml", report=False)  # doctest: +SKIP
        >>> len(result.trials), result.objectives, result.dashboard  # doctest: +SKIP
        (4, ['zdt_f1', 'zdt_f2'], None)
        >>> shutil.rmtree(folder)
    """
    from dse.search import open_experiment_studies, study_progress
    from dse.storage import RESUME_ADVICE, refused_writes_as_errors

    if not isinstance(experiment, Experiment):
        experiment = load_experiment(experiment)
    evaluator = evaluator if evaluator is not None else experiment.evaluator
    on_farm = [p for p in experiment.devices if p.kind != "replay" and evaluator is None]
    check_farm_can_measure(experiment, on_farm)
    declare_metrics(experiment)
    run_dir = experiment.run_dir
    profiles = list(experiment.devices)
    farm_names = {p.name for p in on_farm}
    evaluated = [p.name for p in profiles if p.name not in farm_names]
    if on_notice is not None:  # what the search leaves out of the space, and why
        for line in dropped_combinations(experiment, evaluated):
            on_notice(line)
    with campaign_lease(experiment, on_notice) as lease:
        with refused_writes_as_errors(run_dir, RESUME_ADVICE):
            studies = open_experiment_studies(experiment, evaluated=evaluated)
            declared = [spec.to_dict() for spec in experiment.space.metric_specs()]
            for study in studies.values():
                # Results and reports read units and directions of declared metrics from it.
                study.set_user_attr(StudyAttr.METRICS, declared)
            progress = {name: study_progress(study) for name, study in studies.items()}
        budget = experiment.spec.budget.trials
        searched = campaign_finished(progress, budget)
        looks_left = _second_looks_left(experiment, studies, farm_names) if searched else 0
        duels_left = _duels_left(experiment, studies, farm_names) if searched else 0
        notice = resume_notice(progress, budget, duels_left, looks_left)
        if notice is not None and on_notice is not None:
            on_notice(notice)
        # A finished campaign starts no dispatcher: Ray would take seconds to find nothing to do.
        if not campaign_finished(progress, budget, duels_left + looks_left):
            from dse.search import (
                SearchLoop,  # the farm's dispatcher, scipy: not before
                run_duels,
            )

            if not searched:  # one candidate built here, its output judged
                check_model_output(experiment, on_farm)
            dispatcher = make_dispatcher(experiment, evaluator, on_farm, address)
            try:
                loop = SearchLoop(experiment, studies, dispatcher, run_dir,
                                  on_trial=on_trial, evaluated=evaluated,
                                  lease_check=lease.check)
                if not searched:
                    loop.run()
                    if on_notice is not None:
                        _say_exhausted(loop, on_notice)
                # Trials not measured cleanly, once more now that the search is done.
                _second_looks(loop, on_notice)
                # Close calls on each farm device's front, timed side by side (measurement.duels).
                with refused_writes_as_errors(run_dir, RESUME_ADVICE):
                    run_duels(experiment, studies, dispatcher, farm_names,
                              lease_check=lease.check, on_notice=on_notice)
            except DseError:
                if report:  # the run stopped (too many failures, a full disk): what was measured
                    _report_what_fits(experiment, run_dir)  # still gets its tables, where it fits
                raise
            finally:
                dispatcher.cancel()  # the workers go; caches on disk stay for the next run
    dashboard = write_report(experiment)[2] if report else None
    return CampaignResult(experiment, run_dir, dashboard)


def _duels_left(experiment: Experiment, studies: Mapping[str, optuna.Study],
                farm: Collection[str]) -> int:
    """How many duels of close calls the farm devices' studies still wait for."""
    from dse.search import pending_pairs

    objectives = [o.metric for o in experiment.space.objectives]
    return sum(len(pending_pairs(studies[name], objectives, experiment.spec.measurement.duels))
               for name in farm)


def _second_looks_left(experiment: Experiment, studies: Mapping[str, optuna.Study],
                       farm: Collection[str]) -> int:
    """How many trials the farm devices' studies still owe a second look."""
    from dse.search import pending_second_looks

    objectives = [o.metric for o in experiment.space.objectives]
    spec = experiment.spec.measurement
    return sum(len(pending_second_looks(studies[name], objectives, spec.second_looks,
                                        spec.second_looks_near_front)) for name in farm)


def _second_looks(loop: SearchLoop, on_notice: Callable[[str], object] | None) -> None:
    """The second-look round (:meth:`SearchLoop.second_looks`), announced per device."""
    def announce(name: str, owed: Sequence[optuna.trial.FrozenTrial]) -> None:
        if on_notice is None:
            return
        unclean = [t.number for t in owed
                   if t.user_attrs.get(TrialAttr.MEASUREMENT_QUALITY) != "ok"]
        near = [t.number for t in owed if t.user_attrs.get(TrialAttr.MEASUREMENT_QUALITY) == "ok"]
        said = [f"{_numbers(unclean)} not measured cleanly" if unclean else "",
                f"{_numbers(near)} near the front" if near else ""]
        on_notice(f"{name}: {len(owed)} trial{'' if len(owed) == 1 else 's'} measured once "
                  f"more (second looks at {'; '.join(filter(None, said))})")

    loop.second_looks(announce)


def _numbers(numbers: Sequence[int]) -> str:
    return ", ".join(f"#{number}" for number in numbers)


def _say_exhausted(loop: SearchLoop, on_notice: Callable[[str], object]) -> None:
    for name in loop.exhausted_profiles():
        search = loop.searches[name]
        on_notice(f"{name}: stopped short of budget.trials with {search.completed} distinct "
                  f"candidates measured: the sampler proposed only candidates already measured "
                  f"{search.repeats_in_a_row} times in a row (the space holds no more it finds)")
