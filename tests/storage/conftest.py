"""A real PostgreSQL server for the storage tests: started once per session in a temporary folder
(Debian's server binaries), one fresh database per test. Skipped, with the reason, where no server
binary exists."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from dse.storage.postgres_server import PostgresServer, unavailable_reason

_NUMBERS = itertools.count()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"no PostgreSQL server: {reason}")
    with PostgresServer(durable=False) as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """The URL of a new, empty database on the session's server."""
    return postgres_server.create_database(f"dse_test_{next(_NUMBERS)}")


def storage_setting(kind: str, url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The experiment's ``storage:`` for ``kind``; a database URL travels in an environment
    variable, as a team would pass one."""
    if kind != "postgresql":
        return kind
    monkeypatch.setenv("DSE_TEST_STORAGE", url)
    return "env:DSE_TEST_STORAGE"


@pytest.fixture(params=["sqlite", "journal", "postgresql"])
def storage_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def storage_line(storage_kind: str, request: pytest.FixtureRequest,
                 monkeypatch: pytest.MonkeyPatch) -> str:
    """``storage: ...`` for the test's storage kind (a fresh PostgreSQL database for that one)."""
    url = request.getfixturevalue("postgres_url") if storage_kind == "postgresql" else ""
    return f"storage: {storage_setting(storage_kind, url, monkeypatch)}\n"


def run_folder_files(run_dir: Path) -> set[str]:
    return {path.name for path in run_dir.iterdir()}
