"""The notices a PostgreSQL store sends after its writes commit: batched, one for any number
of commits in a burst, each sent by the writer's connection between its write transactions
(``Notices._send`` is a call of its own on the writer's one thread, in autocommit: a
NOTIFY-ing commit takes a lock that serialises every commit of the server)."""

from __future__ import annotations

import anyio
import psycopg
import pytest
from psycopg import sql

from tether.store.postgres import PostgresStore
from tether.store.postgres.dsn import split_schema
from tether.store.records import Batch
from tether.testing.conformance.support import msg, send, spawn

pytestmark = pytest.mark.anyio


async def test_a_burst_of_commits_sends_one_notice_from_the_writers_connection(
    pg_url: str,
) -> None:
    store = PostgresStore(pg_url)
    await store.open()
    dsn, _ = split_schema(pg_url, None)
    listener = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    try:
        assert store._notices.channel is not None
        await listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(store._notices.channel)))
        await spawn(store, "a")
        notices: list[tuple[int, str]] = []

        async def count() -> None:
            async for notice in listener.notifies():  # each seen as it comes: never ends
                notices.append((notice.pid, notice.payload))  # noqa: PERF401

        async with anyio.create_task_group() as tg:
            tg.start_soon(count)
            with anyio.fail_after(20):
                while not notices:  # the spawn's
                    await anyio.sleep(0.01)
            await anyio.sleep(0.2)
            notices.clear()
            for _ in range(500):  # 500 commits settled in one turn of the loop: one notice
                store._notices.committed()
            with anyio.fail_after(20):
                while not notices:
                    await anyio.sleep(0.01)
            await anyio.sleep(0.3)  # any second notice of the burst would be here by now
            assert len(notices) == 1
            await send(store, msg("m1"))  # a commit after the burst: its own notice
            with anyio.fail_after(20):
                while len(notices) < 2:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        # Sent by the writer's connection, carrying the store's own id (which its own
        # listener ignores).
        writer = store._writer.conn.conn
        assert writer is not None
        assert {pid for pid, _ in notices} == {writer.info.backend_pid}
        assert {payload for _, payload in notices} == {store._notices.me}
    finally:
        await listener.close()
        await store.close()


async def test_a_batch_that_concerns_only_its_runtime_sends_no_notice(pg_url: str) -> None:
    """``Batch.local``: its commit wakes no other process (their scans would find nothing of
    theirs in it); the next batch that is not local sends its notice as before."""
    store = PostgresStore(pg_url)
    await store.open()
    dsn, _ = split_schema(pg_url, None)
    listener = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    try:
        assert store._notices.channel is not None
        await listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(store._notices.channel)))
        await spawn(store, "a")
        notices: list[str] = []

        async def count() -> None:
            async for notice in listener.notifies():  # each seen as it comes: never ends
                notices.append(notice.payload)  # noqa: PERF401

        async with anyio.create_task_group() as tg:
            tg.start_soon(count)
            with anyio.fail_after(20):
                while not notices:  # the spawn's
                    await anyio.sleep(0.01)
            await anyio.sleep(0.2)
            notices.clear()
            for i in range(5):
                await store.apply(Batch(messages=[msg(f"local-{i}")], local=True))
            await anyio.sleep(0.3)  # a notice of those commits would be here by now
            assert notices == []
            await send(store, msg("shared"))
            with anyio.fail_after(20):
                while not notices:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    finally:
        await listener.close()
        await store.close()
