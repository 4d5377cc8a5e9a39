"""Shared fixtures: every async test runs on anyio's asyncio backend (the store is asyncio-only),
and ``store_url`` runs a test on each store where the store matters."""

from __future__ import annotations

from pathlib import Path

import pytest

# The PostgreSQL fixtures (tests/pg.py): a database per test run, a schema per test, PgBouncer.
from tests.pg import pg_schema, pg_server, pg_url, pgbouncer  # noqa: F401


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a fresh, empty store, once per backend: an SQLite file under ``tmp_path``,
    and a PostgreSQL store in a schema of its own (``tests/pg.py``; skipped without a server
    unless ``TETHER_REQUIRE_PG=1``). For the tests whose outcome goes through the store."""
    if request.param == "sqlite":
        return str(tmp_path / "a.db")
    url: str = request.getfixturevalue("pg_url")
    return url
