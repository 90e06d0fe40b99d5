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
"""

from __future__ import annotations

import contextlib
import html
import logging
import mimetypes
import os
import queue
import selectors
import shutil
import socket
import sqlite3
import stat
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote

from optuna.exceptions import StorageInternalError
from sqlalchemy.exc import SQLAlchemyError

from dse.exceptions import DseError
from dse.report.dashboard import write_dashboard
from dse.report.index import INDEX_FILE, write_index
from dse.storage import CampaignStorage
from dse.storage.activity import has_running_trials, stamp, started

HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_REFRESH_SECONDS = 5.0
# After its last write a study stays live this long even with no trial running: the loop tells
# one trial before it asks for the next, and a sampler may think for a while in between.
IDLE_SECONDS = 60.0
# How long a connection may wait before it sends its request, and each read or write on it.
TIMEOUT_SECONDS = 5.0
HANDLER_THREADS = 16
# Connections whose request has begun to arrive, waiting for a thread; one more gets a 503.
MAX_QUEUED = 64
# Connections that have sent nothing yet; one more pushes out the oldest, so a flood of idle
# connections cannot lock a new reader out.
MAX_WAITING = 128
# The pages are self-contained: inline styles and scripts (plotly.js, the tables' sort handler),
# images plotly makes as data: or blob: URLs. Nothing is fetched, sent or framed.
CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'none'", "script-src 'unsafe-inline'", "style-src 'unsafe-inline'",
    "img-src data: blob:", "font-src data:", "base-uri 'none'", "form-action 'none'",
    "frame-ancestors 'none'"])
SECURITY_HEADERS = (
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
    ("Cross-Origin-Resource-Policy", "same-origin"),
    ("Referrer-Policy", "no-referrer"),
)
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


class BadRequestPath(ValueError):
    """A request target that cannot name a file of the dashboards folder (400, not 404)."""


def request_name(target: str) -> str:
    """The file a request target names, relative to the dashboards folder (``""``: the folder
    itself): query and fragment dropped, escapes decoded as UTF-8, ``.`` and empty segments
    dropped.

    Raises:
        BadRequestPath: the target is not a path, its escapes are not UTF-8, it holds a control
            character (NUL among them) or a ``..`` segment.
    """
    path = target.split("?", 1)[0].split("#", 1)[0]
    if not path.startswith("/"):
        raise BadRequestPath(f"request target {target[:80]!r} is not a path")
    try:
        name = unquote(path, errors="strict")
    except UnicodeDecodeError:
        raise BadRequestPath("request path is not UTF-8") from None
    if any(ord(char) < 32 or ord(char) == 127 for char in name):
        raise BadRequestPath("request path holds a control character")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise BadRequestPath("request path holds '..'")
    return "/".join(parts)


def open_inside(root: Path, name: str) -> BinaryIO | None:
    """The regular file ``root/name`` open for reading, or None where there is none: missing,
    a folder (no listings), not a regular file (opening a FIFO would hold a thread), or outside
    ``root`` once every link is resolved (no link leads out of the dashboards folder)."""
    base = os.path.realpath(root)
    real = os.path.realpath(os.path.join(base, name))  # unlike Path.resolve, no error on loops
    if os.path.commonpath([base, real]) != base or real == base:
        return None
    try:
        # O_NOFOLLOW: a link put in its place since the check is not followed either.
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def allowed_hosts(host: str, port: int) -> frozenset[str]:
    """The ``Host`` values a request to ``host:port`` may carry: the loopback names and the
    bound address, with the port (also without it on port 80, as browsers send it). A page
    reached under any other name was resolved to this machine by someone else's DNS."""
    names = {"localhost", "127.0.0.1", _address_literal(host).lower()}
    return frozenset({f"{name}:{port}" for name in names} | (names if port == 80 else set()))


