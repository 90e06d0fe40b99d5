"""Pareto masks honour each metric's direction; hypervolume, its history, noise-aware fronts."""

from __future__ import annotations

import itertools

import numpy as np
import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

import dse
from dse.results import front_frame, metric_column, trials_frame
from dse.search.pareto import (
    default_reference,
    hypervolume,
    hypervolume_history,
    noise_aware_mask,
    pareto_front,
    pareto_mask,
)
from dse.testing import (
    EXAMPLE_CONSTRAINT,
    EXAMPLE_FRONT,
    EXAMPLE_OBJECTIVES,
    campaign_study,
    candidate,
    example_study,
    record_trial,
)

OBJECTIVES = list(EXAMPLE_OBJECTIVES)


def test_front_with_mixed_directions() -> None:
    # accuracy is maximised, latency minimised
    values = [
        [0.90, 1.0],   # front: fastest
        [0.95, 2.0],   # front
        [0.94, 3.0],   # dominated by the row above
        [0.99, 5.0],   # front: most accurate
        [0.80, 1.5],   # dominated by row 0
        [0.95, 2.0],   # a duplicate of a front point stays on the front
    ]
    mask = pareto_mask(values, ["accuracy", "latency_p99_ms"])
    assert mask.tolist() == [True, True, False, True, False, True]


def test_nan_rows_never_on_front() -> None:
    mask = pareto_mask(np.array([[0.9, np.nan], [0.5, 3.0]]), ["accuracy", "latency_p99_ms"])
    assert mask.tolist() == [False, True]


# --- hypervolume, its history, noise-aware fronts ------------------------------------------------

LATENCY = "latency_p99_ms [ms]"
MINIMISED_4 = ["latency_p99_ms", "process_rss_peak_mb", "energy_per_inference_mj", "model_size_mb"]


def union_of_boxes(points: np.ndarray, reference: np.ndarray) -> float:
    """Inclusion-exclusion over every subset: the exact volume of the union of the boxes
    [point, reference] (all objectives minimised). Exponential; for a handful of points."""
    total = 0.0
    for size in range(1, len(points) + 1):
        for subset in itertools.combinations(range(len(points)), size):
            corner = points[list(subset)].max(axis=0)
            total += (-1) ** (size + 1) * float(np.prod(np.clip(reference - corner, 0, None)))
    return total


def test_hypervolume_2d_by_hand() -> None:
    # The staircase 3 + 2 + 1 under the reference (4, 4).
    points = [[1, 3], [2, 2], [3, 1]]
    assert hypervolume(points, ["latency_p99_ms", "process_rss_peak_mb"], [4, 4]) == 6.0


def test_hypervolume_3d_by_hand() -> None:
    objectives = MINIMISED_4[:3]
    # boxes 6 + 12 + 3, pairwise overlaps 4, 1, 2, triple overlap 1
    points = [[1, 2, 3], [2, 1, 2], [3, 3, 1]]
    assert hypervolume(points, objectives, [4, 4, 4]) == pytest.approx(15.0)
    assert hypervolume(points[:2], objectives, [4, 4, 4]) == pytest.approx(14.0)


@pytest.mark.parametrize("dims", [2, 3, 4])
def test_hypervolume_matches_inclusion_exclusion(dims: int) -> None:
    rng = np.random.default_rng(dims)
    objectives = MINIMISED_4[:dims]
    reference = np.full(dims, 1.0)
    for _ in range(5):
        # Some points fall outside the reference, some are dominated, one is repeated.
        points = rng.uniform(0.0, 1.2, size=(7, dims))
        points[6] = points[0]
        expected = union_of_boxes(points, reference)
        assert hypervolume(points, objectives, reference) == pytest.approx(expected, rel=1e-12)


def test_points_outside_the_reference_contribute_nothing() -> None:
    objectives = ["latency_p99_ms", "process_rss_peak_mb"]
    inside = [[1, 3], [2, 2], [3, 1]]
    outside = [[5.0, 0.5], [0.5, 4.0], [np.nan, 0.1]]  # beyond, on the reference, unmeasured
    assert hypervolume(inside + outside, objectives, [4, 4]) == 6.0
    assert hypervolume(outside, objectives, [4, 4]) == 0.0
    assert hypervolume(np.empty((0, 2)), objectives, [4, 4]) == 0.0


