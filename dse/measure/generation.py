"""Timing a generative model's requests: time to first token, time per output token, the whole
request.

A *request* is one call of ``stream()``: it runs the prompt through the model (prefill) and then
decodes, one step at a time, for one batch of sequences, yielding once per step — the first yield
when every sequence's first token exists, then one per further token. Any runtime fits that shape
(a manual greedy loop over a KV cache in torch, ONNX Runtime GenAI's ``generate_next_token``, a
streamer callback turned into a generator), so the clock lives here, not in the runtimes. The host
clock is read at the call and at each yield:

- ``ttft``: first yield − call (prefill and the first token; one sample per request);
- ``tpot``: the gap between consecutive yields (one output token per sequence after the first;
  ``output_tokens − 1`` samples per request);
- ``e2e``: the generator's end − call (one sample per request).

Requests run back to back: ``warmup_requests`` untimed ones first (allocators, caches, lazily
compiled kernels), then timed ones until there are at least ``min_requests`` and they took at
least ``min_seconds``. Every request must yield the same number
of steps: a request that stops early (an end-of-sequence token) would time a shorter one, so the
stream must decode exactly its ``output_tokens`` (greedy decoding ignoring EOS, as benchmark
harnesses do).

Intervals: TTFT and the whole request have one sample per request, taken in order
(:func:`dse.measure.stats.quantile_ci` allows for their autocorrelation); the TPOT samples of one
request share its cache and its moment, so their interval treats each request as a block
(:func:`dse.measure.stats.run_quantile_ci`): the spread between requests widens it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from dse.core import MeasurementError
from dse.measure.quality_labels import QUALITY_FLAGS, UNSTABLE_SHIFT_PCT
from dse.measure.stats import percentile_quantile, quantile_ci, run_quantile_ci

#: The percentiles reported of each phase.
PHASE_PERCENTILES = ("p50", "p99")


@dataclass(frozen=True)
class GenerationStats:
    """What a run of timed requests measured (all times in ms, in the order taken)."""

    batch: int
    prompt_tokens: int
    output_tokens: int
    ttft_ms: list[float]
    tpot_ms: list[float]
    e2e_ms: list[float]
    seconds: float
    warmup_requests: int = 0

    @property
    def requests(self) -> int:
        return len(self.ttft_ms)

    def metrics(self) -> dict[str, float]:
        """Percentiles of each phase with their 95% intervals (``ttft_p99_ms``,
        ``ttft_p99_ci_low_ms``, ...; an interval is left out where the samples are too few), and
        the rates: ``decode_tokens_per_s`` per sequence (1000 / median TPOT),
        ``device_decode_tokens_per_s`` (the batch's sequences together), ``prefill_tokens_per_s``
        (the batch's prompt tokens over the median TTFT) and ``requests_per_s`` (over the timed
        window)."""
        found: dict[str, float] = {}
        blocks = [self.output_tokens - 1] * self.requests if self.output_tokens > 1 else []
        for phase, samples in (("ttft", self.ttft_ms), ("tpot", self.tpot_ms),
                               ("e2e", self.e2e_ms)):
            if not samples:
                continue
            data = np.asarray(samples, dtype=np.float64)
            for name in PHASE_PERCENTILES:
                q = percentile_quantile(name)
                found[f"{phase}_{name}_ms"] = float(np.quantile(data, q))
                interval = (run_quantile_ci(data, q, blocks) if phase == "tpot"
                            else quantile_ci(data, q))
                if interval is not None:
                    found[f"{phase}_{name}_ci_low_ms"], found[f"{phase}_{name}_ci_high_ms"] = (
                        float(interval[0]), float(interval[1]))
        if "tpot_p50_ms" in found and found["tpot_p50_ms"] > 0:
            found["decode_tokens_per_s"] = 1e3 / found["tpot_p50_ms"]
            found["device_decode_tokens_per_s"] = self.batch * found["decode_tokens_per_s"]
        if found.get("ttft_p50_ms", 0) > 0:
            found["prefill_tokens_per_s"] = (self.batch * self.prompt_tokens * 1e3
                                             / found["ttft_p50_ms"])
        if self.seconds > 0:
            found["requests_per_s"] = self.requests / self.seconds
        return found

    def request_tpot_ms(self) -> list[float]:
        """Each request's own time per output token: the mean of its gaps between steps (MLPerf's
        per-request TPOT, its decode time over its output tokens after the first); empty with
        one output token."""
        per = self.output_tokens - 1
        if per < 1:
            return []
        gaps = np.asarray(self.tpot_ms, dtype=np.float64).reshape(self.requests, per)
        return [float(value) for value in gaps.mean(axis=1)]

    def goodput(self, ttft_limit_ms: float, tpot_limit_ms: float) -> float:
        """The share of requests whose time to first token and own time per output token
        (:meth:`request_tpot_ms`) are both within the limits; ValueError without requests."""
        if not self.requests:
            raise ValueError("goodput needs at least one timed request")
        tpots = self.request_tpot_ms() or [0.0] * self.requests
        met = sum(ttft <= ttft_limit_ms and tpot <= tpot_limit_ms
                  for ttft, tpot in zip(self.ttft_ms, tpots, strict=True))
        return met / self.requests


#: The phases whose percentiles an objective or constraint may require an interval of.
TIMED_PHASES = ("ttft", "tpot")


def without_interval(found: dict[str, float], required: Iterable[str]) -> list[str]:
    """The metrics among the ``required`` percentiles (``p50``, ``p99``) of TTFT and TPOT that
    ``found`` (:meth:`GenerationStats.metrics`) holds without their 95% interval."""
    return [f"{phase}_{name}_ms" for phase in TIMED_PHASES for name in required
            if f"{phase}_{name}_ms" in found and f"{phase}_{name}_ci_low_ms" not in found]


def halves_shift_pct(stats: GenerationStats) -> float:
    """How far the median time per output token of the later half of the requests lay from the
    earlier half's, in percent (0 with fewer than two requests or one token each)."""
    per = stats.output_tokens - 1
    if stats.requests < 2 or per < 1:
        return 0.0
    half = stats.requests // 2 * per
    first, second = np.median(stats.tpot_ms[:half]), np.median(stats.tpot_ms[half:])
    return float(100 * (second - first) / first) if first > 0 else 0.0


