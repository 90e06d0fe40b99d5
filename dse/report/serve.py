"""``dse report --serve``: the dashboards folder over HTTP on this machine, kept current while
campaigns run.

A request for a watched campaign's page first rebuilds the page from its run folder when the
study changed since the last build (so a reload shows the new trials), and while the campaign is
live the page carries a ``<meta http-equiv="refresh">`` so the browser reloads it by itself. The
index (``index.html``, :mod:`dse.report.index`) is rewritten on each request for it. Nothing is
rebuilt while nobody looks. A rebuild that fails (the study is being created, or written right
now) keeps the last good page, logs one line and is tried again on the next request.

The server binds to 127.0.0.1 only: the pages show the study's configurations and host
provenance, and nothing here authenticates a reader. So it also refuses what would let another
party read them through the reader's browser or this machine: a ``Host`` other than its own
address (DNS rebinding), a path out of the dashboards folder (``..``, links), folders (no
listings), and anything but regular files; every response forbids framing, sniffing and loads
from elsewhere. Connections hold no thread until they send a request, a fixed pool of threads
serves them, and every wait on a client has a timeout.

This module keeps the pages current (:class:`DashboardServer`); the connections and threads are
:mod:`dse.report.http_pool`, and what a request is refused :mod:`dse.report.request_guard`.
"""

from __future__ import annotations

import html
import logging
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from optuna.exceptions import StorageInternalError
from sqlalchemy.exc import SQLAlchemyError

from dse.core import DseError
from dse.report.dashboard import write_dashboard
from dse.report.error_line import one_line
from dse.report.http_pool import TIMEOUT_SECONDS, PooledServer
from dse.report.index import INDEX_FILE, write_index
from dse.report.request_guard import address_literal, open_inside
from dse.storage import CampaignStorage, has_running_trials, stamp, started

HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_REFRESH_SECONDS = 5.0
# After its last write a study stays live this long even with no trial running: the loop tells
# one trial before it asks for the next, and a sampler may think for a while in between.
IDLE_SECONDS = 60.0
# What reading a study that the campaign is still writing can raise: no study or attributes yet
# (DseError, KeyError of a metric declared later), a database half created or locked (SQLAlchemy,
# Optuna, sqlite3), a half-written value (ValueError), a file replaced meanwhile (OSError).
_STUDY_READ_ERRORS = (DseError, SQLAlchemyError, StorageInternalError, sqlite3.Error, LookupError,
                      ValueError, OSError)
_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveCampaign:
    """A campaign whose page the server keeps current: its run folder (``study.db`` there) and
    the page title (as ``dse report`` writes it). The page is ``<dashboards>/<run folder
    name>.html``, the name ``dse run`` gives it."""

    run_dir: Path
    title: str | None = None
    storage: CampaignStorage | None = None
    """Where the study lives (the experiment's ``storage:``); by default where the run folder
    says."""
    experiment: Path | None = None
    """The experiment's YAML file, for the front table's ``dse export`` commands."""

    @property
    def name(self) -> str:
        return self.run_dir.name

    def chosen_storage(self) -> CampaignStorage:
        return self.storage or CampaignStorage.of_run_folder(self.run_dir)


@dataclass
class _Watch:
    """What the server last saw of one campaign; ``lock`` serialises its rebuilds; ``error`` is
    the last rebuild's failure, logged once."""

    campaign: LiveCampaign
    lock: threading.Lock = field(default_factory=threading.Lock)
    fingerprint: tuple[tuple[str, int, int], ...] | None = None
    running: bool = False
    error: str | None = None


def with_refresh(page: bytes, seconds: float) -> bytes:
    """``page`` with a ``<meta http-equiv="refresh">`` as the first tag of its head."""
    tag = f'\n<meta http-equiv="refresh" content="{max(1, round(seconds))}">'.encode()
    start = page.lower().find(b"<head>")
    if start < 0:
        return tag + page
    end = start + len(b"<head>")
    return page[:end] + tag + page[end:]


def waiting_page(campaign: LiveCampaign, why: str) -> bytes:
    """Served for a watched campaign that has no page yet."""
    title = html.escape(campaign.title or campaign.name)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{title}</title>\n</head>\n<body>\n<h1>{title}</h1>\n"
            f"<p>{html.escape(why)}</p>\n</body>\n</html>\n").encode()


