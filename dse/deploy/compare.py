"""A verification's verdict: the latency measured now against the one recorded at export, each
with its 95 % interval (floored by the device's run-to-run variation where it was calibrated:
the between-run intervals of ``dse calibrate``), and the model's accuracy on the bundle's inputs.

A latency regressed when it is slower by more than the tolerance *and* its interval lies wholly
above the recorded one: a change inside either interval is noise the measurement cannot tell from
none, and a significant change smaller than the tolerance is one nobody asked to be told about.
Improved is the mirror image; anything else passes. That is one run's verdict: across runs, a
suspected regression is confirmed or dismissed by :mod:`dse.deploy.confirm`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

Verdict = Literal["pass", "regressed", "improved", "unchecked", "inconclusive"]

# What a verification checks by default: the median always, and whichever other latency
# percentiles the campaign optimised or constrained.
ALWAYS_CHECKED = ("latency_p50_ms",)
LATENCY_PERCENTILES = ("latency_p50_ms", "latency_p90_ms", "latency_p95_ms", "latency_p99_ms",
                       "latency_p999_ms")
# A language model's: the medians of its two phases always, the tails and the whole request's
# where the campaign optimised or constrained them.
GENERATION_ALWAYS_CHECKED = ("ttft_p50_ms", "tpot_p50_ms")
GENERATION_PERCENTILES = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
                          "e2e_p50_ms", "e2e_p99_ms")
DEFAULT_TOLERANCE = 0.10
DEFAULT_ACCURACY_TOLERANCE = 0.01


@dataclass(frozen=True)
class MetricCheck:
    """One metric now against its recorded value.

    Attributes:
        metric: its name.
        recorded: the value recorded at export; ``recorded_ci`` its 95 % interval (None: none).
        measured: the value now; ``measured_ci`` its interval.
        change_pct: ``measured / recorded - 1``, in percent (an accuracy: the difference, in
            percentage points).
        verdict: ``pass``, ``regressed``, ``improved``, ``unchecked`` (a side is missing), or
            ``inconclusive`` (the runs neither confirmed nor dismissed a suspected regression:
            :mod:`dse.deploy.confirm`).
        why: the reasoning, in one line.
        run: which run of the verification the figures come from (1: the first; 2 on: the
            fresh runs that confirmed or dismissed a suspicion).
    """

    metric: str
    recorded: float | None
    recorded_ci: tuple[float, float] | None
    measured: float | None
    measured_ci: tuple[float, float] | None
    change_pct: float | None
    verdict: Verdict
    why: str
    run: int = 1


@dataclass(frozen=True)
class Comparison:
    """Every check, and the verdict they give together: ``regressed`` when any regressed, else
    ``inconclusive`` when any is, else ``improved`` when any improved, else ``pass``."""

    checks: list[MetricCheck] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        verdicts = {check.verdict for check in self.checks}
        if "regressed" in verdicts:
            return "regressed"
        if "inconclusive" in verdicts:
            return "inconclusive"
        return "improved" if "improved" in verdicts else "pass"


def interval(metrics: Mapping[str, float], name: str) -> tuple[float, float] | None:
    """The 95 % interval recorded beside latency metric ``name`` (``..._ci_low_ms`` and
    ``..._ci_high_ms``), or None."""
    stem = name.removesuffix("_ms")
    low, high = metrics.get(f"{stem}_ci_low_ms"), metrics.get(f"{stem}_ci_high_ms")
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return None
    return float(low), float(high)


def checked_latencies(objectives: Sequence[str], generative: bool = False) -> list[str]:
    """The latency percentiles a verification decides on: the median and the campaign's (a
    language model's: the medians of TTFT and TPOT, and the campaign's percentiles of them and
    of the whole request)."""
    names, always = ((GENERATION_PERCENTILES, GENERATION_ALWAYS_CHECKED) if generative
                     else (LATENCY_PERCENTILES, ALWAYS_CHECKED))
    return [name for name in names if name in always or name in objectives]


def compare_latency(name: str, recorded: Mapping[str, float], measured: Mapping[str, float],
                    tolerance: float) -> MetricCheck:
    """Latency ``name`` (lower is better) now against as recorded."""
    old, new = _value(recorded, name), _value(measured, name)
    old_ci, new_ci = interval(recorded, name), interval(measured, name)
    if old is None or new is None or old <= 0:
        side = "recorded" if old is None or old <= 0 else "measured now"
        return MetricCheck(name, old, old_ci, new, new_ci, None, "unchecked",
                           f"no value {side}")
    change = new / old - 1
    # An interval that is missing (too few samples) counts as the point itself.
    old_low, old_high = old_ci or (old, old)
    new_low, new_high = new_ci or (new, new)
    if change > tolerance and new_low > old_high:
        verdict: Verdict = "regressed"
        why = (f"{change:+.1%}, beyond the {tolerance:.0%} tolerance, and its interval "
               f"[{new_low:.4g}, {new_high:.4g}] ms lies above the recorded "
               f"[{old_low:.4g}, {old_high:.4g}] ms")
    elif change < -tolerance and new_high < old_low:
        verdict = "improved"
        why = (f"{change:+.1%}, beyond the {tolerance:.0%} tolerance, and its interval lies "
               f"below the recorded one")
    elif abs(change) <= tolerance:
        verdict, why = "pass", f"{change:+.1%}, within the {tolerance:.0%} tolerance"
    else:
        verdict, why = "pass", (f"{change:+.1%}, but the intervals [{new_low:.4g}, "
                                f"{new_high:.4g}] and [{old_low:.4g}, {old_high:.4g}] ms "
                                f"overlap: not a significant change")
    return MetricCheck(name, old, old_ci, new, new_ci, 100 * change, verdict, why)


def compare_accuracy(name: str, recorded: float | None, measured: float | None,
                     tolerance: float) -> MetricCheck:
    """An accuracy-like score (higher is better, in [0, 1]) on the bundle's inputs."""
    if recorded is None or measured is None:
        return MetricCheck(name, recorded, None, measured, None, None, "unchecked",
                           "no value " + ("recorded" if recorded is None else "measured now"))
    change = measured - recorded
    if change < -tolerance:
        verdict: Verdict = "regressed"
        why = f"{100 * change:+.2f} points, beyond the {100 * tolerance:.2g}-point tolerance"
    elif change > tolerance:
        verdict, why = "improved", f"{100 * change:+.2f} points"
    else:
        verdict, why = "pass", (f"{100 * change:+.2f} points, within the "
                                f"{100 * tolerance:.2g}-point tolerance")
    return MetricCheck(name, recorded, None, measured, None, 100 * change, verdict, why)


def latency_checks(recorded: Mapping[str, float], measured: Mapping[str, float],
                   objectives: Sequence[str], tolerance: float, run: int = 1,
                   generative: bool = False) -> list[MetricCheck]:
    """Each latency a verification decides on (a ``generative`` model's phases), measured by
    run number ``run``."""
    return [replace(compare_latency(name, recorded, measured, tolerance), run=run)
            for name in checked_latencies(objectives, generative)]


def score_checks(scores: Mapping[str, tuple[float | None, float | None]],
                 tolerance: float) -> list[MetricCheck]:
    """Each accuracy-like score of ``scores`` (name -> (recorded, measured))."""
    return [compare_accuracy(name, old, new, tolerance) for name, (old, new) in scores.items()]


def _value(metrics: Mapping[str, float], name: str) -> float | None:
    value = metrics.get(name)
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None
