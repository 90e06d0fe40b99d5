"""A campaign whose measurements are not clean: flagged in every output, kept off the front by
default, allowed on it when the campaign says so. Real Ray, real runners, the real CLI."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from dse.app.api import load_experiment
from dse.cli import app
from dse.core.columns import competing_mask
from dse.core.metrics import metric
from dse.core.trial_record import TrialAttr
from dse.report.dashboard import dashboard_info
from dse.results import load_campaign
from dse.search.second_looks import look_is_slower
from tests.conftest import tiny_experiment_text

# Two milliseconds of timing, never extended: no run reaches the 368 calls a p99 interval needs,
# so every measured trial is underpowered. Its p99 is the objective: the value is kept (the trial
# is a result the search learns from, not a failure it would propose again), its interval is
# missing, and the trial is kept off the front. Interference is ignored: on a busy machine a
# window would be flagged disturbed instead (tested elsewhere).
UNREACHABLE = ("measurement: {warmup_max_seconds: 0.1, min_seconds: 0.0, max_seconds: 0.002, "
               "max_extension: 1, interference: {action: ignore}}\n")


def _experiment(path: Path, extra: str = "") -> None:
    text = tiny_experiment_text(3, name="unclean")
    start = text.index("measurement:")
    head, tail = UNREACHABLE.rsplit("}", 1)  # extra settings go in the measurement's braces
    path.write_text(text[:start] + head + extra + "}" + tail)


def test_underpowered_trials_are_flagged_everywhere_and_kept_off_the_front(
        tiny_campaign: Path) -> None:
    _experiment(tiny_campaign)
    result = CliRunner().invoke(app, ["run", str(tiny_campaign)])
    assert result.exit_code == 0, result.output
    progress = [line for line in result.output.splitlines() if line.startswith("#")]
    measured = [line for line in progress if "(reused" not in line]
    assert measured and all(line.endswith("[underpowered]") for line in measured)
    assert "Pareto front (0 points)" in result.output

    experiment = load_experiment(tiny_campaign)
    trials = pd.read_parquet(experiment.run_dir / "trials.parquet")
    fresh = trials[trials["reused_from"].isna()]
    # Each measured candidate looked at once more at the end of the search (a second look),
    # underpowered again: it is a trial of its own that names the first, and counts no budget.
    looks = fresh[fresh["second_look_of"].notna()]
    firsts = fresh[fresh["second_look_of"].isna()]
    assert sorted(looks["second_look_of"]) == sorted(firsts["trial"])
    assert list(looks["candidate_id"]) == [
        firsts.set_index("trial").loc[n, "candidate_id"] for n in looks["second_look_of"]]
    assert len(firsts) == 3  # budget.trials: distinct candidates, second looks not counted
    assert sorted(int(line.split("(second look at #")[1].split(")")[0]) for line in progress
                  if "(second look at #" in line) == sorted(looks["second_look_of"])
    # Every trial counted, each measured one re-measured once (at a quieter moment).
    assert (f"measurement: {len(trials)} trials: 0 measured cleanly, {len(firsts)} "
            f"underpowered (kept off the front); {len(firsts)} re-measurement(s) in all; "
            f"{len(looks)} second look{'s' if len(looks) > 1 else ''} at the end of the search: "
            f"0 clean") in " ".join(result.output.split())
    assert (f"local-cpu: {len(looks)} trial{'s' if len(looks) > 1 else ''} measured once more "
            f"(second looks at {', '.join(f'#{n}' for n in sorted(looks['second_look_of']))} "
            f"not measured cleanly)") in " ".join(result.output.split())
    assert (fresh["status"] == "ok").all() and (fresh["remeasures"] == 1).all()
    assert (fresh["measurement_quality"] == "underpowered").all()
    assert fresh["quality_blocks_front"].all()
    # The objective's value is kept, its interval missing with why.
    assert fresh["latency_p99_ms [ms]"].notna().all()
    low = "latency_p99_ci_low_ms [ms]"
    assert low not in trials or trials[low].isna().all()
    assert fresh["missing"].str.contains("too few for a 95% confidence interval of p99").all()
    assert pd.read_csv(experiment.run_dir / "pareto.csv").empty

    info = dashboard_info(load_campaign(experiment.run_dir), experiment.run_dir)
    # A repeat carries the quality of the measurement it reuses.
    assert sorted(info.scatter.unclean.trials) == sorted(trials[trials["status"] == "ok"]["trial"])
    assert info.scatter.groups == [] and info.scatter.infeasible.trials == []
    outcome = info.scatter.hover_fields.index("outcome")
    assert info.scatter.unclean.hover[0][outcome] == "measured underpowered (kept off the front)"
    page = experiment.dashboard_path.read_text()
    assert "0 measured cleanly" in page and "not measured cleanly" in page

    # The campaign lets them on the front: the next run (here, a resume with nothing left to do)
    # records that, and the front and its table show their quality.
    _experiment(tiny_campaign, ", non_ok_on_front: true")
    again = CliRunner().invoke(app, ["run", str(tiny_campaign)])
    assert again.exit_code == 0, again.output
    assert "Pareto front (0 points)" not in again.output
    # The terminal is 80 columns: rich wraps the line at a space.
    assert "underpowered (allowed on the front)" in " ".join(again.output.split())
    front = pd.read_csv(experiment.run_dir / "pareto.csv")
    assert len(front) >= 1 and (front["measurement_quality"] == "underpowered").all()
    table = dashboard_info(load_campaign(experiment.run_dir), experiment.run_dir).front
    assert "measurement_quality" in table.columns


def test_clean_trials_near_the_front_get_a_second_look_and_the_faster_competes(
        tiny_campaign: Path) -> None:
    # Every clean trial is near enough (a factor of 10 on the timing objectives); labels, which
    # a busy machine may give, are looked at too and compete as before.
    text = tiny_experiment_text(3, name="near")
    tiny_campaign.write_text(
        text.replace("non_ok_on_front: true, second_looks: 0}", "second_looks_near_front: 10}")
        .replace("interference: {wait_s: 0.1}", "interference: {action: ignore}"))
    result = CliRunner().invoke(app, ["run", str(tiny_campaign)])
    assert result.exit_code == 0, result.output
    experiment = load_experiment(tiny_campaign)
    objectives = [o.metric for o in experiment.space.objectives]
    trials = pd.read_parquet(experiment.run_dir / "trials.parquet")
    fresh = trials[trials["reused_from"].isna()]
    looks = fresh[fresh["second_look_of"].notna()]
    firsts = fresh[fresh["second_look_of"].isna()].set_index("trial")
    # One look per measured candidate (all three are near the front, clean or not).
    assert sorted(looks["second_look_of"]) == sorted(firsts.index)
    assert "measured once more (second looks at" in " ".join(result.output.split())
    competing = set(trials[competing_mask(trials)]["trial"])
    columns = [metric(name).column for name in objectives]
    for _, look in looks.iterrows():
        first = firsts.loc[int(look["second_look_of"])]
        if first["measurement_quality"] != "ok" or look["measurement_quality"] != "ok":
            assert not bool(look.get(TrialAttr.SLOWER_THAN_FIRST, False) is True)
            continue
        # Of two clean looks exactly one competes: the faster, by the timing objectives.
        slower = look_is_slower(list(look[columns]), list(first[columns]), objectives)
        assert bool(look.get(TrialAttr.SLOWER_THAN_FIRST) is True) == slower
        assert look["trial"] not in competing if slower else first.name not in competing
