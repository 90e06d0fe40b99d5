"""A storage fault in one line naming the storage: a damaged SQLite file or journal, a database
server that cannot be reached or refuses the login, a missing driver. Left alone these surface as
SQLAlchemy, psycopg or Optuna tracebacks that name neither the file nor the fix."""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING

from dse.core import DseError

if TYPE_CHECKING:
    from dse.storage.campaign import CampaignStorage

_MOVE_AWAY = "move it away to start the campaign afresh, or restore it from a backup"


def _innermost(exc: BaseException) -> BaseException:
    """The error at the bottom of the chain: Optuna wraps a database's own error in one that
    guesses at the cause ("... e.g. exceeding max length")."""
    seen = {id(exc)}
    while True:
        inner = getattr(exc, "orig", None) or exc.__cause__ or exc.__context__
        if not isinstance(inner, BaseException) or id(inner) in seen:
            return exc
        seen.add(id(inner))
        exc = inner


def _first_line(exc: BaseException) -> str:
    text = str(_innermost(exc)).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line if len(line) <= 300 else line[:297] + "..."


def storage_failure(storage: CampaignStorage, exc: BaseException) -> DseError | None:
    """The one-line error for ``exc`` raised while using ``storage``; None when it is not a
    fault of the storage (a dse bug, an interrupt)."""
    import sqlalchemy.exc as sa_exc

    from dse.storage.write_failure import describe_write_failure

    if storage.path is not None and describe_write_failure(exc, storage.run_dir) is not None:
        return None  # a full disk: said by the caller with what to do after it (resume, ...)
    if isinstance(exc, (sa_exc.NoSuchModuleError, ModuleNotFoundError)) \
            and storage.kind == "postgresql":
        return DseError(f"storage {storage.location}: the PostgreSQL driver is not installed: "
                        f"pip install 'dse[postgresql]' (psycopg)")
    if storage.kind == "journal" and isinstance(exc, (ValueError, KeyError, json.JSONDecodeError)):
        return DseError(f"{storage.location}: the study journal is damaged ({_first_line(exc)}); "
                        f"{_MOVE_AWAY}")
    if not isinstance(exc, (sa_exc.SQLAlchemyError, sqlite3.Error, OSError)) \
            and type(exc).__name__ != "StorageInternalError":
        return None
    if storage.kind == "postgresql":
        return DseError(f"storage {storage.location}: {_first_line(exc)}; check that the server "
                        f"runs and accepts this user (password from PGPASSWORD or ~/.pgpass)")
    if storage.kind == "sqlite" and storage.path is not None:
        from dse.storage.sqlite_file import damaged_database_error

        damaged = damaged_database_error(storage.path)
        if damaged is not None:
            return damaged
    return DseError(f"{storage.location}: cannot use the study storage: {_first_line(exc)}")