def test_reference_must_match_the_objectives() -> None:
    with pytest.raises(ValueError, match="one finite value per objective"):
        hypervolume([[1, 2]], ["latency_p99_ms", "process_rss_peak_mb"], [4])
    with pytest.raises(ValueError, match="one finite value per objective"):
        hypervolume([[1, 2]], ["latency_p99_ms", "process_rss_peak_mb"], [4, np.nan])
    with pytest.raises(ValueError, match="one column per objective"):
        hypervolume([[1, 2, 3]], ["latency_p99_ms", "process_rss_peak_mb"], [4, 4])


def test_hypervolume_mixes_directions_from_the_metric_table() -> None:
    # accuracy is maximised: above 0.8 is inside the reference; latency minimised: below 3.0.
    objectives = ["accuracy", "latency_p99_ms"]
    points = [[0.90, 1.0], [0.95, 2.0], [0.70, 0.5]]  # the last is less accurate than 0.8
    # boxes 0.1 * 2 + 0.15 * 1, overlapping in 0.1 * 1
    assert hypervolume(points, objectives, [0.8, 3.0]) == pytest.approx(0.25)
    # Swapping the columns swaps nothing but the order.
    swapped = np.asarray(points)[:, ::-1]
    assert hypervolume(swapped, objectives[::-1], [3.0, 0.8]) == pytest.approx(0.25)


def test_history_is_the_front_volume_after_each_point_and_never_decreases() -> None:
    objectives = ["latency_p99_ms", "process_rss_peak_mb"]
    points: list[list[float]] = [[3, 3], [5, 1], [1, 3], [2, 2], [4, 4], [np.nan, 1], [1, 1]]
    history = hypervolume_history(points, objectives, [4, 4])
    assert history == [1.0, 1.0, 3.0, 5.0, 5.0, 5.0, 9.0]
    rng = np.random.default_rng(7)
    random = rng.uniform(0, 1, size=(40, 3))
    history = hypervolume_history(random, MINIMISED_4[:3], [1, 1, 1])
    assert all(b >= a for a, b in itertools.pairwise(history))
    assert history[-1] == pytest.approx(hypervolume(random, MINIMISED_4[:3], [1, 1, 1]))


@pytest.fixture
def example() -> pd.DataFrame:
    return trials_frame(example_study())


def test_history_of_a_frame_counts_only_competing_trials(example: pd.DataFrame) -> None:
    reference = [0.8, 5.0]
    history = hypervolume_history(example, OBJECTIVES, reference)
    assert len(history) == len(example)
    # Trials 0..3 compete; 4 (infeasible, would dominate all), 5, 7 (failed), 6 (running) and
    # 8 (a reuse of 3) leave the value as it was.
    columns = [metric_column(name) for name in OBJECTIVES]
    values = example[columns].to_numpy()
    expected = [hypervolume(values[: min(i, 3) + 1], OBJECTIVES, reference) for i in range(9)]
    assert history == pytest.approx(expected)
    assert history[4] == history[3] < hypervolume(values[:5], OBJECTIVES, reference)


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
@pytest.mark.parametrize("objectives", [("accuracy", "latency_p99_ms"),
                                        ("accuracy", "latency_p99_ms", "process_rss_peak_mb")])
def test_history_agrees_with_optunas_public_hypervolume_history(
        objectives: tuple[str, ...]) -> None:
    # Optuna 5 has no public hypervolume function; plot_hypervolume_history is public and
    # carries its values in the figure's data.
    rng = np.random.default_rng(len(objectives))
    study = campaign_study("agree", objectives, [EXAMPLE_CONSTRAINT])
    for i in range(30):
        memory = float(rng.uniform(100, 5000))
        metrics = {"accuracy": float(rng.uniform(0.6, 1.0)),
                   "latency_p99_ms": float(rng.uniform(0.5, 10.0)), "process_rss_peak_mb": memory}
        if i % 7 == 3:
            record_trial(study, candidate("onnxruntime", "fp32", 1.0, i), state=TrialState.FAIL,
                         status="failed", reason="timeout")
        else:
            record_trial(study, candidate("onnxruntime", "fp32", 1.0, i), metrics=metrics,
                         constraints={EXAMPLE_CONSTRAINT: memory - 4096})
    reference = [0.7, 8.0, 4500.0][: len(objectives)]
    trials = trials_frame(study)
    ours = np.asarray(hypervolume_history(trials, objectives, reference))
    optunas = optuna.visualization.plot_hypervolume_history(study, reference).data[0].y
    assert ours[(trials["state"] == "COMPLETE").to_numpy()] == pytest.approx(list(optunas))
    assert ours[-1] > 0


