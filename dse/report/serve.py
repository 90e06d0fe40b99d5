"""``dse report --serve``: the dashboards folder over HTTP on this machine, kept current while
campaigns run.

A request for a watched campaign's page first rebuilds the page from its run folder when the
study changed since the last build (so a reload shows the new trials), and while the campaign is
live the page carries a ``<meta http-equiv="refresh">`` so the browser reloads it by itself. The
index (``index.html``, :mod:`dse.report.index`) is rewritten on each request for it. Nothing is
rebuilt while nobody looks.

The server binds to 127.0.0.1 only: the pages show the study's configurations and host
provenance, and nothing here authenticates a reader.
"""

from __future__ import annotations

import html
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from optuna.exceptions import StorageInternalError
from optuna.storages import RDBStorage
from optuna.trial import TrialState
from sqlalchemy.exc import OperationalError

from dse.exceptions import DseError
from dse.report.dashboard import write_dashboard
from dse.report.index import INDEX_FILE, write_index
from dse.results.export import STUDY_FILE

HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_REFRESH_SECONDS = 5.0
# After its last write a study stays live this long even with no trial running: the loop tells
# one trial before it asks for the next, and a sampler may think for a while in between.
IDLE_SECONDS = 60.0
_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveCampaign:
    """A campaign whose page the server keeps current: its run folder (``study.db`` there) and
    the page title (as ``dse report`` writes it). The page is ``<dashboards>/<run folder
    name>.html``, the name ``dse run`` gives it."""

    run_dir: Path
    title: str | None = None

    @property
    def name(self) -> str:
        return self.run_dir.name


@dataclass
class _Watch:
    """What the server last saw of one campaign; ``lock`` serialises its rebuilds."""

    campaign: LiveCampaign
    lock: threading.Lock = field(default_factory=threading.Lock)
    fingerprint: tuple[tuple[str, int, int], ...] | None = None
    running: bool = False


def study_fingerprint(run_dir: Path) -> tuple[tuple[str, int, int], ...]:
    """Modification time and size of the study database and its journals: any write by the
    campaign changes it. Empty while the campaign has not started."""
    stamps = []
    for suffix in ("", "-wal", "-journal"):
        path = run_dir / f"{STUDY_FILE}{suffix}"
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue
        stamps.append((path.name, stat.st_mtime_ns, stat.st_size))
    return tuple(stamps)


