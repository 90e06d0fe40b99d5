"""When failures stop a run: every candidate the sampler proposes on a device failed,
``budget.max_failed`` failed or infeasible trials, or the first ``budget.stop_after_same_failure``
distinct candidates the farm measured all failing for one same reason (a model that cannot work:
every candidate after them would fail alike). Each stop is one line naming the reason in full.
A replay table's or custom evaluator's results do not count for that last rule: one reason for
many candidates (``not in the recorded table``) is what a sparse table says, not a broken model.

Only a measurement counts: a result reused (a repeat of a candidate, or a candidate answered from
its architecture's recorded failure) spends nothing and is no new failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dse.core import DseError


class FailureStops:
    """What this run's measurements have said so far, and the stops they call for.

    ``max_failed``: ``budget.max_failed``; ``same_failure``: ``budget.stop_after_same_failure``
    (0: never stop on a run of one reason).
    """

    def __init__(self, experiment: Path, max_failed: int, same_failure: int) -> None:
        self.experiment = experiment
        self.max_failed = max_failed
        self.same_failure = same_failure
        self.failed = 0
        self.last_failure = ""
        # (status, reason) of the first measurements of the run while all failed alike; None once
        # one completed or failed otherwise (the rule is about the run's start).
        self._first: list[tuple[str, str]] | None = []

    def measured(self, where: str, status: str, reason: str, *, farm: bool = True) -> None:
        """A measurement's outcome (``where``: ``<device> trial <number>``; ``farm``: measured by
        a device of the farm, not a replay table or evaluator)."""
        if status != "ok":
            self.failed += 1
            self.last_failure = f"{where} {status}: {reason}"
        first = self._first
        if not farm:
            return
        if first is None or len(first) >= max(self.same_failure, 1):
            return
        if status == "ok" or (first and first[0] != (status, reason)):
            self._first = None
        else:
            first.append((status, reason))

    def same_failure_stop(self) -> DseError | None:
        """The error that stops a run whose first ``same_failure`` measurements all failed with
        one reason, none completed; None otherwise."""
        first = self._first
        if not self.same_failure or first is None or len(first) < self.same_failure:
            return None
        status, reason = first[0]
        return DseError(
            f"{self.experiment}: stopped early: the first {self.same_failure} distinct candidates "
            f"measured in this run were all {status} for the same reason, none completed "
            f"(budget.stop_after_same_failure: {self.same_failure}): {reason}")

    def check(self, all_failed_devices: Sequence[str], budget_open: bool, completed: int,
              budget_total: int) -> None:
        """Raise the DseError of the first stop that applies: the same reason for the run's first
        candidates; a device whose every proposed candidate failed (``all_failed_devices``: the
        devices whose sampler proposes only failed candidates, none completed); max_failed while
        some budget is open (``completed`` of ``budget_total`` measured to an ok result)."""
        stop = self.same_failure_stop()
        if stop is not None:
            raise stop
        if self.failed and all_failed_devices:
            raise DseError(
                f"{self.experiment}: every candidate the sampler proposes on a device failed "
                f"({self.failed} distinct failed or infeasible in this run, none completed); "
                f"last: {self.last_failure}")
        if self.failed >= self.max_failed and budget_open:
            raise DseError(
                f"{self.experiment}: budget.max_failed: stopped after {self.failed} failed or "
                f"infeasible trials in this run ({completed} of {budget_total} completed); "
                f"last: {self.last_failure}")
