"""Run folder <-> study and tables: read `study.db`, write `trials.parquet`, `pareto.csv` and the
other files of a run (`portable.csv`, `screening.json`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import optuna

from dse.core import DseError
from dse.results.baseline import baseline_ids, relative_to_baseline
from dse.results.screening_costs import SCREENING_FILE, screening_summary
from dse.results.table import front_frame, portable_front, trials_frame
from dse.util import atomic_write, atomic_write_text

if TYPE_CHECKING:
    from dse.storage import CampaignStorage

STUDY_FILE = "study.db"
TRIALS_FILE = "trials.parquet"
PARETO_FILE = "pareto.csv"
PORTABLE_FILE = "portable.csv"


def write_results(study: optuna.Study | Sequence[optuna.Study], run_dir: Path,
                  objectives: Sequence[str]) -> tuple[Path, Path]:
    """Write every trial to ``run_dir/trials.parquet`` and the feasible Pareto front over
    ``objectives`` to ``run_dir/pareto.csv`` (per device); returns both paths. A campaign of
    several devices also gets ``run_dir/portable.csv``: the architectures on more than one
    device's front. A campaign that screened candidates also gets ``run_dir/screening.json``
    (:func:`dse.results.screening_costs.screening_summary`). Each file is replaced atomically, so a
    dashboard or notebook reading them during a run never sees a partial file."""
    # Each objective also relative to the device's baseline (when the campaign has one).
    trials = relative_to_baseline(trials_frame(study), objectives, baseline_ids(study))
    front = front_frame(trials, objectives)
    parquet = atomic_write(run_dir / TRIALS_FILE,
                           lambda tmp: trials.to_parquet(tmp, engine="pyarrow", index=False))
    csv = atomic_write(run_dir / PARETO_FILE, lambda tmp: front.to_csv(tmp, index=False))
    if trials["device"].nunique() > 1:
        portable = portable_front(front)
        atomic_write(run_dir / PORTABLE_FILE, lambda tmp: portable.to_csv(tmp, index=False))
    screening = screening_summary(trials)
    if screening is not None:
        atomic_write_text(run_dir / SCREENING_FILE,
                          json.dumps(screening.as_dict(), indent=2) + "\n")
    return parquet, csv


def _storage(run_dir: Path, storage: CampaignStorage | None) -> CampaignStorage:
    from dse.storage import CampaignStorage

    return storage if storage is not None else CampaignStorage.of_run_folder(run_dir)


def load_campaign(run_dir: Path, storage: CampaignStorage | None = None) -> list[optuna.Study]:
    """Every study of the campaign in ``run_dir``, read-only: the one study of a single-device
    campaign, or one per device profile (``<campaign>@<profile>``), in name order. ``storage``:
    where the study lives (the experiment's ``storage:``); by default what the run folder says
    (its ``storage.json``; ``study.db`` when it says nothing).

    A storage that holds a single study of another name (a run folder renamed) gives that study,
    except a PostgreSQL database, whose other studies are other campaigns'.

    Args:
        run_dir: The campaign's run folder; its name is the campaign's.
        storage: Where the study lives; by default what the run folder says.

    Returns:
        The campaign's studies, read-only, in name order.

    Raises:
        DseError: When the storage holds no study (no file, an empty or damaged one, a database
            without one), none of this campaign, or cannot be read (one line naming it).

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> import optuna
        >>> from dse import load_campaign
        >>> run_dir = Path(tempfile.mkdtemp()) / "demo"
        >>> run_dir.mkdir()
        >>> study = optuna.create_study(study_name="demo",
        ...                             storage=f"sqlite:///{run_dir / 'study.db'}")
        >>> study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=3)
        >>> [(s.study_name, len(s.trials)) for s in load_campaign(run_dir)]
        [('demo', 3)]
        >>> from dse import DseError
        >>> try:
        ...     load_campaign(run_dir.parent / "never-run")
        ... except DseError as exc:
        ...     print("no study database" in str(exc))
        True
        >>> import shutil
        >>> shutil.rmtree(run_dir.parent)
    """
    chosen = _storage(run_dir, storage)
    # Optuna would create an empty database where none is; a damaged one would surface as an
    # SQLAlchemy traceback: both are said in one line first.
    chosen.check_readable()
    reader = chosen.for_reading()
    names = sorted(chosen.guarded(lambda: optuna.study.get_all_study_names(reader)))
    mine = [n for n in names if n == run_dir.name or n.startswith(f"{run_dir.name}@")]
    if not mine and len(names) == 1 and chosen.kind != "postgresql":
        mine = names  # a run folder renamed; a shared database's other studies are others'
    if not mine:
        shown = names if len(names) <= 10 else [*names[:10], "..."]
        raise DseError(f"{chosen.location} holds no study of campaign {run_dir.name!r} "
                       f"(it holds {shown})")
    return [chosen.guarded(partial(_read_study, chosen, name, reader)) for name in mine]


def _read_study(chosen: CampaignStorage, name: str, reader: object) -> optuna.Study:
    """The study, its trials read straight from SQLite when the schema is one dse knows (10,000
    trials: 0.3 s instead of 7 s through Optuna's ORM), else through Optuna."""
    from dse.results.sqlite_read import SnapshotStudy, read_trials

    if chosen.kind == "sqlite" and chosen.path is not None:
        trials = read_trials(chosen.path, name)
        if trials is not None:
            assert isinstance(reader, str)
            return SnapshotStudy(name, reader, trials)
    return optuna.load_study(study_name=name, storage=reader)  # type: ignore[arg-type]


def load_study(run_dir: Path, storage: CampaignStorage | None = None) -> optuna.Study:
    """Open the campaign study stored in ``run_dir`` (or ``storage``), read-only.

    SQLite's read-only mode (a PostgreSQL session's read-only transactions) means a report can
    never alter a study, not even by a schema upgrade, and may run while the campaign writes.
    The storage holds one study (the campaign); should it hold several, the one named like the
    folder is taken.
    """
    chosen = _storage(run_dir, storage)
    chosen.check_readable()
    reader = chosen.for_reading()
    names = chosen.guarded(lambda: optuna.study.get_all_study_names(reader))
    if len(names) == 1:
        name = names[0]
    elif run_dir.name in names:
        name = run_dir.name
    else:
        raise DseError(f"{chosen.location} holds {len(names)} studies {names}; expected one, or "
                       f"one named {run_dir.name!r}")
    return chosen.guarded(lambda: optuna.load_study(study_name=name, storage=reader))
