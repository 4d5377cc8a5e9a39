"""The ``Store`` conformance suite (``tether.testing.conformance``) on ``PostgresStore``.

Each test gets a fresh schema in this test run's database (``tests/pg.py``). The store judges
leases on the server's clock (``own_clock``: the lease cases wait real time), and lets
writers commit concurrently, so the suite's case of a transaction held open across a scan
runs here: ``hold_open`` applies a batch on a connection of its own and commits it only when
the case lets go.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from tether.store.postgres import PostgresStore
from tether.store.postgres import writes as pg_writes
from tether.store.protocol import Store
from tether.store.records import Batch
from tether.testing.conformance import *  # noqa: F403
from tether.testing.conformance import StoreTarget


@asynccontextmanager
async def hold_open(store: Store, batch: Batch) -> AsyncIterator[None]:
    """Apply ``batch`` in a transaction of its own connection, committed on leaving."""
    assert isinstance(store, PostgresStore)
    conn = await anyio.to_thread.run_sync(store.settings.connect)
    try:
        tx = conn.transaction()
        await anyio.to_thread.run_sync(tx.__enter__)
        try:
            with conn.cursor() as cur:
                await anyio.to_thread.run_sync(pg_writes.apply, cur, batch)
        except BaseException as exc:
            await anyio.to_thread.run_sync(tx.__exit__, type(exc), exc, exc.__traceback__)
            raise
        try:
            yield
        except BaseException as exc:
            await anyio.to_thread.run_sync(tx.__exit__, type(exc), exc, exc.__traceback__)
            raise
        await anyio.to_thread.run_sync(tx.__exit__, None, None, None)
    finally:
        await anyio.to_thread.run_sync(conn.close)


@pytest.fixture  # type: ignore[no-redef]  # overrides the suite's store_target
def store_target(pg_url: str) -> StoreTarget:
    # Leases of 3 s, and 1.5 s of slack between the server's clock and a test's reading of it:
    # the lease cases wait real time, on a machine other test runs may keep busy.
    return StoreTarget(pg_url, own_clock=True, lease_ttl=3.0, clock_slack=1.5, hold_open=hold_open)
