"""What a live report asks of a campaign's storage every few seconds, cheaply: a stamp that
changes on every write (so an unchanged study is not read again), and whether a trial is running.

A stamp is a tuple of ``(what, last change in ns, size)``: the study files' modification times
and sizes for SQLite and the journal; for a database server, one summary row of the campaign's
studies (trials, finished trials, the latest start or finish), read with one query."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.storage.campaign import STUDY_FILE

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

    from dse.storage.campaign import CampaignStorage

Stamp = tuple[tuple[str, int, int], ...]

_SUMMARY = """
SELECT count(t.trial_id),
       sum(CASE WHEN CAST(t.state AS VARCHAR(16)) IN ('RUNNING', 'WAITING') THEN 0 ELSE 1 END),
       max(coalesce(t.datetime_complete, t.datetime_start))
FROM studies s LEFT JOIN trials t ON t.study_id = s.study_id
WHERE s.study_name = :campaign OR s.study_name LIKE :devices
"""


def stamp(storage: CampaignStorage, campaign: str) -> Stamp:
    """The storage's stamp for ``campaign``; empty while there is nothing to read."""
    if storage.path is not None:
        suffixes = ("", "-wal", "-journal") if storage.kind == "sqlite" else ("",)
        stamps = []
        for suffix in suffixes:
            path = storage.path.with_name(storage.path.name + suffix)
            try:
                stat_result = path.stat()
            except FileNotFoundError:
                continue
            stamps.append((path.name, stat_result.st_mtime_ns, stat_result.st_size))
        return tuple(stamps)
    return _database_stamp(storage, campaign)


def _database_stamp(storage: CampaignStorage, campaign: str) -> Stamp:
    import sqlalchemy as sa

    engine = sa.create_engine(storage.url, poolclass=sa.pool.NullPool,
                              connect_args={"connect_timeout": 10})
    try:
        with engine.connect() as connection:
            like = campaign.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            row = connection.execute(sa.text(_SUMMARY),
                                     {"campaign": campaign, "devices": f"{like}@%"}).one()
    except sa.exc.ProgrammingError:
        return ()  # no Optuna tables yet: nothing written
    finally:
        engine.dispose()
    trials, finished, latest = int(row[0] or 0), int(row[1] or 0), row[2]
    if latest is None and trials == 0:
        return ()
    latest_ns = 0 if latest is None else int(latest.timestamp() * 1e9)
    return (("postgresql", latest_ns, trials * 1_000_003 + finished + 1),)


def started(stamp_: Stamp) -> bool:
    """Whether the stamp shows something to read: SQLite creates its file empty before it writes
    the schema, and there is nothing to read until then."""
    return any(size > 0 and name != f"{STUDY_FILE}-wal" and name != f"{STUDY_FILE}-journal"
               for name, _, size in stamp_)


def has_running_trials(storage: CampaignStorage, campaign: str) -> bool:
    """True while some trial of the campaign's studies is running or waiting (the campaign is
    under way, or its driver was killed mid-trial and has not been resumed). Asked with a state
    filter, so only those trials are read: loading a whole study of 10,000 trials through Optuna
    takes seconds."""
    from optuna.storages import BaseStorage
    from optuna.trial import TrialState

    from dse.storage.campaign import dispose_engine

    reader = storage.for_reading()
    opened = reader if isinstance(reader, BaseStorage) else _rdb(reader)
    try:
        states = (TrialState.RUNNING, TrialState.WAITING)
        return storage.guarded(lambda: any(
            opened.get_all_trials(opened.get_study_id_from_name(study.study_name),
                                  deepcopy=False, states=states)
            for study in opened.get_all_studies()
            if study.study_name == campaign or study.study_name.startswith(f"{campaign}@")))
    finally:
        dispose_engine(opened)


def _rdb(url: str) -> BaseStorage:
    from optuna.storages import RDBStorage

    return RDBStorage(url)
