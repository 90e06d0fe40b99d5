"""The generation timing protocol (dse.measure.generation) on real Python streams: what it counts,
what it refuses, and the metrics it derives."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dse.core import MeasurementError
from dse.measure import GenerationStats, measure_generation
from dse.measure.generation import time_request


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


def test_a_request_that_stops_early_is_refused_naming_the_counts() -> None:
    lengths = iter([4, 4, 2])
    with pytest.raises(MeasurementError, match="a request yielded 2 steps where 4 were asked"):
        measure_generation(lambda: _stream(next(lengths)), batch=1, prompt_tokens=1,
                           output_tokens=4, warmup_requests=1, min_requests=2)


def test_an_empty_stream_and_bad_sizes_are_refused() -> None:
    with pytest.raises(MeasurementError, match="yielded no token"):
        time_request(lambda: iter(()))
    with pytest.raises(ValueError, match="min_requests >= 2"):
        measure_generation(lambda: _stream(2), batch=1, prompt_tokens=1, output_tokens=2,
                           min_requests=1)
    with pytest.raises(ValueError, match="at least 1"):
        measure_generation(lambda: _stream(2), batch=0, prompt_tokens=1, output_tokens=2)
