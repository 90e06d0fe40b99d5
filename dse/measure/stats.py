"""Latency statistics: percentiles with distribution-free confidence intervals.

The CI of a quantile comes from binomial order statistics: for the q-quantile of n independent
samples, the number of samples below the true quantile is Binomial(n, q), so a pair of order
statistics (x_(l), x_(u)) brackets it with probability F(u-1) - F(l-1). No distribution is
assumed, which matters for latencies: they are skewed and often multi-modal.

Consecutive latencies are not independent, though: caches, clocks and neighbours make slow calls
come in runs, so n samples carry less information than n independent ones, and an interval that
assumed independence would be too narrow. The interval therefore uses an *effective* sample size
n / tau, where tau is the integrated autocorrelation time of the indicator series
1[x_t <= quantile] (Geyer's initial positive sequence), and maps the ranks back to the full
sample. With no autocorrelation tau = 1 and this is the textbook interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

# Loaded here, before any measurement window: the interval maths (dse.util.order_statistics) calls
# it between timed calls, and a first import there would land inside the window.
import scipy.special  # noqa: F401

from dse.core import MeasurementError

# The autocorrelation maths, re-exported for the modules and tests that read it from here.
from dse.measure.autocorrelation import autocorrelation_time as autocorrelation_time
from dse.measure.autocorrelation import autocovariances as autocovariances
from dse.measure.autocorrelation import effective_quantile_ci

# The order-statistic maths the YAML checks share with the measurement (a lower layer).
from dse.util import CONFIDENCE as CONFIDENCE
from dse.util import PERCENTILES as PERCENTILES
from dse.util import percentile_quantile as percentile_quantile
from dse.util import quantile_ci_ranks as quantile_ci_ranks
from dse.util import samples_for_ci as samples_for_ci
from dse.util import student_t_quantile

if TYPE_CHECKING:
    from dse.measure.run_to_run import RunToRun


def quantile_ci(samples: Sequence[float] | np.ndarray, q: float,
                confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """95% CI of the q-quantile of ``samples`` (in the order taken), allowing for their
    autocorrelation; None when too few (effective) samples support one."""
    data = np.asarray(samples, dtype=np.float64)
    if len(data) < 2:
        return None
    return effective_quantile_ci(data, q, autocorrelation_time(data, float(np.quantile(data, q))),
                        confidence)


def block_quantile_ci(samples: np.ndarray, block_sizes: Sequence[int], q: float,
                      confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """95% interval of the q-quantile of a run made of independent *blocks* (``block_sizes``
    partitions ``samples`` in order), from how much the blocks disagree.

    Each block's median is one repeated measurement of the machine's state, as a whole run's
    would be (after Kalibera & Jones, "Rigorous Benchmarking in Reasonable Time", 2013: variation
    is sampled at the level where it arises, here a block with its own warm-up, spread in time).
    What moves between blocks — clocks, placement, a neighbour — scales a latency
    distribution, so their disagreement is taken on the log scale: the standard error of the
    log block medians, t-distributed with blocks - 1 degrees of freedom, is a factor put around
    the pooled quantile. The interval is therefore never negative, and a block twice as slow
    widens it by a factor, whatever the quantile's size.

    Medians, not the blocks' own q-quantiles: a block of a hundred calls estimates its p99 from
    its one or two slowest calls, and a t-interval over three such estimates spanned -5.9 to
    6.9 ms around a 0.5 ms p99. A tail that differs in one block alone is held by the
    within-run interval instead (:func:`run_quantile_ci`): its slow calls are in the pool, and
    their clustering lowers the effective sample count. None with fewer than two blocks, or
    with a median that is not positive.
    """
    sizes = np.asarray(block_sizes, dtype=np.int64)
    blocks = len(sizes)
    if blocks < 2 or int(sizes.sum()) != len(samples) or (sizes < 1).any():
        return None
    medians = np.array(block_medians(samples, block_sizes))
    if (medians <= 0).any():
        return None
    standard_error = float(np.std(np.log(medians), ddof=1)) / math.sqrt(blocks)
    factor = math.exp(student_t_quantile(0.5 + confidence / 2, blocks - 1) * standard_error)
    pooled = float(np.quantile(samples, q))
    return pooled / factor, pooled * factor


def _pooled_within_ci(samples: np.ndarray, block_sizes: Sequence[int],
                      q: float) -> tuple[float, float] | None:
    """The within-run interval of the pooled samples of several blocks, with the correlation of
    consecutive calls measured inside each block (weighted by its size): measured across the
    joins, a shift between blocks would count as correlation, which is the between-block
    interval's to hold, and would wipe out the percentiles a shift makes uncertain."""
    if len(samples) < 2:
        return None
    threshold = float(np.quantile(samples, q))
    blocks = np.split(samples, np.cumsum(block_sizes)[:-1])
    taus = [autocorrelation_time(block, threshold) if len(block) > 1 else 1.0
            for block in blocks]
    tau = float(np.average(taus, weights=[len(block) for block in blocks]))
    return effective_quantile_ci(samples, q, tau, CONFIDENCE)