def unstable_reason(stats: GenerationStats) -> str:
    """Why the run changed state inside it (the later half's median time per output token more
    than ``UNSTABLE_SHIFT_PCT`` from the earlier half's), or ""."""
    shift = halves_shift_pct(stats)
    if abs(shift) <= UNSTABLE_SHIFT_PCT:
        return ""
    return (f"unstable: the later half's median time per output token lay {shift:+.1f}% from "
            f"the earlier half's (at most ±{UNSTABLE_SHIFT_PCT:g}%)")


def generation_quality(stats: GenerationStats, disturbance: str,
                       required: Iterable[str]) -> dict[str, str]:
    """The run's label and flags, as a latency run's (``measurement_quality``,
    ``measurement_flags``): ``disturbed`` (the window's ``disturbance`` says why), ``underpowered``
    (a ``required`` percentile of TTFT or TPOT has no interval), ``unstable`` (the later half's
    median time per output token moved more than ``UNSTABLE_SHIFT_PCT`` from the earlier's)."""
    applies = {"disturbed": bool(disturbance),
               "underpowered": bool(without_interval(stats.metrics(), required)),
               "unstable": bool(unstable_reason(stats))}
    flags = [flag for flag in QUALITY_FLAGS if applies.get(flag)]
    return {"measurement_quality": flags[0] if flags else "ok",
            "measurement_flags": ",".join(flags)}


