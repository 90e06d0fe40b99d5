"""A throwaway PostgreSQL server in a temporary folder, for tests and the storage benchmark: ``initdb``, then
``pg_ctl start`` listening on a free port of 127.0.0.1 only, with trust authentication for one
user. The server binaries are Debian's (``/usr/lib/postgresql/<version>/bin``) or any on PATH.

PostgreSQL refuses to run as root; under root the server runs as the ``postgres`` system user
(which owns the folder), as a package-installed server would.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

USER = "dse"


def server_binaries() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl`` (the newest Debian version first)."""
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(on_path).parent
    found = [folder for folder in Path("/usr/lib/postgresql").glob("*/bin")
             if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file()]
    found.sort(key=lambda folder: int(folder.parent.name) if folder.parent.name.isdigit() else 0)
    return found[-1] if found else None


def _service_user() -> str | None:
    """The user to run the server as: None for this one, "postgres" under root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return ""
    return "postgres"


def unavailable_reason() -> str | None:
    """Why no server can be started here, or None."""
    if server_binaries() is None:
        return ("no PostgreSQL server binaries (initdb, pg_ctl) on PATH or under "
                "/usr/lib/postgresql: install Debian's postgresql")
    if _service_user() == "":
        return "running as root without a 'postgres' user to run the server as"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed: pip install 'dse[postgresql]'"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    """A server whose data lives in a temporary folder of its own (directly under the system's
    temporary folder, which the postgres user can reach: a caller's private folder may not be),
    removed when it stops. ``durable`` False turns off fsync: faster, for tests that do not
    measure."""

    def __init__(self, *, durable: bool = True) -> None:
        binaries = server_binaries()
        if binaries is None:
            raise RuntimeError(unavailable_reason())
        self.binaries = binaries
        self.folder = Path(tempfile.mkdtemp(prefix="dse-postgres-"))
        self.data = self.folder / "data"
        self.durable = durable
        self.user = _service_user() or None
        self.port = 0

    def _run(self, *command: str) -> None:
        done = subprocess.run(command, user=self.user, capture_output=True, text=True,
                              timeout=120, check=False, cwd=self.folder)
        if done.returncode != 0:
            raise RuntimeError(f"{Path(command[0]).name} failed ({done.returncode}): "
                               f"{(done.stderr or done.stdout).strip()[-2000:]}")

    def start(self) -> PostgresServer:
        if self.user:
            shutil.chown(self.folder, self.user)
        sync = [] if self.durable else ["--no-sync"]
        self._run(str(self.binaries / "initdb"), "-D", str(self.data), "-U", USER,
                  "--auth=trust", "--encoding=UTF8", "--locale=C", *sync)
        settings = f"-c listen_addresses=127.0.0.1 -k {self.folder}"
        if not self.durable:
            settings += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        for attempt in range(3):  # another process may take the free port first
            self.port = _free_port()
            try:
                self._run(str(self.binaries / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60",
                          "-l", str(self.folder / "server.log"), "-o",
                          f"-p {self.port} {settings}", "start")
                return self
            except RuntimeError:
                if attempt == 2:
                    raise
        return self

    def stop(self) -> None:
        try:
            if self.port and (self.data / "postmaster.pid").exists():
                self._run(str(self.binaries / "pg_ctl"), "-D", str(self.data), "-m", "fast",
                          "-w", "stop")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create database ``name`` (letters, digits, underscores); returns its URL."""
        import psycopg

        if not name.replace("_", "").isalnum():
            raise ValueError(f"database name {name!r}: letters, digits and underscores only")
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()
