"""Recognise a write the file system refused (full disk, quota, file size limit) and say so in
one line, whichever layer raised it: ``OSError`` from a results file, or SQLite's error wrapped by
SQLAlchemy and Optuna (``StorageInternalError`` -> ``OperationalError`` -> ``sqlite3``)."""

from __future__ import annotations

import errno
import resource
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dse.core import DseError

REFUSED = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file too large",
}
SQLITE_FULL = 13  # "database or disk is full": SQLite's word for ENOSPC
SQLITE_IOERR = 10  # the primary code of every SQLITE_IOERR_*; SQLite reports EFBIG as one
# Less than this free on the folder's file system counts as full (SQLite needs a page or two).
LOW_SPACE_BYTES = 1 << 20


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it came from: causes, contexts and a driver's original (SQLAlchemy's
    ``orig``), outermost first."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        link = todo.pop(0)
        if id(link) in seen:
            continue
        seen.add(id(link))
        yield link
        orig = getattr(link, "orig", None)
        todo.extend(e for e in (orig, link.__cause__, link.__context__)
                    if isinstance(e, BaseException))


def _size_limit() -> int | None:
    """This process's file size limit in bytes (``ulimit -f``), None when unlimited."""
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def _free_bytes(folder: Path) -> int | None:
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    return None if existing is None else shutil.disk_usage(existing).free


def _too_large(detail: str = "") -> str:
    limit = _size_limit()
    parts = ([] if limit is None else [f"files may not grow past {limit:,} bytes here: ulimit -f"]
             ) + ([detail] if detail else [])
    return "file too large" + (f" ({'; '.join(parts)})" if parts else "")


def _why(link: BaseException, folder: Path) -> str | None:
    if isinstance(link, OSError) and link.errno in REFUSED:
        return _too_large() if link.errno == errno.EFBIG else REFUSED[link.errno]
    if isinstance(link, sqlite3.Error):
        code = getattr(link, "sqlite_errorcode", None)
        if code == SQLITE_FULL:
            return "no space left on device (SQLite: database or disk is full)"
        if code is not None and code & 0xFF == SQLITE_IOERR:
            # SQLite does not pass the errno on: a full file system or a size limit are the
            # likely causes of a failed write, so look for them.
            free = _free_bytes(folder)
            if free is not None and free < LOW_SPACE_BYTES:
                return f"no space left on device ({free:,} bytes free; SQLite: {link})"
            if _size_limit() is not None:
                return _too_large(f"SQLite: {link}")
            return f"SQLite: {link}"
    return None


def describe_write_failure(exc: BaseException, folder: Path) -> str | None:
    """One line saying that writing under ``folder`` failed and why ("no space left on device",
    "disk quota exceeded", "file too large ..."), when ``exc`` or an exception it came from is
    a write the file system refused; None for any other error. The first refusal (innermost)
    is named: later ones are its consequences."""
    reasons = [why for link in _chain(exc) if (why := _why(link, folder)) is not None]
    if not reasons:
        return None
    return f"{folder}: cannot write the campaign's files: {reasons[-1]}"


# What to tell the user after a refused write, by what was being written.
RESUME_ADVICE = ("The study keeps every trial completed before; free space (or raise the limit) "
                 "and run again to resume")
REPORT_ADVICE = "The files written before are left whole; free space (or raise the limit) and run it again"


@contextmanager
def refused_writes_as_errors(folder: Path, advice: str) -> Iterator[None]:
    """Turn a write the file system refuses under ``folder`` into a DseError of one line (what
    :func:`describe_write_failure` says, then ``advice``): a full disk is the user's to fix, not
    a dse bug. Any other error, and a DseError already raised, pass through unchanged."""
    try:
        yield
    except DseError:
        raise
    except Exception as exc:
        refused = describe_write_failure(exc, folder)
        if refused is None:
            raise
        raise DseError(f"{refused}. {advice}") from exc
