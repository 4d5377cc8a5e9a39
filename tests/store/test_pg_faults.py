"""Connection faults on a PostgreSQL store: a terminated backend, a commit whose outcome the
writer never heard, a server restart. Each gives a retry or a clear error, never a lost or a
doubled write; the store reconnects and goes on."""

from __future__ import annotations

import dataclasses
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any

import anyio
import psycopg
import pytest

import tether
from tests import sample_actors as s
from tests.pg import Cluster, PgServer, unavailable, with_database
from tests.store.pg_proxy import SilentCut
from tether.store.postgres import PostgresStore
from tether.store.postgres.dsn import split_schema
from tether.store.postgres.writer import Job, Writer
from tether.store.records import Batch, BatchResult, Claim, JournalRow
from tether.testing.conformance.support import msg, owned, send, step

pytestmark = pytest.mark.anyio


def terminate(url: str, pids: list[int]) -> None:
    """``pg_terminate_backend`` of each backend, from a connection of its own."""
    dsn, _ = split_schema(url, None)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for pid in pids:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


def backends(store: PostgresStore) -> tuple[int, list[int]]:
    """The backend pids of the store's writer and of its connected readers."""
    writer = store._writer.conn.conn
    assert writer is not None
    readers = [c.conn.info.backend_pid for c in store._readers.all if c.conn is not None]
    return writer.info.backend_pid, readers


async def test_a_runtime_goes_on_after_its_writer_and_readers_backends_are_terminated(
    pg_url: str,
) -> None:
    async with tether.Runtime(pg_url, poll_interval=0.02, passivate_after=None) as rt:
        assert isinstance(rt.store, PostgresStore)
        acct = await rt.spawn(s.Account, "acct")
        await acct.ask(s.Deposit(amount=5), timeout=10)
        writer, readers = backends(rt.store)
        await anyio.to_thread.run_sync(terminate, pg_url, [writer])
        await acct.ask(s.Deposit(amount=7), timeout=10)
        _, readers = backends(rt.store)
        await anyio.to_thread.run_sync(terminate, pg_url, readers)
        assert await acct.ask(s.GetBalance(), timeout=10) == 12
        rows = await rt.store.load_journal("acct", 0, 100)
        assert [r.seq for r in rows] == [1, 2]  # each deposit journaled once
        assert backends(rt.store)[0] != writer  # a new connection


def cut_first_attempt(writer: Writer, *, when: str) -> list[int]:
    """Make ``writer``'s next transaction lose its connection: ``"after"`` the commit (its
    outcome unknown to the writer), or ``"before"`` it (the server rolls it back). The
    connection is cut for real: its backend terminates itself. Returns the list the cuts
    are counted in."""
    cuts: list[int] = []
    attempt = writer._attempt

    def cut(conn: Any) -> None:
        cuts.append(conn.info.backend_pid)
        conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    def flaky(conn: Any, job: Job[Any]) -> Any:
        if cuts:
            return attempt(conn, job)
        if when == "before":

            def then_cut(cur: Any) -> Any:
                result = job.fn(cur)
                cut(cur.connection)
                return result

            return attempt(conn, dataclasses.replace(job, fn=then_cut))
        result = attempt(conn, job)
        cut(conn)
        return result

    writer._attempt = flaky  # type: ignore[method-assign]
    return cuts


@pytest.mark.parametrize("when", ["after", "before"])
async def test_a_batch_whose_connection_drops_at_its_commit_is_applied_once(
    pg_url: str, when: str
) -> None:
    """The writer loses its connection right after the commit (the outcome unknown to it)
    or right before it (rolled back): either way, after reconnecting, the batch is applied
    exactly once — its claim counted once, its journal row written once — and the caller gets
    its result."""
    store = PostgresStore(pg_url)
    await store.open()
    try:
        fence = await owned(store, "a")
        await send(store, msg("m1"), msg("m2"))
        cuts = cut_first_attempt(store._writer, when=when)
        result = await store.apply(
            Batch(
                claims=[Claim("a", fence, "m2")],
                steps=[step("a", fence, "m1", events=[JournalRow(1, b"e")], reply=b"ok")],
            )
        )
        assert len(cuts) == 1
        assert isinstance(result, BatchResult)
        assert result.stale == set()
        assert [r.seq for r in await store.load_journal("a", 0, 10)] == [1]
        [m2] = await store.pending("a", 2_000.0, 10)
        assert (m2.msg_id, m2.attempts) == ("m2", 1)
        [reply] = await store.get_replies(["m1"])
        assert reply.payload == b"ok"
    finally:
        await store.close()


