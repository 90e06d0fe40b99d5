"""What run_campaign sets up around its search loop: metrics, the farm check, dispatcher and lease."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from dse.exceptions import SpecError
from dse.spec import Experiment

if TYPE_CHECKING:
    from dse.search.lease import Lease
    from dse.search.loop import JobDispatcher
    from dse.spec import HardwareProfile
    from dse.spec.loading import Evaluator


def declare_metrics(experiment: Experiment) -> None:
    """Make the space's declared metrics known to the metric lookups (see dse.metrics.declare)."""
    from dse.metrics import declare

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


def make_dispatcher(experiment: Experiment, evaluator: Evaluator | None,
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


@contextmanager
def campaign_lease(experiment: Experiment,
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
