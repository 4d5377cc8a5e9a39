"""Shared fixtures: every async test runs on anyio's asyncio backend (the store is asyncio-only)."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# The PostgreSQL server fixtures (tests/pg.py): a database per test run, a schema per test.
from tests.pg import pg_schema, pg_server, pg_url  # noqa: E402, F401
