"""The checks of an experiment that need more than one of its fields or files: the devices against
the space (distinct names, a backend in common), the timer and the latency percentiles against the
measurement protocol, the sampler's settings against the sampler and the budget, and the output
folders and storage it will write to. Each runs on whatever loaded, so one pass reports every
problem these can find; one line per problem, naming the file and the field."""

from __future__ import annotations

from pathlib import Path

from dse.core import DseError
from dse.spec.experiment import output_folders
from dse.spec.filesystem import folder_problem
from dse.spec.models import ExperimentSpec, HardwareProfile, SearchSpace
from dse.spec.sampler_settings import setting_meaning


def experiment_problems(path: Path, spec: ExperimentSpec, space: SearchSpace | None,
                        devices: list[tuple[int, HardwareProfile]]) -> list[str]:
    """Every problem of the experiment at ``path`` found across its fields and files. ``space``:
    None when the search space did not load; ``devices``: the profiles that did, each with its
    index in ``devices:``."""
    problems = sampler_problems(path, spec)
    problems.extend(_timer_check(path, spec, devices))
    if space is not None:
        problems.extend(_cross_check(path, space, devices))
        problems.extend(_percentile_check(path, spec, space))
    problems.extend(_folder_problems(path, spec))
    problems.extend(_storage_problems(path, spec))
    return problems


def sampler_problems(path: Path, spec: ExperimentSpec) -> list[str]:
    """A key of ``sampler:`` the chosen sampler does not take (``population_size`` for tpe), a
    value its settings model refuses, and a setting that leaves the sampler nothing to do within
    ``budget.trials`` (one of its ``counts_trials``: a first generation, or a random start, longer
    than the budget)."""
    from dse.plugins import SAMPLERS

    sampler = spec.sampler
    options, problems = sampler.checked_options()
    lines = [f"{path}: {problem}" for problem in problems]
    declared = SAMPLERS[sampler.name]
    trials = spec.budget.trials
    # In the model's order; none when a value was refused (options is None then).
    for key in [key for key in declared.setting_names() if key in declared.counts_trials]:
        value = getattr(options, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > trials:
            meaning = setting_meaning(sampler.name, key)
            lines.append(f"{path}: sampler.{key}: {value:,}{' ' + meaning if meaning else ''} is "
                         f"more than budget.trials ({trials:,}): the {sampler.name} sampler would "
                         f"spend the whole budget before its search begins; allowed: at most "
                         f"{trials:,}, and well under it")
    return lines


def _cross_check(path: Path, space: SearchSpace,
                 devices: list[tuple[int, HardwareProfile]]) -> list[str]:
    problems = []
    names = [d.name for _, d in devices]
    if len(set(names)) != len(names):
        problems.append(f"{path}: devices: two profiles share a name: {names}")
    wanted = set() if space.deployment is None else set(space.deployment.backends)
    for index, device in devices:
        # A replay profile without a backend list takes the space's; no deployment, no check.
        if not wanted or not device.backends:
            continue
        if not wanted & set(device.backends):
            problems.append(
                f"{path}: devices[{index}]: profile {device.name!r} runs none of the space's "
                f"backends {sorted(wanted)}; it runs {device.backends}")
    return problems


def _timer_check(path: Path, spec: ExperimentSpec,
                 devices: list[tuple[int, HardwareProfile]]) -> list[str]:
    """CUDA events time only on a CUDA device (a Jetson's GPU included)."""
    if spec.measurement.timer != "cuda":
        return []
    return [f"{path}: measurement.timer: cuda times with CUDA events, and devices[{index}] "
            f"({device.name!r}) is a {device.kind} device; allowed: host, or cuda with only "
            f"cuda and jetson devices"
            for index, device in devices if device.kind not in ("cuda", "jetson")]


def _percentile_check(path: Path, spec: ExperimentSpec, space: SearchSpace) -> list[str]:
    """A latency percentile that an objective or constraint uses needs enough samples for its
    confidence interval, and max_iters must allow them."""
    from dse.util import percentile_quantile, samples_for_ci

    metrics = [o.metric for o in space.objectives] + [c.metric for c in space.constraints]
    measure = spec.measurement.for_metrics(metrics)
    problems = []
    for name in measure.percentiles or []:
        needed = samples_for_ci(percentile_quantile(name))
        if needed > measure.max_iters:
            problems.append(
                f"{path}: measurement.max_iters: {measure.max_iters} samples can never give "
                f"latency {name} (used by {space.name}'s objectives or constraints) a 95% "
                f"confidence interval; it needs at least {needed}")
    return problems


def _folder_problems(path: Path, spec: ExperimentSpec) -> list[str]:
    """A line for each folder of :func:`output_folders` that the campaign could not create or
    write to: found at validate time, rather than as an OSError once a run has begun."""
    try:
        folders = output_folders(path, spec)
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symbolic link loop (Python 3.11)
        return [f"{path}: runs_dir: cannot resolve the output folders: {exc}"]
    problems = []
    for field, folder in folders.items():
        problem = folder_problem(folder)
        if problem is not None:
            problems.append(f"{path}: {field}: {problem}; allowed: a folder this user can "
                            f"write to, or a path where one can be created")
    return problems


def _storage_problems(path: Path, spec: ExperimentSpec) -> list[str]:
    """An ``env:NAME`` storage whose variable is unset or holds no usable URL: said at validate
    time (the form itself is checked with the field)."""
    from dse.storage import CampaignStorage

    try:
        CampaignStorage.from_setting(spec.storage, Path(), where=f"{path}: storage")
    except DseError as exc:
        return [str(exc)]
    return []
