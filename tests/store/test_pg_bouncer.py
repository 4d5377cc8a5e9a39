"""A PostgreSQL store behind PgBouncer in session mode: the runtime, its fencing writes and its
LISTEN/NOTIFY wakeups all go through the pooler (docs/operations.md says which mode)."""

from __future__ import annotations

import anyio
import pytest

import tether
from tests import sample_actors as s
from tests.pg import Bouncer, PgServer
from tether.store.postgres import PostgresStore

pytestmark = pytest.mark.anyio


async def test_a_runtime_serves_and_is_woken_through_pgbouncer_in_session_mode(
    pg_server: PgServer, pg_schema: str, pgbouncer: Bouncer
) -> None:
    """A serving runtime and an administration process, both through PgBouncer: the admin's
    ask is answered, its reply found at once (both poll only every 60 s: the notices went
    through the pooler too)."""
    url = pgbouncer.url(pg_server.database, schema=pg_schema)
    async with tether.Runtime(url, poll_interval=60.0, passivate_after=None) as rt:
        acct = await rt.spawn(s.Account, "acct")
        await acct.ask(s.Deposit(amount=5), timeout=10)
        async with tether.Runtime(url, serve=False, poll_interval=60.0) as admin:
            with anyio.fail_after(20):
                await admin.ref("acct").ask(s.Deposit(amount=7), timeout=20)
                assert await admin.ref("acct").ask(s.GetBalance(), timeout=20) == 12


async def test_behind_pgbouncer_the_writer_never_ends_a_backend_by_its_pid(
    pg_server: PgServer, pg_schema: str, pgbouncer: Bouncer
) -> None:
    """After a connection breaks mid-write, the writer ends the old backend so that its retry
    need not wait for the server's timeouts: only on a direct connection. Behind a pooler the
    server's backend may serve another client by then, so it is left to the timeouts."""
    direct = PostgresStore(pg_server.schema_url(pg_schema))
    pooled = PostgresStore(pgbouncer.url(pg_server.database, schema=pg_schema))
    for store in (direct, pooled):
        await store.open()
    try:
        assert direct._writer.conn.backend is not None
        assert pooled._writer.conn.backend is None
    finally:
        for store in (direct, pooled):
            await store.close()
