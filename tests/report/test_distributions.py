"""dse.report.distributions: ECDFs of the front trials' raw latency samples, p50/p99 with CIs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest

from dse.report.distributions import (
    LatencyDistributionsInfo,
    SamplesUnreadable,
    latency_distributions_figure,
    latency_distributions_info,
    load_samples,
    sample_files,
    sample_keys,
)
from dse.results import front_frame, trials_frame
from dse.testing import campaign_study, candidate, record_trial

OBJECTIVES = ["accuracy", "latency_p99_ms"]


class Campaign:
    """Studies whose measured trials keep their samples as the search loop writes them."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.studies: dict[str, optuna.Study] = {}

    def add(self, accuracy: float, samples: np.ndarray | None, *, device: str = "local-cpu",
            table: Mapping[str, float] | None = None, batch_size: int = 1,
            p99: float | None = None) -> int:
        if device not in self.studies:
            self.studies[device] = campaign_study(f"d@{device}", OBJECTIVES)
        study = self.studies[device]
        number = len(study.trials)
        if p99 is None:
            p99 = float(np.quantile(samples, 0.99)) if samples is not None else 10.0
        metrics = {"accuracy": accuracy, "latency_p99_ms": p99, **(table or {})}
        attrs = {}
        if samples is not None:
            relative = f"samples/{device}-trial-{number:05d}.npz"
            (self.run_dir / "samples").mkdir(parents=True, exist_ok=True)
            np.savez_compressed(self.run_dir / relative, latency_ms=samples,
                                **{"trace.process_memory.time_s": np.arange(3.0)})
            attrs["samples_file"] = relative
        cand = {**candidate("onnxruntime", "int8", accuracy, 1, batch_size),
                "device_profile": device}
        return record_trial(study, cand, metrics=metrics, extra_attrs=attrs)

    def trials(self) -> pd.DataFrame:
        return trials_frame(list(self.studies.values()))

    def info(self, **kwargs: int) -> LatencyDistributionsInfo:
        return latency_distributions_info(self.trials(), OBJECTIVES, list(self.studies.values()),
                                          self.run_dir, **kwargs)


@pytest.fixture
def campaign(tmp_path: Path) -> Campaign:
    return Campaign(tmp_path / "run")


def latencies(n: int, center: float, seed: int = 0) -> np.ndarray:
    return center + np.random.default_rng(seed).gamma(2.0, 0.05 * center, n)


def test_each_front_trial_gets_its_ecdf_and_marked_quantiles(campaign: Campaign) -> None:
    samples = latencies(200, 2.0)
    p50, p99 = np.quantile(samples, [0.5, 0.99])
    table = {"latency_p50_ms": float(p50), "latency_p50_ci_low_ms": float(p50) - 0.01,
             "latency_p50_ci_high_ms": float(p50) + 0.02, "latency_p99_ms": float(p99),
             "latency_p99_ci_low_ms": float(p99) - 0.1, "latency_p99_ci_high_ms": float(p99) + 0.2}
    campaign.add(0.9, samples, table=table, batch_size=4)
    campaign.add(0.8, latencies(50, 1.0, seed=1))
    campaign.add(0.7, latencies(50, 5.0, seed=2))  # dominated by trial 1: not drawn
    info = campaign.info()
    assert info.empty_reason is None and info.note == ""
    (device,) = info.devices
    assert device.device == "local-cpu" and not device.log_x
    assert [c.trial for c in device.curves] == [1, 0]  # front order: the first objective
    curve = device.curves[1]
    assert curve.name == "#0 onnxruntime/int8 b4"
    assert curve.samples == 200
    assert curve.latency_ms == sorted(samples.tolist())
    assert curve.ecdf == [(i + 1) / 200 for i in range(200)]
    marks = {m.name: m for m in curve.quantiles}
    assert marks["p50"].value_ms == pytest.approx(p50)
    assert (marks["p50"].ci_low_ms, marks["p50"].ci_high_ms) == pytest.approx((p50 - 0.01,
                                                                              p50 + 0.02))
    assert marks["p99"].level == 0.99 and marks["p99"].source == "trials table"
    # Trial 1 has no p50 in the table: computed from its samples, without an interval.
    other = {m.name: m for m in device.curves[0].quantiles}
    assert other["p50"].source == "samples" and other["p50"].ci_low_ms is None
    figure = latency_distributions_figure(info)
    assert len(figure.data) == 2 * len(device.curves)
    trials = campaign.trials()
    given = latency_distributions_info(trials, OBJECTIVES, list(campaign.studies.values()),
                                       campaign.run_dir, front=front_frame(trials, OBJECTIVES))
    assert given == info


