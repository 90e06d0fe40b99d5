"""A duel on the device: two prepared candidates of one worker process timed against each other
(:func:`dse.measure.duel.run_duel`) inside one telemetry window, the window judged for other
work by the campaign's interference policy, and a disturbed duel timed once more.

The device worker (:meth:`dse.farm.worker.DeviceWorker.duel`) builds both candidates, holds the
node lock and calls :func:`duel_prepared`; what crosses back to the driver is plain data.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dse.core import Candidate
from dse.measure import DuelRun, Probe, run_duel
from dse.spec import MeasureSpec, TrainingSpec
from dse.trial.telemetry_window import TelemetryWindow

if TYPE_CHECKING:
    from dse.trial.prepare import PreparedCandidate


@dataclass(frozen=True)
class DuelRequest:
    """Two measured trials of one device to time against each other: their candidates (built
    again from the caches), how they were trained and measured (``measure.duels``, the timer and
    the interference policy apply), and the latency quantiles to order."""

    a: Candidate
    b: Candidate
    training: TrainingSpec
    measure: MeasureSpec
    quantiles: tuple[float, ...]


@dataclass(frozen=True)
class DuelReport:
    """What the device measured: the duel (the last one, if it was timed again), whether its
    window was disturbed beyond the policy even so (``disturbance`` says how; its verdicts are
    then not to be used), how many times it was timed, and where and when."""

    run: DuelRun
    disturbed: bool
    disturbance: str
    attempts: int
    device_id: str
    window_start: float
    window_end: float


def duel_prepared(prepared_a: PreparedCandidate, prepared_b: PreparedCandidate,
                  request: DuelRequest, *, probes: list[Probe], device_id: str) -> DuelReport:
    """Time ``prepared_a`` against ``prepared_b`` with the device's ``probes`` around the
    window; a window other work disturbed (``measurement.interference``) is timed once more after
    the policy's wait (``remeasure``), and one still disturbed — or disturbed at all under
    ``flag`` — is reported so; ``ignore`` records nothing of it."""
    spec, policy = request.measure.duels, request.measure.interference
    attempts = 0
    while True:
        attempts += 1
        # Bound afresh for each window, as a runner's bound call is meant to be.
        # What a deployment calls: each example bound to its runtime once.
        calls: tuple[Callable[[], object], Callable[[], object]] = (
            prepared_a.runner.bound_call(prepared_a.example),
            prepared_b.runner.bound_call(prepared_b.example))
        window = TelemetryWindow(probes, {})
        try:
            run = run_duel(*calls, quantiles=request.quantiles, max_seconds=spec.max_seconds,
                           block_seconds=spec.block_seconds, min_rounds=spec.min_rounds,
                           margin=spec.min_difference, timer=request.measure.timer,
                           on_window=window.mark)
        finally:
            window.close()
        why = "" if policy.action == "ignore" else window.disturbance(policy, speed=False)
        if not why or policy.action != "remeasure" or attempts > 1:
            return DuelReport(run, bool(why), why, attempts, device_id, window.start, window.end)
        time.sleep(policy.wait_s)
