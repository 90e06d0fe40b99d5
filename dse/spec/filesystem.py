"""What the file system holds where a spec points: spec files read only when they are regular files
of bounded size, and output folders checked before a campaign writes to them.

Both answer with one line of text (the caller adds the file and field), never an exception a user
would see as a traceback: a spec naming ``/dev/zero``, a FIFO, a socket or a folder, or an
experiment whose ``runs_dir`` is a file, is a mistake in the spec, found at ``dse validate`` time.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

# What each kind of file is called in a message: "found <this>; allowed: ...".
_FILE_TYPES = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISREG, "a regular file"),
)


class FileRefused(Exception):
    """A path that cannot be read as a spec, with the reason as one line (without the path)."""


def describe_file_type(mode: int) -> str:
    """``"a FIFO (named pipe)"``, ``"a directory"``, ... for an ``st_mode``."""
    return next((name for test, name in _FILE_TYPES if test(mode)), "a special file")


def read_regular_file(path: Path, max_bytes: int) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``max_bytes``.

    The type is read with ``stat`` before the file is opened, so a FIFO, a device or a socket is
    refused without reading a byte (a FIFO's ``open`` would wait for a writer; ``/dev/zero``
    never ends). The file is then opened non-blocking and checked again on the open descriptor,
    in case another file took the name in between, and at most ``max_bytes + 1`` bytes are read,
    in case it grew since its size was read.

    Raises:
        FileNotFoundError: no such file.
        FileRefused: not a regular file, or too big.
        OSError: the file system refused (permissions, a symbolic link loop, ...).
        ValueError: the name contains a NUL character.
    """
    info = os.stat(path)
    _check_regular(info.st_mode, info.st_size, max_bytes)
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(descriptor, "rb") as stream:
        info = os.fstat(stream.fileno())
        _check_regular(info.st_mode, info.st_size, max_bytes)
        data = stream.read(max_bytes + 1)
    _check_regular(stat.S_IFREG, len(data), max_bytes)
    return data


def _check_regular(mode: int, size: int, max_bytes: int) -> None:
    if not stat.S_ISREG(mode):
        raise FileRefused(f"found {describe_file_type(mode)}; allowed: a regular YAML file")
    if size > max_bytes:
        raise FileRefused(f"found a file of {size:,} bytes; allowed: at most {max_bytes:,} bytes")


def folder_problem(folder: Path) -> str | None:
    """Why dse could not create ``folder`` (with its parents) and write in it, or None when it
    could. Nothing is created: the nearest existing folder on the way up must be a folder that
    this user may write to, on a file system mounted read-write.

    (Run as root, ``os.access`` grants what the permission bits deny, so a folder only root may
    write to passes, as it would when the campaign runs.)"""
    for candidate in (folder, *folder.parents):
        try:
            info = os.stat(candidate)
        except (FileNotFoundError, NotADirectoryError):
            if os.path.islink(candidate):
                return f"{candidate} is a symbolic link to nothing"
            continue  # not there yet: the run creates it, if its parent allows
        except OSError as exc:
            return f"{candidate}: {exc.strerror}"
        return _existing_problem(folder, candidate, info.st_mode)
    return None  # not reached: the root folder exists


def _existing_problem(folder: Path, existing: Path, mode: int) -> str | None:
    """The problem of the nearest existing path ``existing`` at or above ``folder``."""
    created = "" if existing == folder else f"{folder} cannot be created: "
    if not stat.S_ISDIR(mode):
        return f"{created}{existing} is {describe_file_type(mode)}, not a folder"
    if os.statvfs(existing).f_flag & os.ST_RDONLY:
        return f"{created}{existing} is on a read-only file system"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{created}{existing} is not writable by this user"
    return None
