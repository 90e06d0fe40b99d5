"""A loaded campaign: the :class:`Experiment` (its spec with the search space and device profiles
it names) and the folders it writes to."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dse.spec.models import ExperimentSpec, HardwareProfile, SearchSpace

if TYPE_CHECKING:
    from dse.core import Candidate
    from dse.storage import CampaignStorage

# A custom evaluator: measures a candidate on the driver's machine, returns metric -> value.
Evaluator = Callable[["Candidate"], Mapping[str, float]]


@dataclass(frozen=True)
class Experiment:
    """A campaign with its search space and device profiles loaded and cross-checked."""

    spec: ExperimentSpec
    path: Path
    space: SearchSpace
    devices: tuple[HardwareProfile, ...]
    evaluator: Evaluator | None = None
    """The function the experiment's ``evaluator:`` names, imported."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def run_dir(self) -> Path:
        return output_folders(self.path, self.spec)["runs_dir"]

    @property
    def cache_dir(self) -> Path:
        return output_folders(self.path, self.spec).get("cache_dir", self.run_dir / "cache")

    @property
    def storage(self) -> CampaignStorage:
        """Where the campaign's study lives (``storage:``; an ``env:NAME`` read now)."""
        from dse.storage import CampaignStorage

        return CampaignStorage.from_setting(self.spec.storage, self.run_dir,
                                            where=f"{self.path}: storage")

    @property
    def dashboard_path(self) -> Path:
        folder = output_folders(self.path, self.spec)["dashboards_dir"]
        return (folder / f"{self.spec.name}.html").resolve()


# The folder that holds a project's experiment files; its parent is the project's root.
EXPERIMENTS_FOLDER = "experiments"


def output_folders(path: Path, spec: ExperimentSpec) -> dict[str, Path]:
    """The folders a campaign writes to, by the field of the experiment at ``path`` that names
    each: ``runs_dir`` (its run folder, ``<runs_dir>/<name>``), ``dashboards_dir`` and, when set,
    ``cache_dir``; resolved against the experiment's folder. Without a ``dashboards_dir`` the
    dashboards go to the project's ``dashboards/`` (:func:`project_root`)."""
    base = path.parent
    dashboards = (base / spec.dashboards_dir if spec.dashboards_dir is not None
                  else project_root(path) / "dashboards")
    folders = {"runs_dir": base / spec.runs_dir / spec.name, "dashboards_dir": dashboards}
    if spec.cache_dir is not None:
        folders["cache_dir"] = base / spec.cache_dir
    return {field: folder.resolve() for field, folder in folders.items()}


def project_root(path: Path) -> Path:
    """The root of the project holding the experiment file at ``path``: the parent of its folder
    when that folder is ``experiments/``, else the experiment's own folder.

    The project layout keeps campaigns in ``experiments/`` beside ``search_spaces/``,
    ``hw_profiles/`` and a top-level ``dashboards/`` where users look for every campaign's page, so
    an experiment in ``experiments/`` writes there. An experiment anywhere else (a user's
    ``proj/exp.yaml``) takes its own folder as the root, so a campaign never writes outside the
    folder of the project that holds it. The name is read from the path as written (made absolute,
    not following links), the folder a user sees."""
    folder = Path(os.path.abspath(path)).parent
    return folder.parent if folder.name == EXPERIMENTS_FOLDER else folder
