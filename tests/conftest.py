"""Shared fixtures: every async test runs on anyio's asyncio backend (the store is asyncio-only)."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