def time_request(stream: Callable[[], Iterable[object]]) -> tuple[float, list[float], float]:
    """One request on the host clock: (TTFT, the gaps between later steps, whole request), in
    ms. MeasurementError when the stream yields nothing."""
    start = time.perf_counter_ns()
    stamps = []
    for _ in stream():
        stamps.append(time.perf_counter_ns())
    end = time.perf_counter_ns()
    if not stamps:
        raise MeasurementError("the generation stream yielded no token")
    gaps = np.diff(np.asarray(stamps, dtype=np.int64)) / 1e6
    return (stamps[0] - start) / 1e6, [float(g) for g in gaps], (end - start) / 1e6


def measure_generation(stream: Callable[[], Iterable[object]], *, batch: int,
                       prompt_tokens: int, output_tokens: int, warmup_requests: int = 1,
                       min_requests: int = 5, min_seconds: float = 0.0,
                       max_requests: int | None = None,
                       enough: Callable[[GenerationStats], bool] | None = None,
                       on_window: Callable[[bool], None] | None = None) -> GenerationStats:
    """Time requests of ``stream`` (the module's protocol) and return their samples.

    Args:
        stream: One request: prefill then decode, yielding once per step (``output_tokens``
            steps).
        batch: Sequences per request (for the rates).
        prompt_tokens: Prompt tokens per sequence (for the prefill rate).
        output_tokens: Steps every request must yield.
        warmup_requests: Untimed requests first.
        min_requests: Timed requests at least (at least 2: one request gives no spread).
        min_seconds: Seconds of timed requests at least.
        max_requests: Timed requests at most (None: as many as ``enough`` wants).
        enough: Once the minimums are met, asked after each request with the samples so far;
            requests go on (up to ``max_requests``) until it says yes. None: stop at the minimums.
        on_window: Called with True just before the first timed request and False just after
            the last (a telemetry window around exactly the timed requests).

    Raises:
        ValueError: For an argument out of range.
        MeasurementError: When a request yields another number of steps than ``output_tokens``.
        Exception: Whatever the stream raises, unchanged.

    Examples:
        >>> from dse.measure.generation import measure_generation
        >>> def stream():
        ...     for _ in range(4):
        ...         yield sum(range(1000))
        >>> stats = measure_generation(stream, batch=1, prompt_tokens=8, output_tokens=4,
        ...                            min_requests=3)
        >>> stats.requests, len(stats.tpot_ms)
        (3, 9)
    """
    if batch < 1 or prompt_tokens < 1 or output_tokens < 1:
        raise ValueError(f"batch, prompt_tokens and output_tokens must be at least 1, got "
                         f"{batch}, {prompt_tokens}, {output_tokens}")
    if warmup_requests < 0 or min_requests < 2 or min_seconds < 0 \
            or (max_requests is not None and max_requests < min_requests):
        raise ValueError(f"need warmup_requests >= 0, 2 <= min_requests <= max_requests and "
                         f"min_seconds >= 0, got {warmup_requests}, {min_requests}, "
                         f"{max_requests}, {min_seconds}")

    def one() -> tuple[float, list[float], float]:
        ttft, gaps, e2e = time_request(stream)
        if len(gaps) + 1 != output_tokens:
            raise MeasurementError(f"a request yielded {len(gaps) + 1} steps where "
                                   f"{output_tokens} were asked: decode must not stop early "
                                   f"(ignore the end-of-sequence token while timing)")
        return ttft, gaps, e2e

    for _ in range(warmup_requests):
        one()
    ttfts: list[float] = []
    tpots: list[float] = []
    e2es: list[float] = []

    def so_far() -> GenerationStats:
        return GenerationStats(batch, prompt_tokens, output_tokens, list(ttfts), list(tpots),
                               list(e2es), time.perf_counter() - start, warmup_requests)

    if on_window is not None:
        on_window(True)
    start = time.perf_counter()
    try:
        while True:
            ttft, gaps, e2e = one()
            ttfts.append(ttft)
            tpots.extend(gaps)
            e2es.append(e2e)
            if len(ttfts) < min_requests or time.perf_counter() - start < min_seconds:
                continue
            if max_requests is not None and len(ttfts) >= max_requests:
                break
            if enough is None or enough(so_far()):
                break
        stats = so_far()
    finally:
        if on_window is not None:
            on_window(False)
    return stats
