"""The duels at the end of a campaign's search: each farm device's pending pairs
(:func:`dse.search.duels.pending_pairs`) handed to its workers (``DeviceWorker.duel`` through the
dispatcher: retries, timeouts and replacement as for a trial), every answer turned into a
:class:`~dse.search.duel_records.DuelRecord` and kept on the device's study as it arrives, so an
interrupted round loses only the duels still running."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING

from dse.core import DeviceError
from dse.farm import Done, Job
from dse.measure import PairedRatio, verdict
from dse.search.duel_records import (
    DISTURBED,
    FAILED,
    MEASURED,
    DuelRecord,
    MetricVerdict,
    store_record,
)
from dse.search.duels import THROUGHPUT, DuelPair, duel_quantile, pending_pairs
from dse.trial import DuelReport, DuelRequest, NodeLock, current_node_id

if TYPE_CHECKING:
    import optuna

    from dse.search.loop import JobDispatcher
    from dse.spec import Experiment


def pending_duels(experiment: Experiment, studies: Mapping[str, optuna.Study],
                  farm: Collection[str]) -> dict[str, list[DuelPair]]:
    """Per farm device, the pairs still to duel (none for a device measured by an evaluator or
    a replay table: their values have no run-to-run drift to cancel)."""
    objectives = [o.metric for o in experiment.space.objectives]
    spec = experiment.spec.measurement.duels
    return {name: pairs for name in farm
            if (pairs := pending_pairs(studies[name], objectives, spec))}


def run_duels(experiment: Experiment, studies: Mapping[str, optuna.Study],
              dispatcher: JobDispatcher, farm: Collection[str], *,
              lease_check: Callable[[], None] = lambda: None,
              on_notice: Callable[[str], object] | None = None) -> list[DuelRecord]:
    """Duel every farm device's pending pairs, all devices at once, and record each verdict on
    its study; the records written, in the order they arrived."""
    pending = pending_duels(experiment, studies, farm)
    if not pending:
        return []
    objectives = [o.metric for o in experiment.space.objectives]
    constraints = [c.metric for c in experiment.space.constraints]
    measure = experiment.spec.measurement.for_metrics(objectives + constraints)
    keys = itertools.count()
    jobs: dict[int, tuple[str, DuelPair]] = {}
    for name, pairs in pending.items():
        if on_notice is not None:
            on_notice(f"{name}: {len(pairs)} duel{'' if len(pairs) == 1 else 's'} of close calls "
                      f"on the front (at most {measure.duels.max_seconds:g} s of timing each)")
        for pair in pairs:
            key = next(keys)
            request = DuelRequest(pair.candidate_a, pair.candidate_b, experiment.space.training,
                                  measure, pair.quantiles)
            jobs[key] = (name, pair)
            dispatcher.submit(Job(key, pair.candidate_a, experiment.space.training, measure,
                                  experiment.spec.budget.trial_timeout_s, method="duel",
                                  args=(request,)))
    lock = NodeLock(current_node_id())
    written: list[DuelRecord] = []
    while jobs:
        lease_check()
        try:
            finished = dispatcher.wait()
        except DeviceError as exc:  # no device of a profile left: the search's results stand
            if on_notice is not None:
                on_notice(f"{len(jobs)} duel(s) not run: {exc}; the next run tries again")
            break
        for done in finished:
            name, pair = jobs.pop(done.job.key)
            record = duel_record(pair, done)
            with lock.shared():  # the driver's writes are other dse work on a device's node
                store_record(studies[name], record)
            written.append(record)
    return written


def duel_record(pair: DuelPair, done: Done) -> DuelRecord:
    """What a finished duel job says of ``pair``: its verdicts, or why it has none that count."""
    report = done.answer
    if not isinstance(report, DuelReport):
        reason = report if isinstance(report, str) else done.measurement.reason
        return DuelRecord(pair.a, pair.b, FAILED, reason or "no answer", device_id=done.device_id)
    verdicts = tuple(v for name in pair.metrics
                     if (v := metric_verdict(name, report.run.ratios.get(duel_quantile(name)),
                                             pair, report.run.margin)) is not None)
    status = DISTURBED if report.disturbed else MEASURED
    return DuelRecord(pair.a, pair.b, status, report.disturbance, verdicts, report.run.rounds,
                      report.run.seconds, report.device_id)


def metric_verdict(name: str, latency: PairedRatio | None, pair: DuelPair,
                   margin: float) -> MetricVerdict | None:
    """The duel's order on objective ``name`` from A's latency percentile over B's (beyond
    ``margin``: :func:`dse.measure.duel_stats.verdict`); None where the calls were too few for
    an interval. Throughput is the batch over the median latency, so its ratio is the batches'
    ratio over the medians' (its interval turned over), and its verdict the one of B's
    throughput over A's, read as latency."""
    if latency is None:
        return None
    if name != THROUGHPUT:
        return MetricVerdict(name, verdict(latency, margin), latency.ratio, latency.low,
                             latency.high)
    batches = pair.candidate_a.batch_size / pair.candidate_b.batch_size
    ratio, low, high = batches / latency.ratio, batches / latency.high, batches / latency.low
    return MetricVerdict(name, verdict(PairedRatio(1 / ratio, 1 / high, 1 / low), margin),
                         ratio, low, high)