def test_long_samples_are_thinned_but_keep_exact_heights_and_marks(campaign: Campaign) -> None:
    samples = latencies(20_000, 3.0)
    campaign.add(0.9, samples)
    info = campaign.info(max_points=200)
    curve = info.devices[0].curves[0]
    assert len(curve.latency_ms) <= 200
    ordered = np.sort(samples)
    # Every drawn point is a real sample at its exact ECDF height.
    ranks = np.rint(np.asarray(curve.ecdf) * 20_000).astype(int) - 1
    assert np.array_equal(ordered[ranks], curve.latency_ms)
    assert curve.latency_ms[0] == ordered[0] and curve.latency_ms[-1] == ordered[-1]
    assert ordered[int(np.ceil(0.99 * 20_000)) - 1] in curve.latency_ms
    p99 = {m.name: m for m in curve.quantiles}["p99"]
    assert p99.value_ms == pytest.approx(np.quantile(samples, 0.99))
    assert "drawn through 200 of their sorted samples" in info.note
    assert "exact values of the full sample" in info.note


def test_at_most_the_cap_per_device_spread_along_the_front(campaign: Campaign) -> None:
    for i in range(15):  # better accuracy costs latency: all on the front
        campaign.add(0.5 + 0.03 * i, latencies(30, 1.0 + i, seed=i))
    info = campaign.info(max_per_device=12)
    drawn = [c.trial for c in info.devices[0].curves]
    assert len(drawn) == 12 and drawn[0] == 0 and drawn[-1] == 14
    assert info.devices[0].log_x  # 1 ms to 15+ ms spans a decade
    left_out = sorted(set(range(15)) - set(drawn))
    assert ("local-cpu: 3 of 15 front trials not drawn (at most 12, spread along the front): "
            + ", ".join(f"#{n}" for n in left_out)) in info.note


def test_trials_without_samples_are_noted(campaign: Campaign) -> None:
    campaign.add(0.9, latencies(40, 4.0), p99=4.0)
    campaign.add(0.8, None, p99=2.0)
    campaign.add(0.7, latencies(40, 1.0), p99=1.0)
    (campaign.run_dir / "samples" / "local-cpu-trial-00002.npz").write_bytes(b"truncated")
    info = campaign.info()
    assert [c.trial for c in info.devices[0].curves] == [0]
    assert "local-cpu #1: no samples file" in info.note
    assert "local-cpu #2:" in info.note and "not a readable .npz" in info.note


def test_every_device_has_its_own_row(campaign: Campaign) -> None:
    campaign.add(0.9, latencies(30, 2.0), device="gpu-a")
    campaign.add(0.9, latencies(30, 8.0), device="cpu-b")
    info = campaign.info()
    assert [d.device for d in info.devices] == ["cpu-b", "gpu-a"]
    assert sample_files(list(campaign.studies.values())) == {
        ("gpu-a", 0): "samples/gpu-a-trial-00000.npz",
        ("cpu-b", 0): "samples/cpu-b-trial-00000.npz"}
    figure = latency_distributions_figure(info)
    assert len(figure.data) == 4
    assert figure.data[0].name == "cpu-b #0 onnxruntime/int8 b1"
    assert [a.text for a in figure.layout.annotations] == ["cpu-b", "gpu-a"]


def test_empty_reasons(campaign: Campaign) -> None:
    study = campaign_study("none", OBJECTIVES)
    none = latency_distributions_info(trials_frame(study), OBJECTIVES, [study], campaign.run_dir)
    assert none.empty_reason is not None and "no front" in none.empty_reason
    campaign.add(0.9, None)
    info = campaign.info()
    assert info.empty_reason == "none of the 1 front trial(s) has readable latency samples"
    assert "no samples file" in info.note
    unknown = latency_distributions_info(campaign.trials(), OBJECTIVES,
                                         list(campaign.studies.values()), None)
    assert unknown.empty_reason is not None and "run folder" in unknown.empty_reason


def test_load_samples_reads_only_what_is_asked(campaign: Campaign) -> None:
    campaign.add(0.9, latencies(10, 1.0))
    path = campaign.run_dir / "samples" / "local-cpu-trial-00000.npz"
    assert sample_keys(path) == ["latency_ms", "trace.process_memory.time_s"]
    assert list(load_samples(path, lambda k: k == "latency_ms")) == ["latency_ms"]
    with pytest.raises(SamplesUnreadable, match="does not exist"):
        load_samples(path.with_name("gone.npz"), lambda k: True)


def test_bad_limits_are_refused(campaign: Campaign) -> None:
    campaign.add(0.9, None)
    with pytest.raises(ValueError, match="max_points"):
        campaign.info(max_points=1)
