"""Check a campaign's study file (``study.db``, or ``study.journal``) and run folder before SQLite or
Optuna touch them, and say in one line what is wrong and what to do: a folder dse may not write, a
study file that is a folder, another kind of file, or a damaged database. Left to SQLAlchemy,
these surfaced as tracebacks or as messages that name something else ("exceeding max length",
"has the campaign run?")."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

from dse.core import DseError

SQLITE_HEADER = b"SQLite format 3\x00"
MOVE_AWAY = "move it away to start the campaign afresh, or restore it from a backup"


def _read_only_file_system(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check_writable_run_folder(run_dir: Path) -> None:
    """DseError when the campaign could not write its run folder or its study."""
    if not run_dir.is_dir():
        return  # created by the caller; a path that cannot be made is the spec check's to say
    study = run_dir / "study.db"
    check_writable_file(run_dir, study)
    check_study_file(study, must_exist=False)


def check_writable_file(run_dir: Path, path: Path) -> None:
    """DseError when the campaign could not write ``path`` in its run folder: a read-only file
    system, no write permission on the folder or the file, or something not a regular file."""
    if not run_dir.is_dir():
        return
    if _read_only_file_system(run_dir):
        raise DseError(f"{run_dir}: the run folder is on a read-only file system: a campaign "
                       f"writes its study there; remount it writable or set runs_dir elsewhere")
    for item in (run_dir, path):
        if item.exists() and not os.access(item, os.W_OK):
            raise DseError(f"{item}: not writable by this user: a campaign writes its study "
                           f"there; fix its permissions (or run as its owner)")
    noun = "study journal" if path.suffix == ".journal" else "study database"
    if path.is_dir():
        raise DseError(f"{path}: is a folder, not the campaign's {noun}; {MOVE_AWAY}")
    if (path.exists() or path.is_symlink()) and not path.is_file():
        raise DseError(f"{path}: is not a regular file, so not the campaign's {noun}; "
                       f"{MOVE_AWAY}")


def check_study_file(study: Path, *, must_exist: bool = True, integrity: bool = True) -> None:
    """DseError naming ``study`` when it is not a usable SQLite database: missing (when
    ``must_exist``), a folder, another kind of file, or (``integrity``: SQLite's quick check,
    which reads the whole file) damaged. An empty file is a database SQLite has not written yet:
    usable for a run, and for a report it holds no study. Readers skip the integrity check and
    ask for :func:`damaged_database_error` only once a read has failed: a report rebuilt every
    few seconds would otherwise read the whole database each time."""
    if not study.exists() and not study.is_symlink():
        if must_exist:
            raise DseError(f"{study}: no study database: the campaign has not run yet "
                           f"(dse run EXPERIMENT)")
        return
    if study.is_dir():
        raise DseError(f"{study}: is a folder, not the campaign's study database; {MOVE_AWAY}")
    if not study.is_file():
        raise DseError(f"{study}: is not a regular file, so not the campaign's study database; "
                       f"{MOVE_AWAY}")
    try:
        with study.open("rb") as file:
            header = file.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise DseError(f"{study}: cannot read the study database: {exc.strerror}") from None
    if not header:
        if must_exist:
            raise DseError(f"{study}: the study database is empty: the campaign was stopped "
                           f"before it wrote its first trial; run it again")
        return
    if header != SQLITE_HEADER:
        raise DseError(f"{study}: not an SQLite database (damaged, or another file in its place); "
                       f"{MOVE_AWAY}")
    if must_exist and not _holds_studies(study):
        raise DseError(f"{study}: holds no study yet: the campaign was stopped before it created "
                       f"its study; run it again")
    if integrity:
        damaged = damaged_database_error(study)
        if damaged is not None:
            raise damaged


def damaged_database_error(study: Path) -> DseError | None:
    """The one-line error for a damaged ``study`` (SQLite's quick check), None when sound."""
    problem = _integrity_problem(study)
    if not problem:
        return None
    return DseError(f"{study}: the study database is damaged (SQLite: {problem}); {MOVE_AWAY}")


def check_journal_file(journal: Path) -> None:
    """DseError naming ``journal`` when there is no study journal to read there."""
    if not journal.exists() and not journal.is_symlink():
        raise DseError(f"{journal}: no study journal: the campaign has not run yet "
                       f"(dse run EXPERIMENT)")
    if not journal.is_file():
        raise DseError(f"{journal}: is not a regular file, so not the campaign's study journal; "
                       f"{MOVE_AWAY}")
    if journal.stat().st_size == 0:
        raise DseError(f"{journal}: the study journal is empty: the campaign was stopped "
                       f"before it wrote its first trial; run it again")


def _holds_studies(study: Path) -> bool:
    """Whether Optuna's tables are in the file (the campaign's lease table comes first)."""
    uri = f"file:{quote(str(study.resolve()))}?mode=ro"
    try:
        connection = sqlite3.connect(uri, uri=True, timeout=30)
        try:
            found = connection.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'studies'").fetchone()
        finally:
            connection.close()
    except sqlite3.DatabaseError:
        return True  # damaged or busy: the read that follows says which
    return found is not None


def _integrity_problem(study: Path) -> str:
    """SQLite's own verdict on the file, read-only ("" when it is sound)."""
    uri = f"file:{quote(str(study.resolve()))}?mode=ro"
    try:
        connection = sqlite3.connect(uri, uri=True, timeout=30)
        try:
            rows = connection.execute("PRAGMA quick_check").fetchall()
        finally:
            connection.close()
    except sqlite3.OperationalError:
        return ""  # busy or locked by a writer: not a sign of damage
    except sqlite3.DatabaseError as exc:
        return str(exc)
    verdict = "; ".join(str(row[0]) for row in rows[:3])
    return "" if verdict == "ok" else verdict