def test_history_follows_one_device(example: pd.DataFrame) -> None:
    other = example.assign(device="jetson-orin")
    with pytest.raises(ValueError, match="one device"):
        hypervolume_history(pd.concat([example, other]), OBJECTIVES, [0.8, 5.0])


def test_default_reference_pushes_the_worst_feasible_value_out_by_a_tenth_of_the_range(
        example: pd.DataFrame) -> None:
    # Competing: accuracy 0.95, 0.90, 0.85, 0.88 and p99 4.0, 1.5, 1.0, 3.0; the infeasible
    # trial 4 (0.99, 0.5) does not stretch the range.
    reference = default_reference(example, OBJECTIVES)
    assert reference == pytest.approx([0.85 - 0.01, 4.0 + 0.3])
    assert default_reference([[0.5, 2.0]], OBJECTIVES) == pytest.approx([0.45, 2.2])
    assert default_reference([[0.0, 0.0]], OBJECTIVES) == pytest.approx([-1.0, 1.0])
    front = pareto_front(example, OBJECTIVES)
    columns = [metric_column(name) for name in OBJECTIVES]
    # Every front point lies strictly inside, so each adds volume.
    full = hypervolume(front[columns], OBJECTIVES, reference)
    for i in range(len(front)):
        assert hypervolume(front[columns].drop(index=i), OBJECTIVES, reference) < full
    with pytest.raises(ValueError, match="declare a reference point"):
        default_reference(example[example["status"] != "ok"], OBJECTIVES)


def test_noise_aware_front_holds_the_strict_front() -> None:
    rng = np.random.default_rng(3)
    objectives = ["accuracy", "latency_p99_ms", "latency_p50_ms"]
    for _ in range(10):
        values = rng.uniform(0.5, 1.0, size=(25, 3))
        width = rng.uniform(0.0, 0.05, size=(25, 3))
        width[:, 0] = np.nan  # accuracy has no CI: exact
        strict = pareto_mask(values, objectives)
        noisy = noise_aware_mask(values, values - width, values + width, objectives)
        assert np.all(noisy[strict])
    # Without any CI the two fronts are the same.
    nan = np.full_like(values, np.nan)
    assert noise_aware_mask(values, nan, nan, objectives).tolist() == strict.tolist()


def ci_metrics(accuracy: float, p99: float, low: float, high: float) -> dict[str, float]:
    return {"accuracy": accuracy, "latency_p99_ms": p99, "latency_p99_ci_low_ms": low,
            "latency_p99_ci_high_ms": high, "process_rss_peak_mb": 500.0}


def test_latencies_whose_intervals_overlap_both_stay_on_the_noise_aware_front() -> None:
    study = campaign_study("noisy", OBJECTIVES, [EXAMPLE_CONSTRAINT])
    feasible = {EXAMPLE_CONSTRAINT: -1.0}
    ort = "onnxruntime"
    # 0 is faster than 1 at the same accuracy, but 1's interval [9.5, 11.0] overlaps 0's.
    record_trial(study, candidate(ort, "fp32", 1.0, 1), metrics=ci_metrics(0.9, 10.0, 9.0, 11.5),
                 constraints=feasible)
    record_trial(study, candidate(ort, "fp32", 1.0, 2), metrics=ci_metrics(0.9, 10.5, 9.5, 11.0),
                 constraints=feasible)
    # 2 is slower beyond any doubt and less accurate: off both fronts.
    record_trial(study, candidate(ort, "fp32", 1.0, 4), metrics=ci_metrics(0.85, 20.0, 19.0, 21.0),
                 constraints=feasible)
    trials = trials_frame(study)
    assert pareto_front(trials, OBJECTIVES)["trial"].tolist() == [0]
    assert pareto_front(trials, OBJECTIVES, noise_aware=True)["trial"].tolist() == [0, 1]
    # A frame without the CI columns is read as exact.
    exact = trials.drop(columns=["latency_p99_ci_low_ms [ms]", "latency_p99_ci_high_ms [ms]"])
    assert pareto_front(exact, OBJECTIVES, noise_aware=True)["trial"].tolist() == [0]