def _address_literal(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _one_line(exc: BaseException) -> str:
    """``Type: first line of the message``, cut short: SQLAlchemy adds the statement and a URL
    on further lines, and an unknown metric lists every known one."""
    lines = str(exc).splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= 200 else text[:199] + "…"


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
            self._http = _Server((host, port), self, timeout_seconds)
        except OSError as exc:  # the port is taken, or not ours to bind
            raise DseError(f"cannot serve the dashboards on {host}:{port}: {exc.strerror}; "
                           f"choose another port") from None

    @property
    def url(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{_address_literal(str(host))}:{port}/"

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
                            storage=storage)
            watch.running = has_running_trials(storage, campaign.name)
        except _STUDY_READ_ERRORS as exc:
            self._log_error(watch, exc)
            return False
        watch.error = None
        return True

    @staticmethod
    def _log_error(watch: _Watch, exc: BaseException) -> None:
        error = _one_line(exc)
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
        """What a request for ``name`` (see :func:`request_name`) gets when it is the index or a
        watched campaign's page: the page refreshed first, with a refresh tag while live (a
        waiting page while there is none yet); None for any other name."""
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


class _WaitingRoom:
    """Accepted connections that have sent nothing yet, oldest first, each with its deadline,
    watched by one selector together with the listening socket. Used by the serving thread
    only."""

    def __init__(self, listener: socket.socket, timeout: float) -> None:
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ)
        self._listener = listener
        self._timeout = timeout
        self._waiting: dict[socket.socket, tuple[Any, float]] = {}

    def add(self, conn: socket.socket, address: Any) -> socket.socket | None:
        """Wait for ``conn`` to send; returns the oldest connection, taken out, if the room
        was full."""
        oldest = next(iter(self._waiting)) if len(self._waiting) >= MAX_WAITING else None
        if oldest is not None:
            self._take(oldest)
        self._selector.register(conn, selectors.EVENT_READ)
        self._waiting[conn] = (address, time.monotonic() + self._timeout)
        return oldest

    def wait(self, seconds: float) -> tuple[bool, list[tuple[socket.socket, Any]]]:
        """Whether the listener has a connection to accept, and the connections (taken out)
        that sent something, within ``seconds``."""
        accept, ready = False, []
        for key, _ in self._selector.select(seconds):
            if key.fileobj is self._listener:
                accept = True
            elif isinstance(key.fileobj, socket.socket):
                ready.append((key.fileobj, self._take(key.fileobj)))
        return accept, ready

    def expired(self) -> list[socket.socket]:
        """The connections past their deadline, taken out (the oldest come first)."""
        now, late = time.monotonic(), []
        for conn, (_, deadline) in self._waiting.items():
            if deadline > now:
                break
            late.append(conn)
        for conn in late:
            self._take(conn)
        return late

    def close(self) -> list[socket.socket]:
        """Close the selector; returns the connections still waiting."""
        left = list(self._waiting)
        self._waiting.clear()
        self._selector.close()
        return left

    def _take(self, conn: socket.socket) -> Any:
        self._selector.unregister(conn)
        return self._waiting.pop(conn)[0]


