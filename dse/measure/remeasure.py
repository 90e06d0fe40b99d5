"""When a candidate's latency run is measured again, and how: the re-measurement policy.

A run can fall short in four ways, each with its own remedy:

- its window was *disturbed* (other work took the device) or *unstable* (the machine changed
  state inside it): the same run again after ``interference.wait_s``, up to
  ``interference.max_remeasures`` times, with ``interference.action: remeasure``;
- it is *underpowered* (even extended to its ceiling, it stayed below a sample floor): once more
  at a quieter moment (also after the interference re-measurements are used up), with twice the
  calls asked of it, since a run that only just missed the floor did so because its calls were
  more correlated than its first block showed;
- it is *imprecise* (a required percentile's interval is wider than ``measurement.precision``):
  once more with a window twice as long and twice the blocks, its ceiling unchanged. More calls
  narrow a tail's interval; more blocks narrow what the blocks' disagreement adds (the machine's
  speed moving between them): the standard error of their medians falls with their number, and
  the t factor with its degrees of freedom (4.30/√3 = 2.5 for three blocks, 2.57/√6 = 1.05 for
  six, per standard deviation of the block medians).

Each remedy is tried in that order, the first that applies and is not used up; the last run is
the one recorded, with why each earlier one was measured again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dse.measure.quality_labels import imprecise, unstable
from dse.measure.stats import LatencyStats
from dse.spec import InterferenceSpec

#: The most blocks a re-measurement asks for (``measurement.blocks`` allows as many).
MAX_BLOCKS = 50

#: The kinds of re-measurement, as :func:`next_run` names them.
INTERFERENCE, UNDERPOWERED, IMPRECISE = "interference", "underpowered", "imprecise"


@dataclass(frozen=True)
class NextRun:
    """A run to make: which remedy (``kind``), why (one line), with which harness arguments."""

    kind: str
    reason: str
    arguments: dict[str, Any]


def next_run(stats: LatencyStats, disturbance: str, done: Sequence[str],
             arguments: Mapping[str, Any], policy: InterferenceSpec,
             precision: Mapping[str, float]) -> NextRun | None:
    """The run to make after ``stats`` (its window's ``disturbance``, "" when clean), given the
    kinds of the re-measurements ``done`` so far and the campaign's harness ``arguments``; None
    when the run stands. ``precision`` is the required percentiles' targets, by name."""
    problem = disturbance or unstable(stats)
    if (problem and policy.action == "remeasure"
            and done.count(INTERFERENCE) < policy.max_remeasures):
        return NextRun(INTERFERENCE, problem, dict(arguments))
    if stats.underpowered and UNDERPOWERED not in done:
        more = min(2 * max(stats.n, int(arguments["min_iters"])), int(arguments["max_iters"]))
        why = (f"underpowered: {stats.n} calls in {stats.seconds:.1f} s were short of the "
               f"sample floor ({stats.min_samples} independent calls)")
        return NextRun(UNDERPOWERED, why, {**arguments, "min_iters": more})
    wide = imprecise(stats, precision)
    # A disturbed or unstable run is labelled so whatever its precision: a longer window of a
    # machine in two states would be precise about neither.
    if wide and not problem and not stats.underpowered and IMPRECISE not in done:
        seconds = 2 * float(arguments["max_seconds"])
        blocks = min(2 * int(arguments["blocks"]), MAX_BLOCKS, int(arguments["max_iters"]))
        return NextRun(IMPRECISE, wide, {
            **arguments, "min_seconds": seconds, "max_seconds": seconds, "blocks": blocks,
            "max_extension": max(1.0, float(arguments["max_extension"]) / 2)})
    return None
