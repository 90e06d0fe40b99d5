"""The HTTP side of the dashboard server: connections that hold no thread until they send (a
waiting room watched by one selector, the oldest pushed out when it is full), a fixed pool of
threads that each read and answer one request (HTTP/1.0, no keep-alive), a short 503 when none
is free, and a timeout on every wait on a client. What a request gets comes from the server's
:class:`PageSource`; what it is refused, from :mod:`dse.report.request_guard`.
"""

from __future__ import annotations

import contextlib
import logging
import mimetypes
import os
import queue
import selectors
import shutil
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from dse.report.error_line import one_line
from dse.report.request_guard import (
    SECURITY_HEADERS,
    BadRequestPath,
    allowed_hosts,
    open_inside,
    request_name,
)

# How long a connection may wait before it sends its request, and each read or write on it.
TIMEOUT_SECONDS = 5.0
HANDLER_THREADS = 16
# Connections whose request has begun to arrive, waiting for a thread; one more gets a 503.
MAX_QUEUED = 64
# Connections that have sent nothing yet; one more pushes out the oldest, so a flood of idle
# connections cannot lock a new reader out.
MAX_WAITING = 128
# The log of `dse report --serve` as a whole (users and tests listen there), not this module's.
_LOG = logging.getLogger("dse.report.serve")


class PageSource(Protocol):
    """What the HTTP side asks of the dashboard server: the folder it serves, and the page a
    request name gets when it is the index or a watched campaign's (None: serve the file)."""

    dashboards_dir: Path

    def current_page(self, name: str) -> bytes | None: ...


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


class PooledServer(HTTPServer):
    """An HTTP server whose connections hold no thread until they send: they wait in a
    :class:`_WaitingRoom` (closed after ``timeout`` seconds of silence), then one of
    :data:`HANDLER_THREADS` threads reads and answers one request, with ``timeout`` on each
    read and write. Life cycle as socketserver's: ``serve_forever`` on one thread,
    ``shutdown`` from another."""

    request_queue_size = MAX_WAITING  # the listen backlog

    def __init__(self, address: tuple[str, int], owner: PageSource, timeout: float) -> None:
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
                 client_address, "?" if exc is None else one_line(exc))
        _LOG.debug("the request's traceback", exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    """One request per connection (HTTP/1.0, no keep-alive: an idle connection never holds a
    thread): the index and the watched pages, refreshed first, and the regular files of the
    dashboards folder."""

    server: PooledServer
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
