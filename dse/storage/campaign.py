"""Where a campaign's Optuna study lives, chosen by the experiment's ``storage:``.

- ``sqlite`` (default): ``study.db`` in the run folder. Reports read it with a direct SQLite reader.
- ``journal``: Optuna's journal file, ``study.journal`` in the run folder: an append-only log that
  survives a driver killed mid-write and suits file systems where SQLite's locking does not (NFS).
  Its lease lives in ``lease.db`` beside it.
- ``postgresql://USER@HOST[:PORT]/DATABASE``: Optuna's RDB storage on a PostgreSQL server, for a
  team sharing campaigns across machines; the lease is a table in the same database. The password
  never sits in the experiment (anyone reading the file would have it): libpq reads it from
  ``PGPASSWORD`` or ``~/.pgpass``, or the whole URL comes from an environment variable,
  ``env:NAME``.

A run folder remembers which storage its campaign chose (``storage.json``, the setting as written,
never a resolved URL), so that a report given only the folder finds the study, and a campaign
whose experiment now names another kind of storage is refused instead of silently starting over.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar
from urllib.parse import quote, urlsplit

from dse.core import DseError

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

STUDY_FILE = "study.db"
JOURNAL_FILE = "study.journal"
LEASE_FILE = "lease.db"
POINTER_FILE = "storage.json"
STORAGE_FORMS = ("sqlite (default), journal, postgresql://USER@HOST[:PORT]/DATABASE (password in "
                 "PGPASSWORD or ~/.pgpass), or env:NAME (an environment variable holding such "
                 "a URL)")
_SCHEMES = {"postgresql": "postgresql+psycopg", "postgres": "postgresql+psycopg",
            "postgresql+psycopg": "postgresql+psycopg", "postgresql+psycopg2": "postgresql+psycopg2"}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A server that does not answer must not hang a run or a report.
_CONNECT_TIMEOUT_S = 10

StorageKind = Literal["sqlite", "journal", "postgresql"]
T = TypeVar("T")


def setting_problem(setting: str, *, from_environment: bool = False) -> str | None:
    """What is wrong with a ``storage:`` setting, or None: one of :data:`STORAGE_FORMS`. A URL
    read from the environment may carry its password; one written in the experiment may not."""
    if setting in ("sqlite", "journal") and not from_environment:
        return None
    if setting.startswith("env:") and not from_environment:
        name = setting[4:]
        if _ENV_NAME.fullmatch(name):
            return None
        return f"{name!r} is not an environment variable name"
    try:
        parts = urlsplit(setting)
        password = parts.password
    except ValueError as exc:  # a port that is not a number, a bracket left open
        return f"not a database URL ({exc})"
    if parts.scheme not in _SCHEMES:
        shown = setting if len(setting) <= 60 else setting[:57] + "..."
        return f"{shown!r} is none of the forms allowed"
    if not parts.hostname and "host=" not in parts.query:
        return "the URL names no server (postgresql://USER@HOST/DATABASE)"
    if parts.path.strip("/") == "":
        return "the URL names no database (postgresql://USER@HOST/DATABASE)"
    if password is not None and not from_environment:
        return ("a password written in the experiment is readable by anyone who reads the file: "
                "give it in PGPASSWORD or ~/.pgpass, or the whole URL in an environment variable "
                "(storage: env:NAME)")
    return None


def _kind_of(setting: str) -> StorageKind:
    return setting if setting in ("sqlite", "journal") else "postgresql"  # type: ignore[return-value]


@dataclass(frozen=True)
class CampaignStorage:
    """The storage of one campaign: ``kind``, its run folder, the setting as the experiment
    writes it, and (PostgreSQL) the resolved URL, driver included.

    Made by :meth:`from_setting` (an experiment's ``storage:``), :meth:`of_run_folder` (what a
    run folder recorded) or :meth:`sqlite`.

    Attributes:
        kind: ``sqlite``, ``journal`` or ``postgresql``.
        run_dir: The campaign's run folder.
        setting: The ``storage:`` setting as the experiment writes it.
        url: The resolved SQLAlchemy URL, driver included (PostgreSQL only; else empty).

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from dse import CampaignStorage, DseError
        >>> run_dir = Path(tempfile.mkdtemp()) / "demo"
        >>> storage = CampaignStorage.from_setting("journal", run_dir, where="demo.yaml: storage")
        >>> storage.kind, storage.path.name, storage.lease_url.endswith("lease.db")
        ('journal', 'study.journal', True)
        >>> CampaignStorage.of_run_folder(run_dir).kind  # nothing recorded yet: SQLite
        'sqlite'
        >>> try:
        ...     CampaignStorage.from_setting("postgresql://me:secret@db/dse", run_dir,
        ...                                  where="demo.yaml: storage")
        ... except DseError as exc:
        ...     print(exc)
        demo.yaml: storage: a password written in the experiment is readable by anyone ...
        >>> run_dir.parent.rmdir()
    """

    kind: StorageKind
    run_dir: Path
    setting: str = "sqlite"
    url: str = ""

    # -- making one --------------------------------------------------------------------------

    @classmethod
    def sqlite(cls, run_dir: Path) -> CampaignStorage:
        """SQLite's ``study.db`` in ``run_dir`` (the default storage)."""
        return cls("sqlite", run_dir)

    @classmethod
    def from_setting(cls, setting: str, run_dir: Path, *, where: str) -> CampaignStorage:
        """The storage ``setting`` names (an ``env:NAME`` read now); DseError naming ``where``
        (the experiment's field) when it cannot be used.

        Args:
            setting: One of :data:`STORAGE_FORMS`.
            run_dir: The campaign's run folder.
            where: The setting's place, for messages (``<experiment>: storage``).

        Returns:
            The storage.

        Raises:
            DseError: When the setting is none of the forms allowed, a URL carries a password,
                or the environment variable of ``env:NAME`` is unset or holds no usable URL.
        """
        problem = setting_problem(setting)
        if problem is not None:
            raise DseError(f"{where}: {problem}; allowed: {STORAGE_FORMS}")
        if setting in ("sqlite", "journal"):
            return cls(_kind_of(setting), run_dir, setting)
        url = setting
        if setting.startswith("env:"):
            url = os.environ.get(setting[4:], "").strip()
            if not url:
                raise DseError(f"{where}: the environment variable {setting[4:]} is not set (it "
                               f"should hold the database URL, postgresql://USER@HOST/DATABASE)")
            problem = setting_problem(url, from_environment=True)
            if problem is not None:
                raise DseError(f"{where}: the environment variable {setting[4:]}: {problem}; "
                               f"allowed: a postgresql:// URL")
        scheme, rest = url.split(":", 1)
        return cls("postgresql", run_dir, setting, f"{_SCHEMES[scheme]}:{rest}")

    @classmethod
    def of_run_folder(cls, run_dir: Path) -> CampaignStorage:
        """The storage a run folder says its campaign chose (SQLite when it says nothing).

        Args:
            run_dir: The campaign's run folder.

        Returns:
            The storage its ``storage.json`` names, else the one whose file the folder holds,
            else SQLite.

        Raises:
            DseError: When ``storage.json`` is unreadable, or names a storage that cannot be
                used.
        """
        recorded = recorded_setting(run_dir)
        if recorded is None:
            return cls.sqlite(run_dir)
        return cls.from_setting(recorded, run_dir, where=str(run_dir / POINTER_FILE))

    # -- where ---------------------------------------------------------------------------------

    @property
    def path(self) -> Path | None:
        """The study's file in the run folder (None for a database server)."""
        if self.kind == "postgresql":
            return None
        return self.run_dir / (STUDY_FILE if self.kind == "sqlite" else JOURNAL_FILE)

    @property
    def location(self) -> str:
        """For messages: the file, or the URL with any password hidden."""
        if self.path is not None:
            return str(self.path)
        from sqlalchemy.engine import make_url

        return make_url(self.url).render_as_string(hide_password=True)

    @property
    def lease_url(self) -> str:
        """The SQLAlchemy URL of the database holding the campaign's lease."""
        if self.kind == "sqlite":
            return f"sqlite:///{self.run_dir / STUDY_FILE}"
        if self.kind == "journal":
            return f"sqlite:///{self.run_dir / LEASE_FILE}"
        return self.url

    # -- opening -------------------------------------------------------------------------------

    def for_writing(self) -> str | BaseStorage:
        """What ``optuna.create_study`` / ``load_study`` take, for the driver."""
        path = self.path
        if self.kind == "sqlite":
            return f"sqlite:///{path}"
        if self.kind == "journal":
            from optuna.storages import JournalStorage
            from optuna.storages.journal import JournalFileBackend

            return self.guarded(lambda: JournalStorage(JournalFileBackend(str(path))))
        from optuna.storages import RDBStorage

        return self.guarded(lambda: RDBStorage(self.url, engine_kwargs=self._engine_kwargs()))

    def for_reading(self) -> str | BaseStorage:
        """The same, for reports: never creates or alters anything. Call :meth:`check_readable`
        first."""
        path = self.path
        if self.kind == "sqlite":
            assert path is not None
            return f"sqlite:///file:{quote(str(path.resolve()))}?mode=ro&uri=true"
        if self.kind == "journal":
            from optuna.storages import JournalStorage
            from optuna.storages.journal import JournalFileBackend

            # The backend creates a missing file; check_readable made sure it exists.
            return self.guarded(lambda: JournalStorage(JournalFileBackend(str(path))))
        from optuna.storages import RDBStorage

        kwargs = self._engine_kwargs()
        kwargs["connect_args"]["options"] = "-c default_transaction_read_only=on"
        return self.guarded(lambda: RDBStorage(self.url, engine_kwargs=kwargs,
                                               skip_table_creation=True))

    def _engine_kwargs(self) -> dict[str, dict[str, object]]:
        return {"connect_args": {"connect_timeout": _CONNECT_TIMEOUT_S}}

    def guarded(self, action: Callable[[], T]) -> T:
        """``action()``, its storage faults said in one line naming the storage."""
        try:
            return action()
        except DseError:
            raise
        except Exception as exc:
            failure = self.failure(exc)
            if failure is None:
                raise
            raise failure from None

    def failure(self, exc: BaseException) -> DseError | None:
        """A one-line error for a fault of this storage, or None when ``exc`` is not one."""
        from dse.storage.faults import storage_failure

        return storage_failure(self, exc)

    # -- what it holds -------------------------------------------------------------------------

    def started(self) -> bool:
        """Whether the storage holds anything of the campaign (named like its run folder) to
        read yet."""
        path = self.path
        if path is not None:
            try:
                return path.is_file() and path.stat().st_size > 0
            except OSError:
                return False
        campaign = self.run_dir.name  # a shared database holds other campaigns' studies too
        try:
            return any(name == campaign or name.startswith(f"{campaign}@")
                       for name in self.study_names())
        except DseError:
            return False

    def study_names(self) -> list[str]:
        """The names of the studies in the storage (every campaign's, for a shared database)."""
        import optuna

        reader = self.for_reading()
        try:
            return self.guarded(lambda: list(optuna.study.get_all_study_names(reader)))
        finally:
            dispose_engine(reader)

    def check_writable(self) -> None:
        """DseError when a campaign could not write its study here (checked before it starts)."""
        from dse.storage.sqlite_file import check_writable_file, check_writable_run_folder

        if self.kind == "sqlite":
            check_writable_run_folder(self.run_dir)
        elif self.kind == "journal":
            check_writable_file(self.run_dir, self.run_dir / JOURNAL_FILE)
            check_writable_file(self.run_dir, self.run_dir / LEASE_FILE)

    def check_readable(self) -> None:
        """DseError when there is no study to read here, said in one line."""
        from dse.storage.sqlite_file import check_journal_file, check_study_file

        if self.kind == "sqlite":
            assert self.path is not None
            check_study_file(self.path, integrity=False)
        elif self.kind == "journal":
            assert self.path is not None
            check_journal_file(self.path)
        elif not self.guarded(self._has_study_tables):
            raise DseError(f"storage {self.location}: holds no study yet: the campaign has not "
                           f"run yet (dse run EXPERIMENT)")

    def _has_study_tables(self) -> bool:
        """Whether Optuna's tables exist in the database (a lease may have come first)."""
        import sqlalchemy as sa

        engine = sa.create_engine(self.url, poolclass=sa.pool.NullPool,
                                  connect_args=self._engine_kwargs()["connect_args"])
        try:
            return bool(sa.inspect(engine).has_table("studies"))
        finally:
            engine.dispose()

    def remember(self) -> None:
        """Write the run folder's ``storage.json``; DseError when the folder's campaign already
        lives in another kind of storage (its trials would be left behind)."""
        from dse.util import atomic_write_text

        recorded = recorded_setting(self.run_dir)
        if recorded is not None and _kind_of(recorded) != self.kind:
            raise DseError(
                f"{self.run_dir}: this campaign's study is in {_describe(recorded)}, the "
                f"experiment now says storage: {self.setting}; set storage back, or move the run "
                f"folder away to start the campaign afresh in the new storage")
        if recorded != self.setting:
            atomic_write_text(self.run_dir / POINTER_FILE,
                              json.dumps({"storage": self.setting}) + "\n")


