"""dse.spec.experiment: where a campaign writes. Dashboards go to the project's top-level
``dashboards/`` unless the campaign names its own ``dashboards_dir``; a campaign outside an
``experiments/`` folder never writes outside its own folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dse.spec.experiment import output_folders, project_root
from dse.spec.models import ExperimentSpec
from tests.conftest import tiny_experiment_text


def _spec(extra: str = "") -> ExperimentSpec:
    return ExperimentSpec.model_validate(yaml.safe_load(tiny_experiment_text(2) + extra))


def test_a_loaded_campaign_in_experiments_writes_its_dashboard_to_the_top_level_folder(
        tiny_campaign: Path) -> None:
    from dse.app.api import load_experiment

    experiment = load_experiment(tiny_campaign)
    project = tiny_campaign.parents[1]
    assert experiment.dashboard_path == project / "dashboards" / "tiny-campaign.html"
    assert experiment.run_dir == project / "experiments" / "runs" / "tiny-campaign"


def test_a_campaigns_own_dashboards_dir_wins_relative_to_its_file(tiny_campaign: Path) -> None:
    from dse.app.api import load_experiment

    with tiny_campaign.open("a") as spec:
        spec.write("dashboards_dir: pages\n")
    experiment = load_experiment(tiny_campaign)
    assert experiment.dashboard_path == tiny_campaign.parent / "pages" / "tiny-campaign.html"


@pytest.mark.parametrize("written", ["dashboards", "../dashboards", "/elsewhere/pages"])
def test_a_dashboards_dir_written_out_is_read_as_written(tmp_path: Path, written: str) -> None:
    experiment = tmp_path / "experiments" / "tiny.yaml"
    folders = output_folders(experiment, _spec(f"dashboards_dir: {written}\n"))
    assert folders["dashboards_dir"] == (experiment.parent / written).resolve()


def test_a_campaign_outside_experiments_keeps_its_dashboards_in_its_own_folder(
        tmp_path: Path) -> None:
    # A user's proj/exp.yaml: its project is proj/, and nothing is written above it.
    experiment = tmp_path / "proj" / "exp.yaml"
    folders = output_folders(experiment, _spec())
    assert folders["dashboards_dir"] == tmp_path / "proj" / "dashboards"
    assert folders["runs_dir"] == tmp_path / "proj" / "runs" / "tiny-campaign"


@pytest.mark.parametrize("written", ["experiments/tiny.yaml", "experiments/../experiments/tiny.yaml",
                                     "experiments/sub/../tiny.yaml"])
def test_the_project_root_is_found_from_a_relative_path(tmp_path: Path, written: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert project_root(Path(written)) == tmp_path
    assert output_folders(Path(written), _spec())["dashboards_dir"] == tmp_path / "dashboards"


def test_only_a_folder_named_experiments_is_a_projects_campaign_folder(tmp_path: Path) -> None:
    assert project_root(tmp_path / "my-experiments" / "x.yaml") == tmp_path / "my-experiments"
    assert project_root(tmp_path / "experiments" / "sub" / "x.yaml") == (
        tmp_path / "experiments" / "sub")
