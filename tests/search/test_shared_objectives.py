"""Objective values known before measuring: shared by a model's deployments, and by devices."""

from __future__ import annotations

import numpy as np

from dse.search.shared_objectives import known_values, model_group

BACKENDS = ["onnxruntime", "torch"]


def _params(width: float, backend: str, precision: str, batch: int, threads: int = 1
            ) -> dict[str, object]:
    return {"arch.width": width, "backend": backend, f"precision.{backend}": precision,
            "batch_size": batch, f"{backend}.threads": threads}


def test_a_model_group_leaves_out_backend_batch_and_knobs_but_keeps_precision() -> None:
    a = model_group(_params(0.5, "onnxruntime", "fp32", 1, threads=1), BACKENDS)
    b = model_group(_params(0.5, "torch", "fp32", 8, threads=2), BACKENDS)
    assert a == b
    assert model_group(_params(0.5, "torch", "int8", 8), BACKENDS) != a
    assert model_group(_params(1.0, "torch", "fp32", 8), BACKENDS) != a


def test_a_device_alone_knows_nothing_in_advance() -> None:
    # Group g1 measured twice with one accuracy: the rule is not used within a device (see the
    # module's documentation).
    own = (["g1", "g1", "g2"], np.array([[-0.9, 1.0], [-0.9, 3.0], [-0.8, 2.0]]))
    _, known = known_values(["g1", "g2", "g3"], own)
    assert not known.any()


def test_a_value_that_varies_within_a_model_group_is_not_lent() -> None:
    # Both devices measured c1 and c2 alike, but this device's group g gave two accuracies.
    mine = (["g", "g", "c2"], np.array([[-0.9, 1.0], [-0.7, 1.5], [-0.8, 2.0]]))
    theirs = (["g", "c2", "c3"], np.array([[-0.9, 5.0], [-0.8, 9.0], [-0.95, 7.0]]))
    _, known = known_values(["c3"], mine, [theirs])
    assert not known.any()


def test_another_device_lends_the_values_both_measured_alike() -> None:
    # Free parameters only: every candidate is its own group. Accuracy equal on the two
    # groups both devices measured, latency not: the sibling's accuracy of c3 is known here.
    mine = (["c1", "c2"], np.array([[-0.9, 1.0], [-0.8, 2.0]]))
    theirs = (["c1", "c2", "c3"], np.array([[-0.9, 5.0], [-0.8, 9.0], [-0.95, 7.0]]))
    values, known = known_values(["c3", "c4"], mine, [theirs])
    assert known.tolist() == [[True, False], [False, False]]
    assert values[0, 0] == -0.95


def test_a_device_sharing_too_few_groups_or_differing_lends_nothing() -> None:
    mine = (["c1", "c2"], np.array([[-0.9, 1.0], [-0.8, 2.0]]))
    one_overlap = (["c1", "c3"], np.array([[-0.9, 5.0], [-0.95, 7.0]]))
    differing = (["c1", "c2", "c3"], np.array([[-0.9, 5.0], [-0.7, 9.0], [-0.95, 7.0]]))
    for sibling in (one_overlap, differing):
        _, known = known_values(["c3"], mine, [sibling])
        assert not known.any()