def run_quantile_ci(samples: np.ndarray, q: float,
                    block_sizes: Sequence[int] = ()) -> tuple[float, float] | None:
    """The interval reported for a quantile: the within-run one (:func:`quantile_ci`; with blocks,
    of the pooled samples), widened to the between-block one (:func:`block_quantile_ci`) when the
    run was measured in blocks, and never below the fastest call (:func:`above_fastest`); None
    when the samples are too few for the within-run one."""
    if len(block_sizes) < 2:
        return quantile_ci(samples, q)
    within = _pooled_within_ci(samples, block_sizes, q)
    if within is None:
        return None
    between = block_quantile_ci(samples, block_sizes, q)
    if between is None:
        return None
    return above_fastest((min(within[0], between[0]), max(within[1], between[1])),
                         float(np.min(samples)))


def above_fastest(interval: tuple[float, float] | None,
                  fastest: float) -> tuple[float, float] | None:
    """``interval`` with its lower end raised to ``fastest``, the run's fastest call: no
    percentile of the latencies a run measured lies below the fastest of them, and a bound
    there (a symmetric interval around a tail value did reach below zero) says nothing."""
    if interval is None:
        return None
    return max(interval[0], fastest), max(interval[1], fastest)


def relative_halfwidth(value: float, interval: tuple[float, float] | None) -> float:
    """The larger distance from ``value`` to an end of ``interval``, relative to ``value``: the
    precision a percentile was measured to (infinity without an interval or a positive value)."""
    if interval is None or not value > 0:
        return math.inf
    return max(value - interval[0], interval[1] - value) / value


def between_run_cv(samples: np.ndarray, block_sizes: Sequence[int]) -> float:
    """Coefficient of variation of the blocks' medians (their standard deviation over their
    mean): how far one run's median moves from the next on this device; NaN under two blocks."""
    if len(block_sizes) < 2:
        return math.nan
    return _spread(block_medians(samples, block_sizes))


def block_medians(samples: np.ndarray, block_sizes: Sequence[int]) -> list[float]:
    """Each block's median, in order."""
    return [float(np.median(block)) for block in np.split(samples, np.cumsum(block_sizes)[:-1])]


def _spread(medians: Sequence[float]) -> float:
    """Standard deviation over mean of two or more block medians."""
    mean = float(np.mean(medians))
    return float(np.std(medians, ddof=1)) / mean if mean > 0 else math.nan


def median_rel_halfwidth(samples: Sequence[float] | np.ndarray) -> float:
    """The larger distance from the median to an end of its 95% CI, relative to the median;
    infinity while there are too few samples for a CI."""
    data = np.asarray(samples, dtype=np.float64)
    ci = quantile_ci(data, 0.5)
    median = float(np.median(data)) if len(data) else 0.0
    if ci is None or median <= 0:
        return float("inf")
    return max(median - ci[0], ci[1] - median) / median


def halves_agree(samples: Sequence[float] | np.ndarray) -> bool:
    """Whether the first and second half of a run have overlapping 95% CIs of their medians.

    A run whose halves disagree was not stationary: the machine changed state inside it (another
    tenant, clock or placement changes on a shared host). Its median CI describes neither state,
    so the harness keeps measuring and records the run as non-stationary.
    """
    data = np.asarray(samples, dtype=np.float64)
    half = len(data) // 2
    first = quantile_ci(data[:half], 0.5)
    second = quantile_ci(data[half:], 0.5)
    if first is None or second is None:
        return True  # too few samples to tell; the median CI itself is still wide then
    return first[0] <= second[1] and second[0] <= first[1]