@pytest.mark.parametrize("noise_aware", [False, True])
def test_no_infeasible_failed_or_reused_trial_on_either_front(
        example: pd.DataFrame, noise_aware: bool) -> None:
    front = pareto_front(example, OBJECTIVES, noise_aware=noise_aware)
    assert sorted(front["trial"]) == sorted(EXAMPLE_FRONT)
    assert (front["state"] == "COMPLETE").all()
    assert (front["status"] == "ok").all()
    assert front["feasible"].all()
    assert front["reused_from"].isna().all()
    assert 4 not in front["trial"].tolist()  # infeasible, though it beats every trial


def test_strict_front_is_front_frame(example: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(pareto_front(example, OBJECTIVES),
                                  front_frame(example, OBJECTIVES))


def test_fronts_are_per_device() -> None:
    def device_study(device: str, measured: list[tuple[float, float]]) -> optuna.Study:
        study = campaign_study(device, OBJECTIVES, [EXAMPLE_CONSTRAINT])
        for threads, (acc, p99) in enumerate(measured, start=1):
            record_trial(study, {**candidate("onnxruntime", "fp32", 1.0, threads),
                                 "device_profile": device},
                         metrics={"accuracy": acc, "latency_p99_ms": p99, "process_rss_peak_mb": 1.0},
                         constraints={EXAMPLE_CONSTRAINT: -1.0})
        return study

    # On the server trial 1 is dominated; on the board both compete, though the server's
    # trial 0 (faster than anything on the board) would dominate them in one pooled front.
    server = device_study("server", [(0.9, 1.0), (0.85, 2.0)])
    board = device_study("board", [(0.9, 8.0), (0.95, 9.0)])
    trials = trials_frame([server, board])
    for noise_aware in (False, True):
        front = pareto_front(trials, OBJECTIVES, noise_aware=noise_aware)
        assert sorted(zip(front["device"], front["trial"], strict=True)) == [
            ("board", 0), ("board", 1), ("server", 0)]
    history = hypervolume_history(trials[trials["device"] == "board"], OBJECTIVES, [0.8, 10.0])
    assert history == pytest.approx([0.1 * 2.0, 0.1 * 2.0 + 0.05 * 1.0])


def test_public_api() -> None:
    assert dse.pareto_front is pareto_front
    assert dse.hypervolume is hypervolume
    assert dse.hypervolume_history is hypervolume_history
    assert dse.noise_aware_mask is noise_aware_mask


def test_undominated_rows_match_the_definition_on_random_and_tied_points() -> None:
    """The fast front (compare with the non-dominated set of the pessimistic ends only) keeps
    exactly the rows the definition keeps: no row's pessimistic ends dominate its optimistic ones."""
    from dse.util.dominance import undominated

    def by_definition(pessimistic: np.ndarray, optimistic: np.ndarray) -> np.ndarray:
        keep = np.zeros(len(optimistic), dtype=bool)
        valid = ~np.isnan(optimistic).any(axis=1)
        for i in np.flatnonzero(valid):
            others = pessimistic[valid]
            keep[i] = not np.any(np.all(others <= optimistic[i], axis=1)
                                 & np.any(others < optimistic[i], axis=1))
        return keep

    rng = np.random.default_rng(7)
    for shape, integers in [((300, 2), False), ((300, 3), False), ((200, 4), True)]:
        points = (rng.integers(0, 4, shape) if integers else rng.random(shape)).astype(float)
        points[5] = np.nan
        points[9] = points[10]  # a tie
        for margin in (0.0, 0.05):
            low, high = points - margin, points + margin
            assert (undominated(points, high, low) == by_definition(high, low)).all()
