"""Example evaluators.

:func:`digits_validation` is an accuracy evaluator (``model.evaluator``), handed the deployed model.
:func:`zdt1` is a toy custom evaluator (the experiment's ``evaluator``): ZDT1, a classic
two-objective test function, over free parameters. It is a toy — a deterministic analytic
function, not a measurement — for demos, tests and search-strategy research
(``experiments/custom-evaluator.yaml``). ZDT1 (Zitzler, Deb and Thiele, 2000) over parameters
``x1 .. xn`` in [0, 1]::

    zdt_f1 = x1
    g      = 1 + 9 * mean(x2 .. xn)          (1 when n = 1)
    zdt_f2 = g * (1 - sqrt(zdt_f1 / g))

Both are minimised. The Pareto front is ``x2 = .. = xn = 0``, where ``zdt_f2 = 1 - sqrt(zdt_f1)``.
The search space declares the two metrics (``search_spaces/free-params-example.yaml``).
"""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from dse.accuracy import DeployedModel
from dse.core import Candidate


def zdt1_values(params: Mapping[str, float]) -> dict[str, float]:
    """ZDT1 of ``params`` (``x1`` first, the others in any order); each must lie in [0, 1]."""
    if "x1" not in params:
        raise ValueError(f"ZDT1 needs a parameter x1; got {sorted(params)}")
    for name, value in params.items():
        if not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"ZDT1 needs parameters in [0, 1], but got {name}={value}")
    f1 = float(params["x1"])
    rest = [float(v) for k, v in params.items() if k != "x1"]
    g = 1.0 + 9.0 * sum(rest) / len(rest) if rest else 1.0
    return {"zdt_f1": f1, "zdt_f2": g * (1.0 - math.sqrt(f1 / g))}


def zdt1(candidate: Candidate) -> dict[str, float]:
    """The custom evaluator: ZDT1 of the candidate's free parameters (``evaluator:
    dse.examples.evaluators:zdt1``)."""
    return zdt1_values(candidate.params)


def write_zdt1_table(path: Path, grid: Mapping[str, Sequence[float]]) -> Path:
    """Write ZDT1 at every point of ``grid`` (parameter -> values) as a CSV a replay device can
    serve: one column per parameter, then ``zdt_f1 [1]`` and ``zdt_f2 [1]``. Returns ``path``."""
    names = list(grid)
    with path.open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow([*names, "zdt_f1 [1]", "zdt_f2 [1]"])
        for point in itertools.product(*grid.values()):
            values = zdt1_values(dict(zip(names, point, strict=True)))
            writer.writerow([*point, f"{values['zdt_f1']:.6g}", f"{values['zdt_f2']:.6g}"])
    return path


def digits_validation(deployed: DeployedModel) -> dict[str, float]:
    """An accuracy evaluator (``model.evaluator: dse.examples.evaluators:digits_validation``):
    top-1 and top-3 accuracy of the deployed model on the digits test split — standing in for a
    user's own validation set, which their evaluator would load instead."""
    import numpy as np

    from dse.accuracy import load_digits_split

    split = load_digits_split(seed=0)
    logits = deployed.predict(split.x_test)
    top3 = np.argsort(logits, axis=1)[:, -3:]
    return {"accuracy": float(np.mean(logits.argmax(axis=1) == split.y_test)),
            "top3_accuracy": float(np.mean((top3 == split.y_test[:, None]).any(axis=1)))}
