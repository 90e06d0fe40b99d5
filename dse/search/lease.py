"""One driver per campaign: a lease held in the campaign's storage.

Two ``dse run`` of one campaign at once would race: both would create the storage (an
``alembic_version`` IntegrityError), each would fail the other's live trials as crashed, and
together they would measure candidates twice and past the budget. So before it touches the study,
a driver takes the campaign's lease: a row (holder host, pid, the process's start time, when taken, last
heartbeat) in a ``dse_lease`` table of the campaign's database (for a journal-file storage, of an
SQLite file beside it). A second driver finds it held and stops with one line naming the holder.
A holder that died is taken over, and said so: on the same host when its process is gone (or its
pid now belongs to another process), anywhere when its heartbeat is older than ``expiry_s``. The
take-over is a conditional update of the row as it was read, so of two drivers taking over one
dead holder's lease, one wins. The holder beats every ``beat_s`` seconds from a thread; a beat
that finds the lease taken (this driver stalled past the expiry) makes :meth:`Lease.check` fail
the run rather than let two drivers write. Heartbeats are the machines' clocks (UNIX seconds):
drivers on different hosts need clocks within a few seconds of each other (NTP), far below the
expiry.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from dse.core import DseError

EXPIRY_S = 60.0
BEAT_S = 5.0


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: a driver process on a host, and when it last said it is alive."""

    token: str
    host: str
    pid: int
    process_start: float
    taken_at: float
    heartbeat: float

    def describe(self, now: float) -> str:
        taken = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.taken_at))
        return (f"pid {self.pid} on {self.host} (since {taken}, last heartbeat "
                f"{max(0.0, now - self.heartbeat):.0f} s ago)")


def _process_start(pid: int) -> float:
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return -1.0


def me() -> Holder:
    now = time.time()
    pid = os.getpid()
    return Holder(uuid.uuid4().hex, socket.gethostname(), pid, _process_start(pid), now, now)


def why_dead(holder: Holder, now: float, expiry_s: float) -> str:
    """Why ``holder`` no longer runs the campaign, or "" while it may."""
    if holder.host == socket.gethostname():
        start = _process_start(holder.pid)
        if start < 0:
            return f"its process {holder.pid} is gone"
        if abs(start - holder.process_start) > 1.0:
            return f"pid {holder.pid} now belongs to another process"
    if now - holder.heartbeat > expiry_s:
        return f"its last heartbeat was {now - holder.heartbeat:.0f} s ago (expiry {expiry_s:g} s)"
    return ""


class LeaseStore:
    """The ``dse_lease`` table of a database (SQLAlchemy URL): one row per campaign."""

    def __init__(self, url: str) -> None:
        import sqlalchemy as sa

        # A long busy timeout: SQLite serialises writers, and the study's own writes come first.
        args = {"timeout": 60} if url.startswith("sqlite") else {}
        self.engine = sa.create_engine(url, connect_args=args, poolclass=sa.pool.NullPool)
        self.table = sa.Table(
            "dse_lease", sa.MetaData(),
            sa.Column("campaign", sa.String(512), primary_key=True),
            sa.Column("token", sa.String(64), nullable=False),
            sa.Column("host", sa.String(255), nullable=False),
            sa.Column("pid", sa.Integer, nullable=False),
            sa.Column("process_start", sa.Float, nullable=False),
            sa.Column("taken_at", sa.Float, nullable=False),
            sa.Column("heartbeat", sa.Float, nullable=False))
        # Another driver may create it at the same moment (PostgreSQL's catalog then objects).
        with suppress(sa.exc.IntegrityError):
            self.table.create(self.engine, checkfirst=True)

    def _row(self, holder: Holder) -> dict[str, Any]:
        return {"token": holder.token, "host": holder.host, "pid": holder.pid,
                "process_start": holder.process_start, "taken_at": holder.taken_at,
                "heartbeat": holder.heartbeat}

    def insert(self, campaign: str, holder: Holder) -> bool:
        """Take a lease nobody holds; False when a row exists."""
        import sqlalchemy as sa

        try:
            with self.engine.begin() as connection:
                connection.execute(self.table.insert().values(campaign=campaign,
                                                              **self._row(holder)))
        except sa.exc.IntegrityError:
            return False
        return True

    def read(self, campaign: str) -> Holder | None:
        with self.engine.connect() as connection:
            row = connection.execute(self.table.select().where(
                self.table.c.campaign == campaign)).mappings().first()
        if row is None:
            return None
        return Holder(str(row["token"]), str(row["host"]), int(row["pid"]),
                      float(row["process_start"]), float(row["taken_at"]),
                      float(row["heartbeat"]))

    def replace(self, campaign: str, expected_token: str, holder: Holder) -> bool:
        """Put ``holder`` in place of the lease whose token is ``expected_token``; False when
        the row changed meanwhile (another driver took it first)."""
        return self._update(campaign, expected_token, self._row(holder))

    def beat(self, campaign: str, token: str, now: float) -> bool:
        """Renew the heartbeat; False when the lease is no longer this token's."""
        return self._update(campaign, token, {"heartbeat": now})

    def _update(self, campaign: str, token: str, values: dict[str, Any]) -> bool:
        with self.engine.begin() as connection:
            result = connection.execute(self.table.update().where(
                (self.table.c.campaign == campaign) & (self.table.c.token == token)
            ).values(**values))
        return bool(result.rowcount == 1)

    def delete(self, campaign: str, token: str) -> None:
        with self.engine.begin() as connection:
            connection.execute(self.table.delete().where(
                (self.table.c.campaign == campaign) & (self.table.c.token == token)))


