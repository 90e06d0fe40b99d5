"""What the dashboard server refuses, so that nobody reads the pages through a reader's browser
or this machine: request targets that do not name a file of the dashboards folder (``..``,
escapes that are not UTF-8, control characters), files outside it once links are resolved,
folders and anything but regular files, and a ``Host`` other than the server's own address (DNS
rebinding). Also the headers every response carries: no framing, no sniffing, no loads from
elsewhere.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote

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
    names = {"localhost", "127.0.0.1", address_literal(host).lower()}
    return frozenset({f"{name}:{port}" for name in names} | (names if port == 80 else set()))


def address_literal(host: str) -> str:
    return f"[{host}]" if ":" in host else host
