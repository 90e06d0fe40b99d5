"""Run folder <-> study and tables: read `study.db`, write `trials.parquet`, `pareto.csv` and the
other files of a run (`portable.csv`, `screening.json`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

import optuna

from dse.atomic import atomic_write, atomic_write_text
from dse.exceptions import DseError
from dse.results.baseline import baseline_ids, relative_to_baseline
from dse.results.fidelity import SCREENING_FILE, screening_summary
from dse.results.study_file import check_study_file
from dse.results.table import front_frame, portable_front, trials_frame

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
    (:func:`dse.results.fidelity.screening_summary`). Each file is replaced atomically, so a
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


def _read_only_storage(run_dir: Path) -> str:
    path = run_dir / STUDY_FILE
    # Optuna would create an empty database where none is; a damaged one would surface as an
    # SQLAlchemy traceback: both are said in one line first.
    check_study_file(path)
    return f"sqlite:///file:{quote(str(path.resolve()))}?mode=ro&uri=true"


def load_campaign(run_dir: Path) -> list[optuna.Study]:
    """Every study of the campaign in ``run_dir``, read-only: the one study of a single-device
    campaign, or one per device profile (``<campaign>@<profile>``), in name order."""
    storage = _read_only_storage(run_dir)
    names = sorted(optuna.study.get_all_study_names(storage))
    mine = [n for n in names if n == run_dir.name or n.startswith(f"{run_dir.name}@")]
    if not mine and len(names) == 1:
        mine = names
    if not mine:
        raise DseError(f"{run_dir / STUDY_FILE} holds no study of campaign {run_dir.name!r} "
                       f"(it holds {names})")
    return [_read_study(run_dir / STUDY_FILE, name, storage) for name in mine]


def _read_study(db: Path, name: str, storage: str) -> optuna.Study:
    """The study, its trials read straight from SQLite when the schema is one dse knows (10,000
    trials: 0.3 s instead of 7 s through Optuna's ORM), else through Optuna."""
    from dse.results.sqlite_read import SnapshotStudy, read_trials

    trials = read_trials(db, name)
    if trials is None:
        return optuna.load_study(study_name=name, storage=storage)
    return SnapshotStudy(name, storage, trials)


def load_study(run_dir: Path) -> optuna.Study:
    """Open the campaign study stored in ``run_dir/study.db``, read-only.

    SQLite's read-only mode means a report can never alter a study, not even by a schema
    upgrade, and may run while the campaign writes. The folder holds one study (the campaign);
    should it hold several, the one named like the folder is taken.
    """
    path = run_dir / STUDY_FILE
    check_study_file(path)
    storage = f"sqlite:///file:{quote(str(path.resolve()))}?mode=ro&uri=true"
    names = optuna.study.get_all_study_names(storage)
    if len(names) == 1:
        name = names[0]
    elif run_dir.name in names:
        name = run_dir.name
    else:
        raise DseError(f"{path} holds {len(names)} studies {names}; expected one, or one named "
                       f"{run_dir.name!r}")
    return optuna.load_study(study_name=name, storage=storage)