async def test_the_store_sets_its_timeouts_and_keepalives(pg_url: str) -> None:
    store = PostgresStore(pg_url, statement_timeout=12, idle_in_transaction_timeout=34)
    await store.open()
    try:
        found = await store._read(
            "SELECT current_setting('statement_timeout'), "
            "current_setting('idle_in_transaction_session_timeout'), "
            "current_setting('tcp_keepalives_idle'), current_setting('tcp_keepalives_interval'), "
            "current_setting('tcp_keepalives_count')"
        )
        # the server's end too: a backend whose host vanished frees its slot in about a minute
        assert found == [("12s", "34s", "30", "10", "3")]
        conninfo = store.settings.conninfo()
        for param in ("keepalives=1", "keepalives_idle=30", "connect_timeout=10"):
            assert param in conninfo
    finally:
        await store.close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A throwaway PostgreSQL cluster of this module's own, to stop and restart."""
    made = Cluster.create()
    if made is None:
        unavailable("PostgreSQL's binaries are not installed (/usr/lib/postgresql/*/bin)")
        raise AssertionError("unreachable")
    try:
        yield made
    finally:
        made.stop()
        made.remove()


async def test_a_runtime_goes_on_across_a_server_restart(cluster: Cluster) -> None:
    """The server is restarted under a serving runtime while an ask is on its way: the writer
    retries until the server is back, the ask is answered, and every deposit is journaled
    exactly once."""
    url = with_database(cluster.dsn, "postgres", schema="restart")
    async with tether.Runtime(url, poll_interval=0.05, passivate_after=None) as rt:
        acct = await rt.spawn(s.Account, "acct")
        await acct.ask(s.Deposit(amount=5), timeout=10)
        await anyio.to_thread.run_sync(cluster.stop)
        restarted = threading.Timer(1.0, cluster.start)
        restarted.start()
        try:
            await acct.ask(s.Deposit(amount=7), timeout=60)
        finally:
            await anyio.to_thread.run_sync(restarted.join)
        assert await acct.ask(s.GetBalance(), timeout=30) == 12
        assert [r.seq for r in await rt.store.load_journal("acct", 0, 100)] == [1, 2]


async def test_a_write_while_the_server_stays_down_fails_clearly_and_changes_nothing(
    cluster: Cluster,
) -> None:
    """A server that stays unreachable past ``retry_for``: the write raises StoreError saying
    so; once the server is back, nothing of it is there, and the store goes on."""
    url = with_database(cluster.dsn, "postgres", schema="down")
    store = PostgresStore(url, retry_for=1.0)
    await store.open()
    try:
        await send(store, msg("m0"))
        await anyio.to_thread.run_sync(cluster.stop)
        try:
            with pytest.raises(tether.StoreError, match="unreachable"):
                await send(store, msg("m1"))
        finally:
            await anyio.to_thread.run_sync(cluster.start)
        await send(store, msg("m2"))
        assert [m.msg_id for m in await store.list_messages("a", 10)] == ["m0", "m2"]
    finally:
        await store.close()


async def test_a_batch_cut_off_silently_before_its_commit_is_applied_once_with_the_defaults(
    pg_server: PgServer, pg_schema: str
) -> None:
    """The network goes down in the middle of a write transaction without the server hearing
    of it (``SilentCut``): its backend holds the transaction open, with its batch id. The
    writer reconnects and runs the batch again under that id, which waits for the old
    transaction; the server ends that one at ``idle_in_transaction_session_timeout``, which by
    default comes before the retry gives up and before the waiting statement's own timeout,
    so the batch is applied once and the caller gets its result."""
    target = urllib.parse.urlsplit(pg_server.dsn)
    relay = SilentCut((target.hostname or "127.0.0.1", target.port or 5432))
    store = PostgresStore(relay.url(pg_server.schema_url(pg_schema)))
    await store.open()
    try:
        fence = await owned(store, "a")
        await send(store, msg("m1"))
        attempt = store._writer._attempt

        def cut_before_commit(conn: Any, job: Job[Any]) -> Any:
            if relay.cuts:
                return attempt(conn, job)

            def then_cut(cur: Any) -> Any:
                result = job.fn(cur)
                relay.cut()
                return result

            return attempt(conn, dataclasses.replace(job, fn=then_cut))

        store._writer._attempt = cut_before_commit  # type: ignore[method-assign]
        result = await store.apply(
            Batch(steps=[step("a", fence, "m1", events=[JournalRow(1, b"e")], reply=b"ok")])
        )
        assert relay.cuts == 1
        assert result.stale == set()
        assert [r.seq for r in await store.load_journal("a", 0, 10)] == [1]
        [reply] = await store.get_replies(["m1"])
        assert reply.payload == b"ok"
    finally:
        await store.close()
        relay.close()
