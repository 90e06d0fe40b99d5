"""The processes a `dse run` child started: the driver, its embedded Ray (GCS, raylet, agents) and
Ray's workers. Ray puts its workers in process groups of their own, but all stay in the session of
a driver started with ``start_new_session=True``, which outlives the driver itself."""

from __future__ import annotations

import os
import time

import psutil


def session_processes(leader: int) -> list[psutil.Process]:
    """Every live process of the session ``leader`` started."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == leader and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return members


def kill_session(leader: int, timeout_s: float = 20.0) -> None:
    """SIGKILL what is left of the session ``leader`` started, until none is left or time is up."""
    deadline = time.monotonic() + timeout_s
    while (left := session_processes(leader)) and time.monotonic() < deadline:
        for process in left:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.2)