class Lease:
    """The campaign's lease for the life of a ``with`` block (see the module docstring).

    ``took_over`` says whose lease was taken on entry, and why that holder was judged dead ("" when
    the lease was free)."""

    def __init__(self, url: str, campaign: str, *, where: str, expiry_s: float = EXPIRY_S,
                 beat_s: float = BEAT_S,
                 failure: Callable[[BaseException], DseError | None] | None = None) -> None:
        self.url, self.campaign, self.where = url, campaign, where
        # The storage's own one-line account of a fault (server away, file damaged), if any.
        self.failure = failure
        self.expiry_s, self.beat_s = expiry_s, beat_s
        self.holder = me()
        self.took_over = ""
        self.lost = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._store: LeaseStore | None = None

    def __enter__(self) -> Lease:
        import sqlalchemy as sa

        try:
            self._store = LeaseStore(self.url)
            self._acquire(self._store)
        except sa.exc.SQLAlchemyError as exc:
            described = None if self.failure is None else self.failure(exc)
            if described is not None:
                raise described from None
            raise DseError(f"{self.where}: cannot take the campaign's lease in its storage: "
                           f"{type(exc).__name__}: {str(exc).splitlines()[0]}") from None
        self._thread = threading.Thread(target=self._beat, name="dse-lease", daemon=True)
        self._thread.start()
        return self

    def _acquire(self, store: LeaseStore) -> None:
        for _ in range(3):  # a row that changes between reading and replacing it: read again
            if store.insert(self.campaign, self.holder):
                return
            current = store.read(self.campaign)
            if current is None:
                continue  # released meanwhile
            now = time.time()
            dead = why_dead(current, now, self.expiry_s)
            if not dead:
                raise DseError(f"{self.where}: campaign {self.campaign!r} is being run by "
                               f"{current.describe(now)}; one driver per campaign: wait for it "
                               f"to finish or stop it (a crashed holder's lease is taken over "
                               f"after {self.expiry_s:g} s)")
            if store.replace(self.campaign, current.token, self.holder):
                self.took_over = f"{current.describe(now)}: {dead}"
                return
        raise DseError(f"{self.where}: campaign {self.campaign!r}: another driver took its lease "
                       f"at the same moment; try again")

    def _beat(self) -> None:
        while not self._stop.wait(self.beat_s):
            try:
                assert self._store is not None
                if not self._store.beat(self.campaign, self.holder.token, time.time()):
                    self.lost = "another driver took over its lease (this one stalled past " \
                                f"the {self.expiry_s:g} s expiry)"
                    return
            except Exception:  # the storage is busy or away: the next beat may get through
                continue

    def check(self) -> None:
        """DseError once another driver has taken the lease over."""
        if self.lost:
            raise DseError(f"{self.where}: campaign {self.campaign!r}: {self.lost}; this driver "
                           f"stops so that two never write one study")

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.beat_s + 5)
        if self._store is not None:
            with suppress(Exception):  # else the lease expires on its own
                self._store.delete(self.campaign, self.holder.token)
            self._store.engine.dispose()