def has_running_trials(run_dir: Path) -> bool:
    """True while some trial in the run folder's study database is running or waiting (the
    campaign is under way, or its driver was killed mid-trial and has not been resumed).

    Asked of the storage with a state filter, so only those trials are read: loading a whole
    study of 10,000 trials through Optuna takes seconds.
    """
    url = f"sqlite:///file:{quote(str((run_dir / STUDY_FILE).resolve()))}?mode=ro&uri=true"
    storage = RDBStorage(url)
    try:
        states = (TrialState.RUNNING, TrialState.WAITING)
        return any(storage.get_all_trials(storage.get_study_id_from_name(study.study_name),
                                          deepcopy=False, states=states)
                   for study in storage.get_all_studies())
    finally:
        storage.engine.dispose()


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
    last written.

    Life cycle: construct (binds the port), then :meth:`serve_forever` in the foreground or
    :meth:`start` in a background thread, and :meth:`close` (or leave the ``with`` block).
    Thread safety: requests are served on their own threads; rebuilds of one campaign are
    serialised, and pages are replaced atomically, so a reader never sees half a page.
    """

    def __init__(self, dashboards_dir: Path, campaigns: Sequence[LiveCampaign] = (), *,
                 host: str = HOST, port: int = DEFAULT_PORT,
                 refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
                 idle_seconds: float = IDLE_SECONDS) -> None:
        if refresh_seconds <= 0:
            raise ValueError(f"refresh_seconds must be > 0, but got {refresh_seconds}")
        self.dashboards_dir = dashboards_dir
        self.refresh_seconds = refresh_seconds
        self.idle_seconds = idle_seconds
        self._watches = {c.name: _Watch(c) for c in campaigns}
        self._index_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        dashboards_dir.mkdir(parents=True, exist_ok=True)
        handler = partial(_Handler, directory=str(dashboards_dir))
        try:
            self._http = _Server((host, port), handler, self)
        except OSError as exc:  # the port is taken, or not ours to bind
            raise DseError(f"cannot serve the dashboards on {host}:{port}: {exc.strerror}; "
                           f"choose another port") from None

    @property
    def url(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}/"

    def refresh(self, name: str) -> bool:
        """Rebuild the watched campaign ``name``'s page if its study changed since the last
        build; returns whether the campaign is live (its page should reload itself).

        A rebuild that fails because the study cannot be read right now (not yet created,
        locked by the writer) keeps the previous page and is retried on the next request.
        """
        watch = self._watches[name]
        with watch.lock:
            fingerprint = study_fingerprint(watch.campaign.run_dir)
            stale = fingerprint != watch.fingerprint or not self.page_path(name).is_file()
            if fingerprint and stale:
                try:
                    write_dashboard(watch.campaign.run_dir, self.page_path(name),
                                    title=watch.campaign.title)
                    watch.running = has_running_trials(watch.campaign.run_dir)
                except (DseError, OperationalError, StorageInternalError) as exc:
                    _LOG.warning("dashboard of %s not rebuilt (kept the last one): %s", name, exc)
                    return True
                watch.fingerprint = fingerprint
                self.refresh_index()
            if not fingerprint:  # not started yet: keep asking
                return True
            last_write = max(mtime_ns for _, mtime_ns, _ in fingerprint) / 1e9
            return watch.running or time.time() - last_write < self.idle_seconds

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


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: partial[_Handler],
                 owner: DashboardServer) -> None:
        self.owner = owner
        super().__init__(address, handler)


class _Handler(SimpleHTTPRequestHandler):
    """Files of the dashboards folder; watched pages and the index refreshed before serving."""

    server: _Server

    def do_GET(self) -> None:
        owner = self.server.owner
        name = unquote(urlsplit(self.path).path).lstrip("/")
        if name in ("", INDEX_FILE):
            live = owner.any_live()
            owner.refresh_index()
            self._send_page(owner.dashboards_dir / INDEX_FILE, live)
            return
        campaign = owner.watched(name.removesuffix(".html")) if name.endswith(".html") else None
        if campaign is None:
            super().do_GET()
            return
        live = owner.refresh(campaign.name)
        path = owner.page_path(campaign.name)
        if not path.is_file():
            why = (f"the dashboard could not be built yet from {campaign.run_dir} (see the "
                   f"server's log)" if study_fingerprint(campaign.run_dir) else
                   f"campaign {campaign.name} has not started yet (no {STUDY_FILE} in "
                   f"{campaign.run_dir})")
            why += "; this page reloads by itself"
            self._send_bytes(with_refresh(waiting_page(campaign, why), owner.refresh_seconds))
            return
        self._send_page(path, live)

    def _send_page(self, path: Path, live: bool) -> None:
        page = path.read_bytes()
        self._send_bytes(with_refresh(page, self.server.owner.refresh_seconds) if live else page)

    def _send_bytes(self, body: bytes) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")  # a reload must fetch the rebuilt page
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        _LOG.debug("%s %s", self.address_string(), format % args)


def serve_dashboards(dashboards_dir: Path, campaigns: Sequence[LiveCampaign] = (), *,
                     port: int = DEFAULT_PORT,
                     refresh_seconds: float = DEFAULT_REFRESH_SECONDS) -> None:
    """Serve in the foreground on 127.0.0.1 until Ctrl-C (``KeyboardInterrupt`` propagates)."""
    with DashboardServer(dashboards_dir, campaigns, port=port,
                         refresh_seconds=refresh_seconds) as server:
        server.serve_forever()