class DashboardServer:
    """Serves ``dashboards_dir`` on ``host:port`` (port 0: any free port) and keeps the pages of
    ``campaigns`` current. A campaign is live (its page reloads every ``refresh_seconds``)
    while a trial of it runs or waits, and for ``idle_seconds`` after its study database was
    last written. ``timeout_seconds`` bounds how long a connection may stay silent.

    Life cycle: construct (binds the port), then :meth:`serve_forever` in the foreground or
    :meth:`start` in a background thread, and :meth:`close` (or leave the ``with`` block).
    Thread safety: requests are served on a fixed pool of threads; rebuilds of one campaign are
    serialised, and pages are replaced atomically, so a reader never sees half a page.
    """

    def __init__(self, dashboards_dir: Path, campaigns: Sequence[LiveCampaign] = (), *,
                 host: str = HOST, port: int = DEFAULT_PORT,
                 refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
                 idle_seconds: float = IDLE_SECONDS,
                 timeout_seconds: float = TIMEOUT_SECONDS) -> None:
        if refresh_seconds <= 0 or timeout_seconds <= 0:
            raise ValueError(f"refresh_seconds and timeout_seconds must be > 0, but got "
                             f"{refresh_seconds=}, {timeout_seconds=}")
        self.dashboards_dir = dashboards_dir
        self.refresh_seconds = refresh_seconds
        self.idle_seconds = idle_seconds
        self._watches = {c.name: _Watch(c) for c in campaigns}
        self._index_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        dashboards_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._http = PooledServer((host, port), self, timeout_seconds)
        except OSError as exc:  # the port is taken, or not ours to bind
            raise DseError(f"cannot serve the dashboards on {host}:{port}: {exc.strerror}; "
                           f"choose another port") from None

    @property
    def url(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{address_literal(str(host))}:{port}/"

    def refresh(self, name: str) -> bool:
        """Rebuild the watched campaign ``name``'s page if its study changed since the last
        build; returns whether the campaign is live (its page should reload itself).

        Nothing is read before the study's file holds something; a rebuild that fails because
        the study cannot be read right now (being created, locked or written by the campaign)
        keeps the previous page and is retried on the next request.
        """
        watch = self._watches[name]
        with watch.lock:
            try:
                fingerprint = stamp(watch.campaign.chosen_storage(), name)
            except _STUDY_READ_ERRORS as exc:  # a database server away: keep the last page
                self._log_error(watch, exc)
                return True
            if not started(fingerprint):  # not started yet: keep asking
                return True
            if fingerprint != watch.fingerprint or not self.page_path(name).is_file():
                if not self._rebuild(watch):
                    return True
                watch.fingerprint = fingerprint
                self.refresh_index()
            last_write = max(mtime_ns for _, mtime_ns, _ in fingerprint) / 1e9
            return watch.running or time.time() - last_write < self.idle_seconds

    def _rebuild(self, watch: _Watch) -> bool:
        """Write the page afresh; False (and one log line per new error) when it failed."""
        campaign = watch.campaign
        try:
            storage = campaign.chosen_storage()
            write_dashboard(campaign.run_dir, self.page_path(campaign.name), title=campaign.title,
                            storage=storage, experiment=campaign.experiment)
            watch.running = has_running_trials(storage, campaign.name)
        except _STUDY_READ_ERRORS as exc:
            self._log_error(watch, exc)
            return False
        watch.error = None
        return True

    @staticmethod
    def _log_error(watch: _Watch, exc: BaseException) -> None:
        error = one_line(exc)
        if error != watch.error:  # a page reloading every few seconds would repeat it
            _LOG.warning("dashboard of %s not rebuilt (kept the last one): %s",
                         watch.campaign.name, error)
        watch.error = error

    def refresh_index(self) -> Path:
        with self._index_lock:
            return write_index(self.dashboards_dir)

    def page_path(self, name: str) -> Path:
        return self.dashboards_dir / f"{name}.html"

    def watched(self, name: str) -> LiveCampaign | None:
        watch = self._watches.get(name)
        return None if watch is None else watch.campaign

    def any_live(self) -> bool:
        """Refresh every watched page (all of them: no short cut); True if any is live."""
        return any([self.refresh(name) for name in self._watches])

    def current_page(self, name: str) -> bytes | None:
        """What a request for ``name`` (see :func:`dse.report.request_guard.request_name`) gets
        when it is the index or a watched campaign's page: the page refreshed first, with a
        refresh tag while live (a waiting page while there is none yet); None for any other
        name."""
        if name in ("", INDEX_FILE):
            live = self.any_live()
            return self._read_page(self.refresh_index().name, live)
        campaign = self.watched(name.removesuffix(".html")) if name.endswith(".html") else None
        if campaign is None:
            return None
        live = self.refresh(campaign.name)
        page = self._read_page(self.page_path(campaign.name).name, live)
        if page is not None:
            return page
        why = (f"the dashboard could not be built yet from {campaign.run_dir} (see the "
               f"server's log)" if self._started(campaign) else
               f"campaign {campaign.name} has not started yet (nothing in its storage)")
        return with_refresh(waiting_page(campaign, why + "; this page reloads by itself"),
                            self.refresh_seconds)

    @staticmethod
    def _started(campaign: LiveCampaign) -> bool:
        try:
            return started(stamp(campaign.chosen_storage(), campaign.name))
        except _STUDY_READ_ERRORS:
            return False

    def _read_page(self, file_name: str, live: bool) -> bytes | None:
        file = open_inside(self.dashboards_dir, file_name)
        if file is None:
            return None
        with file:
            page = file.read()
        return with_refresh(page, self.refresh_seconds) if live else page

    def serve_forever(self) -> None:
        """Build every watched page and the index, then serve until :meth:`close` (or Ctrl-C)."""
        self.any_live()
        self.refresh_index()
        self._http.serve_forever(poll_interval=0.2)

    def start(self) -> DashboardServer:
        """:meth:`serve_forever` on a daemon thread; returns self."""
        self._thread = threading.Thread(target=self.serve_forever, name="dse-dashboards",
                                        daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._http.shutdown()
            self._thread.join()
            self._thread = None
        self._http.server_close()

    def __enter__(self) -> DashboardServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