def halves_shift_pct(samples: Sequence[float] | np.ndarray) -> float:
    """How far the second half's median lies from the first half's, in percent of it (0 for a
    run too short to halve): the size of a change of machine state inside the run, where
    :func:`halves_agree` only says whether one is detectable."""
    data = np.asarray(samples, dtype=np.float64)
    half = len(data) // 2
    if half < 1:
        return 0.0
    first = float(np.median(data[:half]))
    return 100.0 * (float(np.median(data[half:])) - first) / first if first > 0 else 0.0


@dataclass(frozen=True)
class LatencyStats:
    """Summary of one single-stream latency run. Times are per call (one batch), in ms.

    ``pXX_ci_ms`` is the 95% confidence interval of that percentile, or None when the sample
    count cannot support one. ``target_met`` says whether the median's CI reached the requested
    relative half-width before a limit stopped the run. ``check_seconds`` is the part of
    ``seconds`` spent between timed calls deciding whether to stop (see the harness).
    ``min_samples`` is the floor the run had to reach (``min_iters``, and enough samples for a CI
    of each required percentile); ``underpowered`` says a cap stopped it short of that floor, or
    a required percentile still has no CI (correlated samples count for less).

    A run measured in ``blocks`` (each with its own warm-up) reports every interval widened to
    the blocks' disagreement (:func:`run_quantile_ci`), and ``between_run_cv``, the spread of the
    blocks' medians (``block_p50_ms``). ``window_calls`` counts every call made inside the
    telemetry window, the warm-ups of later blocks included: what energy is shared among.
    ``run_to_run_cv`` is the device's calibrated run-to-run variation of the median that floored
    the intervals (:mod:`dse.measure.run_to_run`; NaN when none did).

    Made by :func:`summarize` (which :func:`dse.measure_latency` calls).

    Attributes:
        n: Timed calls (samples).
        seconds: Time the timed calls took, in seconds.
        p50_ms: Median latency; ``p90_ms``, ``p95_ms``, ``p99_ms`` and ``p999_ms`` are the
            90th, 95th, 99th and 99.9th percentiles.
        p90_ms: See ``p50_ms``.
        p95_ms: See ``p50_ms``.
        p99_ms: See ``p50_ms``.
        p999_ms: See ``p50_ms``.
        p50_ci_ms: 95% CI (low, high) of the median, or None; likewise ``p90_ci_ms``,
            ``p95_ci_ms``, ``p99_ci_ms`` and ``p999_ci_ms``.
        p90_ci_ms: See ``p50_ci_ms``.
        p95_ci_ms: See ``p50_ci_ms``.
        p99_ci_ms: See ``p50_ci_ms``.
        p999_ci_ms: See ``p50_ci_ms``.
        mean_ms: Mean latency.
        std_ms: Standard deviation of the latency (0 for a single sample).
        min_ms: Fastest timed call.
        max_ms: Slowest timed call.
        iqr_ms: Interquartile range (p75 - p25).
        rel_ci: The median CI's larger half-width relative to the median (infinity without
            a CI), before any ``run_to_run`` floor.
        target_rel_ci: The relative half-width asked for.
        target_met: Whether ``rel_ci`` <= ``target_rel_ci``.
        stationary: Whether the run's two halves have overlapping median CIs (True when
            they are too short to tell).
        warmup_iters: Warm-up calls.
        warmup_seconds: Warm-up time, in seconds.
        first_call_ms: The first call, timed apart (NaN when not taken).
        timer_overhead_ns: The timer's own overhead per call (NaN when not measured).
        check_seconds: Part of ``seconds`` spent deciding whether to stop.
        min_samples: The sample floor the run had to reach.
        underpowered: Whether a cap stopped the run short of ``min_samples``, or a required
            percentile has no CI.
        halves_shift_pct: How far the second half's median lies from the first's, in percent.
        own_rel_ci: Each percentile's precision as the run reached it: its interval's larger
            half-width relative to its value (:func:`relative_halfwidth`), before any
            ``run_to_run`` floor; infinity for a percentile without an interval.
        extended: Whether the run went on past ``max_seconds`` (up to its ceiling) to reach
            its sample floor.
        block_sizes: Samples per block, in order (empty for a run of one block).
        block_p50_ms: Each block's median, in order (empty for a run of one block).
        between_run_cv: Spread of the blocks' medians (NaN under two blocks).
        window_calls: Calls made inside the telemetry window.
        run_to_run_cv: The calibrated run-to-run variation of the median that floored the
            intervals (NaN when none did).
        runtime_p50_ms: The median of the runtime's own clock over the timed calls, where
            the runtime keeps one (:class:`dse.measure.timers.RuntimeClockTap`); NaN otherwise.
        runtime_overhead_us: The median per call of the host clock less the runtime's, in us:
            the way in from Python that the runtime does not time (NaN without that clock).
        samples_ms: Every timed latency, in the order taken.

    Examples:
        >>> from dse.measure.stats import summarize
        >>> stats = summarize([1.0, 2.0, 3.0, 4.0, 5.0], seconds=0.015)
        >>> stats.n, stats.p50_ms, stats.min_ms, stats.max_ms, stats.iqr_ms
        (5, 3.0, 1.0, 5.0, 2.0)
        >>> stats.p99_ci_ms is None, stats.blocks  # 5 samples bound no p99
        (True, 1)
        >>> round(stats.throughput(batch_size=8))  # samples per second at the median
        2667
    """

    n: int
    seconds: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float
    p50_ci_ms: tuple[float, float] | None
    p90_ci_ms: tuple[float, float] | None
    p95_ci_ms: tuple[float, float] | None
    p99_ci_ms: tuple[float, float] | None
    p999_ci_ms: tuple[float, float] | None
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    iqr_ms: float
    rel_ci: float
    target_rel_ci: float
    target_met: bool
    stationary: bool
    warmup_iters: int = 0
    warmup_seconds: float = 0.0
    first_call_ms: float = float("nan")
    timer_overhead_ns: float = float("nan")
    check_seconds: float = 0.0
    min_samples: int = 0
    underpowered: bool = False
    halves_shift_pct: float = 0.0
    own_rel_ci: dict[str, float] = field(default_factory=dict)
    extended: bool = False
    block_sizes: list[int] = field(default_factory=list)
    block_p50_ms: list[float] = field(default_factory=list)
    between_run_cv: float = math.nan
    window_calls: int = 0
    run_to_run_cv: float = math.nan
    runtime_p50_ms: float = math.nan
    runtime_overhead_us: float = math.nan
    samples_ms: list[float] = field(default_factory=list, repr=False)

    @property
    def blocks(self) -> int:
        """How many independent blocks the run was measured in."""
        return max(1, len(self.block_sizes))

    def why_no_ci(self, quantile: float) -> str:
        """Why the ``quantile`` has no interval: too few (effective) samples, or blocks whose
        medians give no factor (a median that is not positive)."""
        name = next((n for n, q in PERCENTILES if q == quantile), f"the {quantile:g} quantile")
        data = np.asarray(self.samples_ms, dtype=np.float64)
        within = (_pooled_within_ci(data, self.block_sizes, quantile) if self.block_sizes
                  else quantile_ci(data, quantile))
        if within is None:
            extended = " (extended to its ceiling)" if self.extended else ""
            return (f"{self.n} timed calls in {self.seconds:.1f} s{extended} are too few for a "
                    f"95% confidence interval of {name} (it needs at least "
                    f"{samples_for_ci(quantile)} independent ones; consecutive calls count for "
                    f"less when they are correlated)")
        spread = ", ".join(f"{v:.4g}" for v in self.block_p50_ms)
        return (f"the {self.blocks} measurement blocks give {name} no interval (block medians "
                f"{spread} ms)")

    def throughput(self, batch_size: int) -> float:
        """Samples per second at ``batch_size`` from the median latency: what a typical call
        delivers. The mean would let a few tail spikes (another process taking the core) set the
        figure; under load it was seen 0.64-2.0x off an independent loop, the median within 5%."""
        return batch_size * 1000.0 / self.p50_ms