def _describe(setting: str) -> str:
    if setting == "sqlite":
        return STUDY_FILE
    if setting == "journal":
        return JOURNAL_FILE
    return f"a PostgreSQL database ({setting})" if setting.startswith("env:") else \
        "a PostgreSQL database"


def recorded_setting(run_dir: Path) -> str | None:
    """The storage setting a run folder's campaign chose: its ``storage.json``, else what the
    folder holds (a campaign run before dse remembered it: ``study.db``), else None."""
    pointer = run_dir / POINTER_FILE
    if pointer.is_file():
        try:
            setting = json.loads(pointer.read_text(encoding="utf-8"))["storage"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DseError(f"{pointer}: unreadable ({type(exc).__name__}); it names the "
                           f"campaign's storage: write {{\"storage\": \"sqlite\"}} (or journal, "
                           f"or the experiment's storage setting) back") from None
        if isinstance(setting, str):
            return setting
        raise DseError(f"{pointer}: storage: not a string")
    for setting, name in (("sqlite", STUDY_FILE), ("journal", JOURNAL_FILE)):
        if (run_dir / name).exists():
            return setting
    return None


def dispose_engine(storage: object) -> None:
    """Close a database engine dse opened for one read (Optuna keeps none itself)."""
    engine = getattr(storage, "engine", None)
    if engine is not None:
        engine.dispose()
