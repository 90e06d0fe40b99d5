"""A proxy's -inf (its defined lowest score) through a whole campaign: a value, not a failure.

Real Optuna storage, result tables, Pareto front, hypervolume and dashboard, and the real CLI; an
evaluator stands in for the device so that the -inf falls on chosen candidates.
"""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pandas as pd
import pytest
from typer.testing import CliRunner

from dse.app.api import load_experiment, run_campaign
from dse.cli import app
from dse.core.candidate import Candidate
from dse.core.exceptions import DseError
from dse.core.metrics import is_measured
from dse.report.dashboard import dashboard_info
from dse.results import load_campaign, trials_frame
from dse.search.pareto import default_reference, hypervolume
from tests.conftest import LOCAL_CPU

SPACE = """\
name: proxy-space
parameters:
  x1: {low: 0.0, high: 1.0, step: 0.25}
  x2: [0.0, 0.5, 1.0]
metrics:
  - {name: cost, unit: "1", direction: minimize}
objectives:
  - metric: proxy_naswot
  - metric: cost
"""
GRID = 15  # 5 values of x1 times 3 of x2
NASWOT = "proxy_naswot [score]"


def scored(candidate: Candidate) -> dict[str, float]:
    """-inf where x1 = 0: those three are the cheapest, so they are on the front."""
    x1, x2 = candidate.params["x1"], candidate.params["x2"]
    return {"proxy_naswot": -math.inf if x1 == 0 else x1 + x2, "cost": x1}


def _campaign(folder: Path, extra: str = "") -> Path:
    files = {
        "search_spaces/proxy-space.yaml": SPACE + extra,
        "hw_profiles/sim.yaml": LOCAL_CPU.replace("name: local-cpu", "name: sim"),
        "experiments/proxy.yaml": (
            "name: proxy\nsearch_space: ../search_spaces/proxy-space.yaml\n"
            "devices: [../hw_profiles/sim.yaml]\nsampler: {name: grid, seed: 0}\n"
            f"budget: {{trials: {GRID}, max_failed: 1}}\n"
            "evaluator: tests.search.test_infinite_worst:scored\n"),
    }
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder / "experiments" / "proxy.yaml"


def test_only_a_metrics_defined_worst_infinity_counts_as_measured() -> None:
    assert is_measured("proxy_naswot", -math.inf) and is_measured("proxy_synflow", -math.inf)
    assert not is_measured("proxy_naswot", math.inf)  # the best end: no such score
    assert not is_measured("proxy_naswot", math.nan)
    assert not is_measured("proxy_grad_norm", -math.inf)  # a sum of norms is never -inf
    assert not is_measured("latency_p99_ms", math.inf)
    assert is_measured("latency_p99_ms", 1.5)


def test_minus_inf_objective_is_measured_ranked_last_and_kept_off_the_axes(
        tmp_path: Path) -> None:
    result = run_campaign(_campaign(tmp_path))

    trials = result.trials
    assert len(trials) == GRID and (trials["status"] == "ok").all()
    lowest = trials[trials["param.x1"] == 0]
    assert len(lowest) == 3 and (lowest[NASWOT] == -math.inf).all()
    assert trials.loc[trials["param.x1"] > 0, NASWOT].map(math.isfinite).all()
    # Optuna holds the value itself, and the stored table reads it back.
    study = load_campaign(result.run_dir)[0]
    values = sorted(t.values[0] for t in study.get_trials(states=[optuna.trial.TrialState.COMPLETE]))
    assert values[:3] == [-math.inf] * 3 and math.isfinite(values[3])
    stored = pd.read_parquet(result.run_dir / "trials.parquet")
    assert (stored[NASWOT] == -math.inf).sum() == 3

    # The front: the three cheapest (cost 0, naswot -inf) and, per cost, the best score.
    front = result.pareto()
    assert sorted(zip(front["param.x1"], front["param.x2"], strict=True)) == [
        (0.0, 0.0), (0.0, 0.5), (0.0, 1.0), (0.25, 1.0), (0.5, 1.0), (0.75, 1.0), (1.0, 1.0)]
    assert "-inf" in (result.run_dir / "pareto.csv").read_text()

    # The reference point comes from finite values; the -inf points add no volume.
    reference = default_reference(trials, ["proxy_naswot", "cost"])
    assert all(math.isfinite(v) for v in reference)
    finite_front = front[front[NASWOT] > -math.inf]
    volume = hypervolume(front[[NASWOT, "cost [1]"]].to_numpy(), ["proxy_naswot", "cost"],
                         reference)
    assert volume == hypervolume(finite_front[[NASWOT, "cost [1]"]].to_numpy(),
                                 ["proxy_naswot", "cost"], reference) > 0

    info = dashboard_info(load_campaign(result.run_dir), result.run_dir)
    assert info.history.empty_reason is None
    assert all(math.isfinite(v) for line in info.history.lines for v in line.hypervolume)
    drawn = [t for group in info.scatter.groups for t in group.trials]
    assert sorted(drawn) == sorted(trials.loc[trials["param.x1"] > 0, "trial"])
    assert "3 trial(s) with an infinite value are not drawn (3 at proxy_naswot = -inf" \
        in info.scatter.note
    assert "3 at proxy_naswot = -inf" in info.parallel.note
    assert all(math.isfinite(v) for dim in info.parallel.dimensions for v in dim.values)
    page = result.dashboard.read_text() if result.dashboard is not None else ""
    assert "not drawn (3 at proxy_naswot = -inf" in page


def test_a_constraint_judges_minus_inf_as_a_value(tmp_path: Path) -> None:
    experiment = _campaign(tmp_path, "constraints:\n  - proxy_naswot >= 0.5\n")
    result = run_campaign(experiment, report=False)

    trials = result.trials
    assert (trials["status"] == "ok").all()  # measured, not failed
    lowest = trials["param.x1"] == 0
    assert (~trials.loc[lowest, "feasible"]).all()
    assert trials.loc[~lowest, "feasible"].sum() == (trials.loc[~lowest, NASWOT] >= 0.5).sum()
    assert not result.pareto()["param.x1"].eq(0).any()


def test_cli_prints_the_front_with_minus_inf(tmp_path: Path) -> None:
    outcome = CliRunner().invoke(app, ["run", str(_campaign(tmp_path))])
    assert outcome.exit_code == 0, outcome.output
    assert "-inf" in outcome.output
    # The front table itself lists the three -inf points (not only the progress lines).
    table = outcome.output[outcome.output.index("Pareto front (7 points)"):]
    assert table.count("-inf") == 3


@pytest.mark.parametrize("value", [math.inf, math.nan])
def test_a_proxy_at_its_best_infinity_or_nan_is_no_measurement(tmp_path: Path,
                                                               value: float) -> None:
    def broken(candidate: Candidate) -> dict[str, float]:
        return {"proxy_naswot": value, "cost": candidate.params["x1"]}

    experiment = load_experiment(_campaign(tmp_path))
    with pytest.raises(DseError, match=r"budget\.max_failed"):
        run_campaign(experiment, evaluator=broken, report=False)
    trials = trials_frame(load_campaign(experiment.run_dir))
    assert len(trials) == 1 and (trials["status"] == "failed").all()
    assert trials["reason"].str.contains(f"reported proxy_naswot = {value}, not a finite").all()