class _Server(HTTPServer):
    """An HTTP server whose connections hold no thread until they send: they wait in a
    :class:`_WaitingRoom` (closed after ``timeout`` seconds of silence), then one of
    :data:`HANDLER_THREADS` threads reads and answers one request, with ``timeout`` on each
    read and write. Life cycle as socketserver's: ``serve_forever`` on one thread,
    ``shutdown`` from another."""

    request_queue_size = MAX_WAITING  # the listen backlog

    def __init__(self, address: tuple[str, int], owner: DashboardServer, timeout: float) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.owner = owner
        self.connection_timeout = timeout
        self._queue: queue.Queue[tuple[socket.socket, Any] | None] = queue.Queue(MAX_QUEUED)
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()  # until serve_forever runs, shutdown has nothing to wait for
        super().__init__(address, _Handler)
        self.allowed_hosts = allowed_hosts(address[0], self.server_address[1])

    def serve_forever(self, poll_interval: float = 0.2) -> None:
        self._stopped.clear()
        workers = [threading.Thread(target=self._work, name=f"dse-dashboards-{i}", daemon=True)
                   for i in range(HANDLER_THREADS)]
        for worker in workers:
            worker.start()
        self.socket.setblocking(False)  # a client gone before accept must not block the loop
        room = _WaitingRoom(self.socket, self.connection_timeout)
        try:
            while not self._stop.is_set():
                self._serve_once(room, poll_interval)
        finally:
            for conn in room.close():
                self.shutdown_request(conn)
            self._stop_workers(len(workers))
            self._stopped.set()

    def _serve_once(self, room: _WaitingRoom, poll_interval: float) -> None:
        accept, ready = room.wait(poll_interval)
        for conn, address in ready:
            try:
                self._queue.put_nowait((conn, address))
            except queue.Full:
                self._refuse(conn)
        for _ in range(MAX_QUEUED if accept else 0):  # a burst, but not without end
            try:
                conn, address = self.get_request()
            except BlockingIOError:  # none left (or the client left before it was accepted)
                break
            pushed_out = room.add(conn, address)
            if pushed_out is not None:
                self.shutdown_request(pushed_out)
        for conn in room.expired():
            self.shutdown_request(conn)

    def _refuse(self, conn: socket.socket) -> None:
        """A short 503 to a request no thread can take now, without waiting on the client."""
        headers = "".join(f"{name}: {value}\r\n" for name, value in SECURITY_HEADERS)
        busy = (f"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
                f"Content-Length: 12\r\nConnection: close\r\n{headers}\r\nserver busy\n").encode()
        conn.setblocking(False)
        with contextlib.suppress(OSError):
            conn.send(busy)
        self.shutdown_request(conn)

    def _stop_workers(self, count: int) -> None:
        """Close the requests no thread took yet, then one stop sign per thread (not joined:
        a thread answering a slow client ends on its own, within the timeout)."""
        with contextlib.suppress(queue.Empty):
            while True:
                item = self._queue.get_nowait()
                if item is not None:
                    self.shutdown_request(item[0])
        for _ in range(count):
            self._queue.put(None)

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            conn, address = item
            try:
                conn.settimeout(self.connection_timeout)
                self.finish_request(conn, address)
            except Exception:  # one bad request must not end a thread of the pool: logged
                self.handle_error(conn, address)
            finally:
                self.shutdown_request(conn)

    def shutdown(self) -> None:
        self._stop.set()
        self._stopped.wait()

    def handle_error(self, request: object, client_address: object) -> None:
        """One line instead of socketserver's traceback on stderr (the traceback at debug
        level); a client that went away or went silent is no news."""
        exc = sys.exc_info()[1]
        quiet = exc is None or isinstance(exc, (ConnectionError, TimeoutError))
        _LOG.log(logging.DEBUG if quiet else logging.WARNING, "request from %s not answered: %s",
                 client_address, "?" if exc is None else _one_line(exc))
        _LOG.debug("the request's traceback", exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    """One request per connection (HTTP/1.0, no keep-alive: an idle connection never holds a
    thread): the index and the watched pages, refreshed first, and the regular files of the
    dashboards folder."""

    server: _Server
    server_version = "dse"

    def version_string(self) -> str:
        return self.server_version  # no Python version for a prober to match

    def parse_request(self) -> bool:
        """The standard parsing, then exactly one ``Host`` header naming this server."""
        if not super().parse_request():
            return False
        hosts = self.headers.get_all("Host", [])
        if self.request_version == "HTTP/0.9" or len(hosts) != 1:
            self.send_error(HTTPStatus.BAD_REQUEST, "exactly one Host header is required")
            return False
        if hosts[0].strip().lower() not in self.server.allowed_hosts:
            self.send_error(HTTPStatus.MISDIRECTED_REQUEST,
                            "this server answers only under its own address")
            return False
        return True

    def end_headers(self) -> None:
        for name, value in SECURITY_HEADERS:  # every response, errors included
            self.send_header(name, value)
        super().end_headers()

    def do_GET(self) -> None:
        self._respond(send_body=True)

    def do_HEAD(self) -> None:
        self._respond(send_body=False)

    def _respond(self, send_body: bool) -> None:
        try:
            name = request_name(self.path)
        except BadRequestPath as exc:
            self.send_error(HTTPStatus.BAD_REQUEST, str(exc))
            return
        owner = self.server.owner
        page = owner.current_page(name)
        if page is not None:
            self._send_page(page, send_body)
            return
        file = open_inside(owner.dashboards_dir, name)
        if file is None:
            self.send_error(HTTPStatus.NOT_FOUND, "no such file in the dashboards folder")
            return
        with file:
            self._send_file(file, mimetypes.guess_type(name)[0], send_body)

    def _send_page(self, body: bytes, send_body: bool) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")  # a reload must fetch the rebuilt page
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def _send_file(self, file: BinaryIO, content_type: str | None, send_body: bool) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", content_type or "application/octet-stream")
        self.send_header("Content-Length", str(os.fstat(file.fileno()).st_size))
        self.end_headers()
        if send_body:
            shutil.copyfileobj(file, self.wfile)

    def log_message(self, format: str, *args: object) -> None:
        _LOG.debug("%s %s", self.address_string(), format % args)


def serve_dashboards(dashboards_dir: Path, campaigns: Sequence[LiveCampaign] = (), *,
                     port: int = DEFAULT_PORT,
                     refresh_seconds: float = DEFAULT_REFRESH_SECONDS) -> None:
    """Serve in the foreground on 127.0.0.1 until Ctrl-C (``KeyboardInterrupt`` propagates)."""
    with DashboardServer(dashboards_dir, campaigns, port=port,
                         refresh_seconds=refresh_seconds) as server:
        server.serve_forever()
