"""Attack `dse report --serve` (dse.report.serve) on a real socket and count what it mishandles.

Starts a DashboardServer on a temporary dashboards folder holding one page, a file outside it and
links, a folder and a FIFO inside it, then sends raw requests: foreign and missing Host values,
`..` and encoded traversal, link escapes, NUL and undecodable paths, folder listings, over-long
request lines and headers, a flood of idle connections and a stall of half-sent requests each
followed by a normal request. A case fails when its answer is not the required one (a status, no
secret or listing in the body, the security headers), when the server hangs on it, or when a
traceback is logged. Prints each failed case, then `BENCH serve_attacks_failed <n>` and
`BENCH serve_attacks <total>` as its last lines (target: 0 failed). Exit status 1 when any failed.
Usage: python benchmarks/reliability_serve.py [--quick]

Most of its time is the stalled and idle connections waiting out the server's timeout
(``dse.report.http_pool.TIMEOUT_SECONDS``); ``--quick`` serves with a QUICK_TIMEOUT_S timeout
instead (``DashboardServer(timeout_seconds=...)``): the same cases, the same code, sooner.
"""

from __future__ import annotations

import argparse
import logging
import os
import selectors
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dse.report.http_pool import HANDLER_THREADS, MAX_WAITING, TIMEOUT_SECONDS  # noqa: E402
from dse.report.request_guard import SECURITY_HEADERS  # noqa: E402
from dse.report.serve import DashboardServer  # noqa: E402

PAGE_MARK = b"dse-bench-page"
SECRET_MARK = b"dse-bench-secret"
# A reply must come well within this; the server's own timeouts are shorter.
REPLY_DEADLINE_S = 3 * TIMEOUT_SECONDS
QUICK_TIMEOUT_S = 1.0
BENCH_NAMES = ("serve_attacks_failed", "serve_attacks")


@dataclass
class Reply:
    """A raw response: its status (None: no status line, or no answer at all) and parts."""

    status: int | None
    headers: dict[str, str]
    body: bytes
    error: str = ""


@dataclass
class Tally:
    total: int = 0
    failed: list[str] = field(default_factory=list)

    def check(self, name: str, ok: bool, detail: str = "") -> None:
        self.total += 1
        if not ok:
            self.failed.append(f"{name}: {detail}")


def parse(raw: bytes) -> Reply:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        return Reply(None, {}, raw)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Reply(int(parts[1]), headers, body)


