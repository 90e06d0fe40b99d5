"""A loaded campaign: the :class:`Experiment` (its spec with the search space and device profiles
it names) and the folders it writes to."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dse.spec.models import ExperimentSpec, HardwareProfile, SearchSpace

if TYPE_CHECKING:
    from dse.candidate import Candidate
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


def output_folders(path: Path, spec: ExperimentSpec) -> dict[str, Path]:
    """The folders a campaign writes to, by the field of the experiment at ``path`` that names
    each: ``runs_dir`` (its run folder, ``<runs_dir>/<name>``), ``dashboards_dir`` and, when set,
    ``cache_dir``; resolved against the experiment's folder."""
    base = path.parent
    folders = {"runs_dir": base / spec.runs_dir / spec.name, "dashboards_dir": base / spec.dashboards_dir}
    if spec.cache_dir is not None:
        folders["cache_dir"] = base / spec.cache_dir
    return {field: folder.resolve() for field, folder in folders.items()}
