"""The statistics of a duel: two candidates timed in alternating short blocks (round ``i`` holds
one block of each, taken back to back), and how far one's latency percentile lies from the
other's, with an interval, from those paired blocks alone.

Pairing is what makes a duel sharper than two separate runs: whatever drifts over seconds or
minutes (clocks, caches, other work, the process's state) moves both blocks of a round alike, so
it leaves their ratio alone. Each figure is a ratio A/B of latencies (below 1: A is faster):

- the median (:func:`median_ratio`): per round the log ratio of the two blocks' medians, then a
  20%-trimmed mean of those over rounds with Yuen's t-interval, so that a round another process
  hit (one block slow) moves the estimate little;
- a tail percentile (:func:`quantile_ratio`): one short block holds too few calls for a p99, so
  consecutive rounds are grouped until each group holds a couple of hundred calls of each side,
  and the same is done with the log ratios of the groups' percentiles. One spike of other work
  lands in one group, which the trimming sets aside; a ratio of percentiles pooled over the
  whole duel would be that spike's.

The verdict (:func:`verdict`) reads the interval against a margin around 1: wholly below it, A
is faster; wholly above, B is; else a tie (no difference beyond the margin shown at this budget).
The margin is the duel's ``min_difference``: separate sessions of one and the same model already
differ by a fraction of a percent (where their memory landed), and a duel is sharp enough to see
that, which is no property of either configuration.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from dse.util import student_t_quantile

Verdict = Literal["a_faster", "b_faster", "tie"]
A_FASTER: Verdict = "a_faster"
B_FASTER: Verdict = "b_faster"
TIE: Verdict = "tie"
VERDICTS: tuple[Verdict, ...] = (A_FASTER, B_FASTER, TIE)

#: The confidence of a duel's reported intervals and final verdicts.
CONFIDENCE = 0.95
#: Share of the rounds (or groups) trimmed from each end before the mean log ratio.
TRIM = 0.2


@dataclass(frozen=True)
class PairedRatio:
    """A's figure over B's, and its interval (``low`` <= ``ratio`` <= ``high``, all > 0)."""

    ratio: float
    low: float
    high: float


def verdict(ratio: PairedRatio, margin: float = 0.0) -> Verdict:
    """``a_faster`` when the interval of A/B lies wholly below ``1 / (1 + margin)``,
    ``b_faster`` wholly above ``1 + margin``, else ``tie``: a difference within ``margin`` is
    not one a verdict names (two sessions of one model already differ that much)."""
    if ratio.high < 1.0 / (1.0 + margin):
        return A_FASTER
    if ratio.low > 1.0 + margin:
        return B_FASTER
    return TIE


def within(ratio: PairedRatio, margin: float) -> bool:
    """Whether the whole interval lies within ``margin`` of 1: the two are shown to be equal,
    as far as a verdict goes."""
    return 1.0 / (1.0 + margin) <= ratio.low and ratio.high <= 1.0 + margin


def median_ratio(a_blocks: Sequence[Sequence[float]], b_blocks: Sequence[Sequence[float]],
                 confidence: float = CONFIDENCE) -> PairedRatio | None:
    """A's median latency over B's from paired blocks (``a_blocks[i]`` and ``b_blocks[i]``
    timed in the same round): the trimmed mean of the rounds' log ratios of block medians, with
    Yuen's trimmed t-interval; None for fewer than 3 rounds."""
    logs = np.log([float(np.median(a)) / float(np.median(b))
                   for a, b in zip(a_blocks, b_blocks, strict=True)])
    if len(logs) < 3 or not np.all(np.isfinite(logs)):
        return None
    centre, half = trimmed_t_interval(logs, TRIM, confidence)
    return PairedRatio(math.exp(centre), math.exp(centre - half), math.exp(centre + half))


def trimmed_t_interval(values: npt.ArrayLike, trim: float,
                       confidence: float) -> tuple[float, float]:
    """Yuen's interval of the ``trim``-trimmed mean of ``values``: its centre and half-width
    (the winsorized variance, ``n - 2g - 1`` degrees of freedom; with ``g`` = 0 the plain
    t-interval of the mean)."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    n = len(ordered)
    g = math.floor(trim * n)
    kept = ordered[g:n - g]
    winsorized = np.clip(ordered, ordered[g], ordered[n - g - 1])
    spread = float(np.var(winsorized, ddof=1))
    se = math.sqrt(spread) / ((1.0 - 2.0 * g / n) * math.sqrt(n))
    dof = n - 2 * g - 1
    return float(kept.mean()), student_t_quantile(0.5 + confidence / 2, dof) * se


def quantile_ratio(a_blocks: Sequence[Sequence[float]], b_blocks: Sequence[Sequence[float]],
                   quantile: float, confidence: float = CONFIDENCE) -> PairedRatio | None:
    """A's ``quantile`` of latency over B's from paired blocks: consecutive rounds grouped so
    that each group holds :func:`calls_for_tail` calls of each side (enough for the percentile
    to be more than the group's largest call), per group the log ratio of the two sides'
    percentiles, then as for the median (trimmed mean, Yuen's interval); None for fewer than 3
    groups."""
    if len(a_blocks) != len(b_blocks):
        raise ValueError(f"a_blocks and b_blocks must pair up, got {len(a_blocks)} and "
                         f"{len(b_blocks)}")
    groups = tail_groups([len(a) for a in a_blocks], [len(b) for b in b_blocks], quantile)
    if len(groups) < 3:
        return None
    logs = np.log([_quantile(a_blocks[first:last], quantile) / _quantile(b_blocks[first:last],
                                                                          quantile)
                   for first, last in groups])
    if not np.all(np.isfinite(logs)):
        return None
    centre, half = trimmed_t_interval(logs, TRIM, confidence)
    return PairedRatio(math.exp(centre), math.exp(centre - half), math.exp(centre + half))


def calls_for_tail(quantile: float) -> int:
    """Calls of one side a group needs for its ``quantile``: two beyond it (200 for p99)."""
    return math.ceil(2.0 / (1.0 - quantile) - 1e-9)


def tail_groups(a_sizes: Sequence[int], b_sizes: Sequence[int],
                quantile: float) -> list[tuple[int, int]]:
    """Consecutive rounds ``[first, last)`` grouped so that every group holds at least
    :func:`calls_for_tail` calls of each side; rounds left over join the last group."""
    needed = calls_for_tail(quantile)
    groups: list[tuple[int, int]] = []
    first, a_calls, b_calls = 0, 0, 0
    for i, (a, b) in enumerate(zip(a_sizes, b_sizes, strict=True)):
        a_calls, b_calls = a_calls + a, b_calls + b
        if a_calls >= needed and b_calls >= needed:
            groups.append((first, i + 1))
            first, a_calls, b_calls = i + 1, 0, 0
    if groups and first < len(a_sizes):
        groups[-1] = (groups[-1][0], len(a_sizes))
    return groups


def _quantile(blocks: Sequence[Sequence[float]], quantile: float) -> float:
    return float(np.quantile(np.concatenate([np.asarray(b, dtype=np.float64) for b in blocks]),
                             quantile, method="inverted_cdf"))