def exchange(port: int, request: bytes) -> Reply:
    """Send ``request`` on a fresh connection and read until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=REPLY_DEADLINE_S) as conn:
        chunks = []
        try:
            conn.sendall(request)
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError as exc:  # refused before all of a huge request was read
            return Reply(None, {}, b"".join(chunks), f"reset: {exc}")
        except TimeoutError:
            return Reply(None, {}, b"".join(chunks), "no answer: the server hung")
    return parse(b"".join(chunks))


def get(path: str, host: str | None, extra: str = "") -> bytes:
    host_line = "" if host is None else f"Host: {host}\r\n"
    return f"GET {path} HTTP/1.1\r\n{host_line}{extra}Connection: close\r\n\r\n".encode()


def secure(reply: Reply) -> bool:
    return all(reply.headers.get(name.lower()) == value for name, value in SECURITY_HEADERS)


def refused(*statuses: int, reset_ok: bool = False) -> Callable[[Reply], bool]:
    """A reply with one of ``statuses`` and the security headers, holding neither the page nor
    the secret (or, where ``reset_ok``, a connection dropped before the answer was read)."""
    def judge(reply: Reply) -> bool:
        if reply.status is None:
            return reset_ok and reply.error.startswith("reset")
        leaked = PAGE_MARK in reply.body or SECRET_MARK in reply.body
        return reply.status in statuses and secure(reply) and not leaked
    return judge


def served(reply: Reply) -> bool:
    return reply.status == 200 and PAGE_MARK in reply.body and secure(reply)


def make_folder(root: Path) -> Path:
    """dashboards/ with a page, a folder, links out (file, folder), a link loop and a FIFO; a
    secret beside it."""
    dashboards = root / "dashboards"
    (dashboards / "old").mkdir(parents=True)
    (dashboards / "demo.html").write_bytes(b"<!DOCTYPE html><title>" + PAGE_MARK + b"</title>")
    (dashboards / "old" / "listed-file.html").write_text("old")
    (root / "secret.txt").write_bytes(SECRET_MARK)
    (dashboards / "key.txt").symlink_to(root / "secret.txt")
    (dashboards / "up").symlink_to(root, target_is_directory=True)
    (dashboards / "loop").symlink_to(dashboards / "loop")
    os.mkfifo(dashboards / "pipe.txt")  # not .html: index.py would block reading it
    return dashboards


def request_cases(port: int) -> Iterator[tuple[str, bytes, Callable[[Reply], bool]]]:
    own = f"127.0.0.1:{port}"
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1:{port + 1}", "127.0.0.1",
                 f"localhost.evil.example:{port}", f"{own}@evil.example", f"{own} evil",
                 f"[::1]:{port}"):
        yield f"foreign Host {host!r}", get("/demo.html", host), refused(421, 400)
    yield "no Host", get("/demo.html", None), refused(400)
    yield "two Hosts", get("/demo.html", own, f"Host: evil.example:{port}\r\n"), refused(400)
    for path in ("/../secret.txt", "/..%2fsecret.txt", "/%2e%2e/secret.txt", "/%2e%2e%2fsecret.txt",
                 "/old/../../secret.txt", "/old/%2e%2e/%2e%2e/secret.txt", "/./../secret.txt"):
        yield f"traversal {path}", get(path, own), refused(400)
    for path in ("/%252e%252e/secret.txt", "/..%5csecret.txt", "/key.txt", "/up/secret.txt",
                 "/up/", "/loop", "/pipe.txt", "/old", "/old/", "/old/.", "/nothing.html"):
        yield f"escape or listing {path}", get(path, own), refused(404)
    for path in ("/%00.html", "/demo.html%00", "/%ff%fe", "/%0d%0aSet-Cookie:%20x=1", "/%7f"):
        yield f"bad path {path}", get(path, own), refused(400)
    yield "absolute-form target", get("http://evil.example/demo.html", own), refused(400)
    yield "HTTP/0.9", b"GET /demo.html\r\n\r\n", lambda r: PAGE_MARK not in r.body
    yield "request line 70 kB", get("/" + "a" * 70_000, own), refused(414, reset_ok=True)
    yield "header line 70 kB", get("/demo.html", own, f"X: {'a' * 70_000}\r\n"), refused(
        431, reset_ok=True)
    yield "101 headers", get("/demo.html", own, "X: y\r\n" * 101), refused(431, reset_ok=True)
    yield "PUT", f"PUT /x.html HTTP/1.1\r\nHost: {own}\r\n\r\n".encode(), refused(501)
    yield "own Host", get("/demo.html", own), served


def idle_flood(port: int, tally: Tally, held: list[socket.socket]) -> None:
    """More idle connections than the server keeps, then a normal request: answered, and no
    thread started for them."""
    threads = threading.active_count()
    held += [socket.create_connection(("127.0.0.1", port)) for _ in range(MAX_WAITING + 72)]
    reply = exchange(port, get("/demo.html", f"localhost:{port}"))
    tally.check("request after an idle flood", served(reply), f"{reply.status} {reply.error}")
    tally.check("no thread per idle connection", threading.active_count() == threads,
                f"{threading.active_count() - threads} more threads")


def stall(port: int, tally: Tally, held: list[socket.socket]) -> None:
    """More half-sent requests than handler threads, then a normal request: answered once the
    stalled ones time out."""
    for _ in range(HANDLER_THREADS + 4):
        conn = socket.create_connection(("127.0.0.1", port))
        conn.sendall(b"GET /demo.html HTTP/1.1\r\nHost: ")
        held.append(conn)
    reply = exchange(port, get("/demo.html", f"127.0.0.1:{port}"))
    tally.check("request after stalled requests", served(reply), f"{reply.status} {reply.error}")


def all_closed(held: list[socket.socket], tally: Tally, timeout_s: float) -> None:
    """Every idle or stalled connection is closed by the server (after its ``timeout_s``),
    within one deadline for all of them."""
    deadline = time.monotonic() + 3 * timeout_s
    with selectors.DefaultSelector() as selector:
        for conn in held:
            selector.register(conn, selectors.EVENT_READ)
        while selector.get_map() and time.monotonic() < deadline:
            for key, _ in selector.select(deadline - time.monotonic()):
                if _closed_by_server(key.fileobj):
                    selector.unregister(key.fileobj)
        still_open = len(selector.get_map())
    for conn in held:
        conn.close()
    tally.check("idle and stalled connections closed", still_open == 0, f"{still_open} open")


def _closed_by_server(conn: object) -> bool:
    assert isinstance(conn, socket.socket)
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:
        return True


class _Tracebacks(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += record.levelno >= logging.INFO and record.exc_info is not None


@contextmanager
def running_server(dashboards: Path, timeout_s: float) -> Iterator[int]:
    with DashboardServer(dashboards, port=0, timeout_seconds=timeout_s).start() as server:
        port = server.url.rstrip("/").rsplit(":", 1)[1]
        yield int(port)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"the server's timeout {QUICK_TIMEOUT_S:g} s, not "
                             f"{TIMEOUT_SECONDS:g} s")
    timeout_s = QUICK_TIMEOUT_S if parser.parse_args().quick else TIMEOUT_SECONDS
    started = time.perf_counter()
    tally = Tally()
    tracebacks = _Tracebacks()
    logging.getLogger("dse.report.serve").addHandler(tracebacks)
    with tempfile.TemporaryDirectory() as folder, running_server(make_folder(Path(folder)),
                                                                       timeout_s) as port:
        for name, request, judge in request_cases(port):
            reply = exchange(port, request)
            tally.check(name, judge(reply), f"{reply.status} {reply.error} {reply.body[:120]!r}")
        held: list[socket.socket] = []
        idle_flood(port, tally, held)
        stall(port, tally, held)
        all_closed(held, tally, timeout_s)
        reply = exchange(port, get("/demo.html", f"localhost:{port}"))
        tally.check("still serving", served(reply), f"{reply.status} {reply.error}")
    tally.check("no traceback logged", tracebacks.count == 0, f"{tracebacks.count} logged")
    for failure in tally.failed:
        print(f"FAILED {failure}", file=sys.stderr)
    print(f"{tally.total} cases in {time.perf_counter() - started:.1f} s")
    print(f"BENCH serve_attacks_failed {len(tally.failed)}")
    print(f"BENCH serve_attacks {tally.total}")
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
