"""What run_campaign sets up around its search loop: metrics, the farm check, dispatcher and lease,
and how far a resumed campaign already is (a finished one needs no dispatcher at all)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from dse.core import SpecError
from dse.spec import Experiment

if TYPE_CHECKING:
    from dse.search import JobDispatcher, Lease, StudyProgress
    from dse.spec import Evaluator, HardwareProfile


def declare_metrics(experiment: Experiment) -> None:
    """Make the space's declared metrics known to the metric lookups (see dse.core.metrics.declare)."""
    from dse.core import declare

    try:
        declare(experiment.space.metric_specs())
    except ValueError as exc:
        raise SpecError([f"{experiment.path.parent / experiment.spec.search_space}: metrics: "
                         f"{exc}"]) from None


def check_farm_can_measure(experiment: Experiment, on_farm: list[HardwareProfile]) -> None:
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


def check_model_output(experiment: Experiment, on_farm: list[HardwareProfile]) -> None:
    """Before the farm works on a factory's or ONNX file's candidates: one built here, one
    forward, its output judged (``dse.models.output_check``); SpecError, one line a problem, when
    every candidate would fail alike. Nothing to check without devices on the farm."""
    from dse.models import CHECK_SECONDS, space_output_problems

    if not on_farm:
        return
    problems = space_output_problems(
        experiment.path.parent / experiment.spec.search_space, experiment.space,
        min(CHECK_SECONDS, experiment.spec.budget.trial_timeout_s))
    if problems:
        raise SpecError(problems)


def make_dispatcher(experiment: Experiment, evaluator: Evaluator | None,
                    on_farm: list[HardwareProfile], address: str | None) -> JobDispatcher:
    """In-process evaluators for replay devices (their tables) and, with an evaluator, for every
    other device; the farm for the devices left, on Ray, started only when some are left."""
    from dse.search import EvaluatorDispatcher, MixedDispatcher, ReplayEvaluator, known_metrics

    local: dict[str, Evaluator] = {}
    for profile in experiment.devices:
        if profile.table is not None:
            local[profile.name] = ReplayEvaluator(profile.table, experiment.space)
        elif evaluator is not None:
            local[profile.name] = evaluator
    evaluators = EvaluatorDispatcher(local, known_metrics(experiment.space))
    if not on_farm:
        return evaluators

    from dse.farm import Dispatcher, connect, start_embedded

    address = address or experiment.spec.farm.address
    if address:
        connect(address)
    else:
        start_embedded(on_farm)
    farm_spec = experiment.spec.farm
    deployment = experiment.space.deployment
    farm = Dispatcher(on_farm, experiment.cache_dir, max_retries=farm_spec.max_retries,
                      quarantine_after=farm_spec.quarantine_after,
                      backends=None if deployment is None else frozenset(deployment.backends),
                      generative=experiment.space.generative)
    return MixedDispatcher(farm, evaluators) if local else farm


@contextmanager
def campaign_lease(experiment: Experiment,
                   on_notice: Callable[[str], object] | None) -> Iterator[Lease]:
    """Hold the campaign's lease (one driver per campaign) while the block runs; a lease taken
    over from a dead driver is said once, through ``on_notice`` and the ``dse`` logger."""
    from dse.search import Lease
    from dse.storage import RESUME_ADVICE, refused_writes_as_errors

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


class ResumeNotice(str):
    """The notice that a run resumes a campaign (``resuming: 3 of 10 trials done``), a plain
    line of text that also carries its counts for a progress display: ``done`` and ``total``,
    over every device."""

    done: int
    total: int

    def __new__(cls, text: str, done: int, total: int) -> ResumeNotice:
        notice = super().__new__(cls, text)
        notice.done, notice.total = done, total
        return notice


def resume_notice(progress: Mapping[str, StudyProgress], budget: int,
                  duels_left: int = 0, looks_left: int = 0) -> ResumeNotice | None:
    """``resuming: N of M trials done`` (per device when there are several, and whether the
    budget is already met, with the second looks and duels still to run) for a campaign whose
    studies hold trials; None for a new one."""
    if not any(p.started for p in progress.values()):
        return None
    done = sum(min(p.completed, budget) for p in progress.values())
    total = budget * len(progress)
    text = f"resuming: {done} of {total} trials done"
    if len(progress) > 1:
        text += " (" + ", ".join(f"{name} {p.completed} of {budget}"
                                 for name, p in progress.items()) + ")"
    if campaign_finished(progress, budget, duels_left + looks_left):
        text += "; every device has its budget.trials: nothing left to measure"
    elif campaign_finished(progress, budget):
        left = [f"{looks_left} second look{'' if looks_left == 1 else 's'}" if looks_left else "",
                f"{duels_left} duel{'' if duels_left == 1 else 's'} of close calls"
                if duels_left else ""]
        text += f"; every device has its budget.trials; {' and '.join(filter(None, left))} left " \
                f"to run"
    return ResumeNotice(text, done, total)


def campaign_finished(progress: Mapping[str, StudyProgress], budget: int,
                      left: int = 0) -> bool:
    """Every device's study has its budget of distinct candidates measured and no trial a
    stopped driver left running (which the next run recovers), and nothing of the search's end
    is left to run (``left``: second looks, :func:`dse.search.second_looks.pending_second_looks`,
    and duels of close calls, :func:`dse.search.duels.pending_pairs`): a run has nothing to
    do."""
    return left == 0 and all(p.completed >= budget and p.running == 0
                                   for p in progress.values())