def summarize(samples_ms: Sequence[float], *, seconds: float, target_rel_ci: float = 0.01,
              warmup_iters: int = 0, warmup_seconds: float = 0.0,
              first_call_ms: float = float("nan"),
              timer_overhead_ns: float = float("nan"), check_seconds: float = 0.0,
              min_samples: int = 0, required_quantiles: Sequence[float] = (),
              block_sizes: Sequence[int] = (), window_calls: int = 0,
              run_to_run: RunToRun | None = None, extended: bool = False) -> LatencyStats:
    """Every statistic of a latency sample (``samples_ms`` in the order they were taken);
    ``underpowered`` when there are fewer than ``min_samples`` or a ``required_quantiles``
    percentile has no CI. ``block_sizes``, when the run was measured in blocks, partitions the
    samples in order (see :func:`run_quantile_ci`). ``run_to_run``, the device's calibrated
    run-to-run variation, widens every interval to at least its floor; ``rel_ci``,
    ``own_rel_ci`` and ``target_met`` stay the precision the run itself reached. ``extended``
    records that the harness went past ``max_seconds`` to reach the floors."""
    if len(samples_ms) == 0:
        raise MeasurementError("no latency samples were taken")
    data = np.asarray(samples_ms, dtype=np.float64)
    sizes = list(block_sizes) if len(block_sizes) > 1 else []
    if sizes and sum(sizes) != len(data):
        raise ValueError(f"block sizes add up to {sum(sizes)}, not to the {len(data)} samples")
    ordered = np.sort(data)
    values = {name: float(np.quantile(ordered, q)) for name, q in PERCENTILES}
    cis = {name: run_quantile_ci(data, q, sizes) for name, q in PERCENTILES}
    by_quantile = {q: cis[name] for name, q in PERCENTILES}
    no_ci = [q for q in required_quantiles
             if (by_quantile[q] if q in by_quantile else run_quantile_ci(data, q, sizes)) is None]
    q25, q75 = np.quantile(ordered, [0.25, 0.75])
    fastest = float(ordered[0])
    cis = {name: above_fastest(ci, fastest) for name, ci in cis.items()}
    # The precision the run itself reached, before the device's run-to-run floor (which is the
    # same for every candidate of a device and says nothing about this run).
    own_rel_ci = {name: relative_halfwidth(values[name], cis[name]) for name, _ in PERCENTILES}
    rel_ci = own_rel_ci["p50"]
    block_p50 = block_medians(data, sizes) if sizes else []
    if run_to_run is not None:
        cis = {name: above_fastest(run_to_run.widen(name, values[name], cis[name]), fastest)
               for name, _ in PERCENTILES}
    return LatencyStats(
        n=len(data), seconds=seconds,
        p50_ms=values["p50"], p90_ms=values["p90"], p95_ms=values["p95"], p99_ms=values["p99"],
        p999_ms=values["p999"],
        p50_ci_ms=cis["p50"], p90_ci_ms=cis["p90"], p95_ci_ms=cis["p95"], p99_ci_ms=cis["p99"],
        p999_ci_ms=cis["p999"],
        mean_ms=float(data.mean()), std_ms=float(data.std(ddof=1)) if len(data) > 1 else 0.0,
        min_ms=float(ordered[0]), max_ms=float(ordered[-1]), iqr_ms=float(q75 - q25),
        rel_ci=rel_ci, target_rel_ci=target_rel_ci, target_met=rel_ci <= target_rel_ci,
        stationary=halves_agree(data),
        warmup_iters=warmup_iters, warmup_seconds=warmup_seconds, first_call_ms=first_call_ms,
        timer_overhead_ns=timer_overhead_ns, check_seconds=check_seconds,
        min_samples=min_samples, underpowered=len(data) < min_samples or bool(no_ci),
        halves_shift_pct=halves_shift_pct(data), own_rel_ci=own_rel_ci, extended=extended,
        block_sizes=sizes, block_p50_ms=block_p50,
        between_run_cv=_spread(block_p50) if sizes else math.nan,
        window_calls=window_calls or len(data),
        run_to_run_cv=run_to_run.cv.get("p50", math.nan) if run_to_run is not None else math.nan,
        samples_ms=[float(v) for v in data],
    )


def drift_pct(samples_ms: Sequence[float]) -> float:
    """Median of the last tenth of a run against the first tenth, in percent (sustained mode):
    positive when the device got slower as it heated up."""
    data = np.asarray(samples_ms, dtype=np.float64)
    tenth = len(data) // 10
    if tenth < 1:
        raise MeasurementError(f"drift needs at least 10 samples, got {len(data)}")
    first, last = float(np.median(data[:tenth])), float(np.median(data[-tenth:]))
    return 100.0 * (last - first) / first
