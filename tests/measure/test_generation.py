"""The generation timing protocol (dse.measure.generation) on real Python streams: what it counts,
what it refuses, and the metrics it derives."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dse.core import MeasurementError
from dse.measure import GenerationStats, measure_generation
from dse.measure.generation import (
    generation_quality,
    halves_shift_pct,
    time_request,
    without_interval,
)


def _work(n: int) -> int:
    return sum(i * i for i in range(n))


def _stream(steps: int, prefill: int = 20_000, decode: int = 400) -> Iterator[int]:
    yield _work(prefill)
    for _ in range(steps - 1):
        yield _work(decode)


def test_every_request_gives_one_ttft_one_whole_and_a_gap_per_later_token() -> None:
    stats = measure_generation(lambda: _stream(5), batch=2, prompt_tokens=16, output_tokens=5,
                               warmup_requests=2, min_requests=7)
    assert (stats.requests, len(stats.tpot_ms), len(stats.e2e_ms)) == (7, 7 * 4, 7)
    assert stats.warmup_requests == 2
    for k in range(stats.requests):
        gaps = stats.tpot_ms[4 * k:4 * (k + 1)]
        assert stats.e2e_ms[k] >= stats.ttft_ms[k] + sum(gaps) - 1e-6
    # Prefill does 50x the work of a decode step: the first token comes last of all the steps.
    assert min(stats.ttft_ms) > max(sorted(stats.tpot_ms)[:len(stats.tpot_ms) // 2])


def test_the_rates_follow_the_medians() -> None:
    stats = GenerationStats(batch=4, prompt_tokens=32, output_tokens=3,
                            ttft_ms=[8.0, 10.0, 12.0], tpot_ms=[2.0, 2.0, 2.5, 2.5, 3.0, 3.0],
                            e2e_ms=[12.0, 15.0, 18.0], seconds=0.05)
    found = stats.metrics()
    assert found["ttft_p50_ms"] == 10.0 and found["tpot_p50_ms"] == 2.5
    assert found["decode_tokens_per_s"] == pytest.approx(400.0)
    assert found["device_decode_tokens_per_s"] == pytest.approx(1600.0)
    assert found["prefill_tokens_per_s"] == pytest.approx(4 * 32 / 0.010)
    assert found["requests_per_s"] == pytest.approx(60.0)
    # Three requests support no p99 interval: left out, never made up.
    assert "ttft_p99_ci_low_ms" not in found and "ttft_p99_ms" in found


def test_goodput_counts_requests_within_both_limits_with_their_own_tpot() -> None:
    # Request 2 has one slow token (9 ms) but its own TPOT is (2 + 9) / 2 = 5.5 ms: MLPerf's
    # per-request TPOT, not the per-token tail. Request 3 misses the TTFT limit.
    stats = GenerationStats(batch=1, prompt_tokens=8, output_tokens=3,
                            ttft_ms=[10.0, 10.0, 30.0, 10.0],
                            tpot_ms=[2.0, 2.0, 2.0, 9.0, 2.0, 2.0, 7.0, 7.0], e2e_ms=[14.0] * 4,
                            seconds=0.1)
    assert stats.request_tpot_ms() == [2.0, 5.5, 2.0, 7.0]
    assert stats.goodput(20.0, 6.0) == 0.5
    assert stats.goodput(30.0, 7.0) == 1.0
    assert stats.goodput(5.0, 100.0) == 0.0


def test_a_request_that_stops_early_is_refused_naming_the_counts() -> None:
    lengths = iter([4, 4, 2])
    with pytest.raises(MeasurementError, match="a request yielded 2 steps where 4 were asked"):
        measure_generation(lambda: _stream(next(lengths)), batch=1, prompt_tokens=1,
                           output_tokens=4, warmup_requests=1, min_requests=2)


def test_an_empty_stream_and_bad_sizes_are_refused() -> None:
    with pytest.raises(MeasurementError, match="yielded no token"):
        time_request(lambda: iter(()))
    with pytest.raises(ValueError, match="2 <= min_requests <= max_requests"):
        measure_generation(lambda: _stream(2), batch=1, prompt_tokens=1, output_tokens=2,
                           min_requests=1)
    with pytest.raises(ValueError, match="at least 1"):
        measure_generation(lambda: _stream(2), batch=0, prompt_tokens=1, output_tokens=2)


def test_requests_go_on_until_enough_and_stop_at_the_most() -> None:
    asked: list[int] = []
    marks: list[bool] = []

    def enough(so_far: GenerationStats) -> bool:
        asked.append(so_far.requests)
        return so_far.requests >= 6

    stats = measure_generation(lambda: _stream(3), batch=1, prompt_tokens=4, output_tokens=3,
                               warmup_requests=1, min_requests=3, max_requests=10,
                               enough=enough, on_window=marks.append)
    assert stats.requests == 6 and asked == [3, 4, 5, 6]
    assert marks == [True, False]  # one window, around the timed requests only
    capped = measure_generation(lambda: _stream(3), batch=1, prompt_tokens=4, output_tokens=3,
                                min_requests=3, max_requests=4, enough=lambda _: False)
    assert capped.requests == 4


def test_the_window_closes_when_a_request_fails() -> None:
    marks: list[bool] = []
    lengths = iter([3, 3, 1])
    with pytest.raises(MeasurementError):
        measure_generation(lambda: _stream(next(lengths)), batch=1, prompt_tokens=1,
                           output_tokens=3, warmup_requests=1, min_requests=3,
                           on_window=marks.append)
    assert marks == [True, False]


def _stats(tpot: list[float], requests: int, output_tokens: int) -> GenerationStats:
    return GenerationStats(batch=1, prompt_tokens=8, output_tokens=output_tokens,
                           ttft_ms=[5.0 + 0.01 * ((7 * i) % requests) for i in range(requests)], tpot_ms=tpot,
                           e2e_ms=[9.0] * requests, seconds=1.0)


def test_labels_follow_the_run() -> None:
    steady = _stats([1.0, 1.1] * 10, requests=10, output_tokens=3)
    assert halves_shift_pct(steady) == pytest.approx(0.0)
    found = steady.metrics()
    assert without_interval(found, ["p50"]) == []
    assert without_interval(found, ["p99"]) == ["ttft_p99_ms", "tpot_p99_ms"]
    assert generation_quality(steady, "", ["p50"]) == {"measurement_quality": "ok",
                                                       "measurement_flags": ""}
    assert generation_quality(steady, "", ["p99"])["measurement_quality"] == "underpowered"
    assert generation_quality(steady, "another process", ["p99"]) == {
        "measurement_quality": "disturbed", "measurement_flags": "disturbed,underpowered"}
    # The later half decodes 20% slower than the earlier: a state change inside the run.
    shifted = _stats([1.0] * 10 + [1.2] * 10, requests=10, output_tokens=3)
    assert halves_shift_pct(shifted) == pytest.approx(20.0)
    assert generation_quality(shifted, "", ["p50"])["measurement_quality"] == "unstable"
