"""Several writer connections (``PostgresStore(writers=N)``): the group committer's lanes
commit batches on them at once, and one actor's writes still commit in submission order
(``tether.runtime.lanes``); a fault on one connection is retried there, never a lost or a
doubled write."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import psycopg
import pytest

import tether
from tests import sample_actors as s
from tests.store.test_pg_faults import cut_first_attempt, terminate
from tether.runtime.committer import GroupCommitter, all_settled
from tether.runtime.lanes import lane_key
from tether.store.postgres import PostgresStore
from tether.store.postgres.dsn import split_schema
from tether.store.postgres.writer import Writer
from tether.store.records import BatchResult, JournalRow, StepCommit
from tether.testing.conformance.support import owned

pytestmark = pytest.mark.anyio

ROUNDS = 12


def actors_on_both_lanes(per_lane: int = 3) -> list[str]:
    """Actor ids, ``per_lane`` on each of two lanes (a lane is the id's hash, per process)."""
    lanes: dict[int, list[str]] = {0: [], 1: []}
    i = 0
    while min(len(v) for v in lanes.values()) < per_lane:
        actor_id = f"a{i}"
        i += 1
        lane = lanes[hash(lane_key(StepCommit(actor_id, 0, "m", [], []))) % 2]
        if len(lane) < per_lane:
            lane.append(actor_id)
    return [*lanes[0], *lanes[1]]


@dataclasses.dataclass
class InFlight:
    """How many writers ran a batch at once, at most, and which ran one."""

    now: int = 0
    most: int = 0
    used: set[str] = dataclasses.field(default_factory=set)

    def watch(self, writer: Writer) -> None:
        run = writer.run

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.now += 1
            self.most = max(self.most, self.now)
            self.used.add(writer.conn.name)
            try:
                return await run(*args, **kwargs)
            finally:
                self.now -= 1

        writer.run = counted  # type: ignore[method-assign]


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PostgresStore]:
    store = PostgresStore(pg_url, writers=2)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def append_rounds(store: PostgresStore, fences: dict[str, int]) -> list[BatchResult]:
    """Each actor's journal rows 1..ROUNDS, each its own write, submitted without waiting for
    the ones before; at most 3 writes a batch, so one actor's rows span many batches."""
    committer = GroupCommitter(store, max_batch=3)
    futures: list[asyncio.Future[BatchResult]] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(committer.run)
        for seq in range(1, ROUNDS + 1):
            for actor_id, fence in fences.items():
                write = StepCommit(
                    actor_id, fence, f"append:{actor_id}:{seq}", [JournalRow(seq, b"e")], []
                )
                futures.append(committer.submit(write))
            await asyncio.sleep(0)  # the lanes take what is queued so far
        await all_settled(futures)
        await committer.close()
    return [f.result() for f in futures]


def journal_commits(url: str, actor_id: str) -> list[tuple[int, int]]:
    """``actor_id``'s journal rows: (seq, the id of the transaction that wrote it), by seq."""
    dsn, schema = split_schema(url, None)
    assert schema is not None  # each test's store is a schema of its own
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            psycopg.sql.SQL("SET search_path TO {}").format(psycopg.sql.Identifier(schema))
        )
        found = conn.execute(
            "SELECT seq, xmin::text::bigint FROM journal WHERE actor_id = %s ORDER BY seq",
            (actor_id,),
        ).fetchall()
    return [(int(seq), int(xid)) for seq, xid in found]


async def test_two_writers_commit_at_once_and_keep_each_actors_order(
    store: PostgresStore, pg_url: str
) -> None:
    assert store.write_lanes == 2
    inflight = InFlight()
    for writer in store._writers.all:
        inflight.watch(writer)
    fences = {a: await owned(store, a) for a in actors_on_both_lanes()}
    results = await append_rounds(store, fences)
    assert all(not r.stale for r in results)
    assert inflight.most == 2  # two batches were in flight at once
    assert inflight.used == {"writer", "writer1"}
    for actor_id in fences:
        rows = await anyio.to_thread.run_sync(journal_commits, pg_url, actor_id)
        assert [seq for seq, _ in rows] == list(range(1, ROUNDS + 1))
        xids = [xid for _, xid in rows]
        # Committed in submission order: each row in the same or a later transaction than the
        # row before it (a later transaction of one lane starts after the earlier committed).
        assert xids == sorted(xids)
        assert len(set(xids)) > 1  # over several batches


@pytest.mark.parametrize("when", ["after", "before"])
async def test_a_fault_on_one_writer_is_retried_there_and_loses_or_doubles_nothing(
    store: PostgresStore, pg_url: str, when: str
) -> None:
    """The second writer's connection dies at its first commit while the first writer commits
    on: every write is applied once (the journal's primary key refuses a row twice), each
    actor's in order, and every caller gets its result."""
    inflight = InFlight()
    for writer in store._writers.all:
        inflight.watch(writer)
    fences = {a: await owned(store, a) for a in actors_on_both_lanes()}
    cuts = cut_first_attempt(store._writers.all[1], when=when)
    results = await append_rounds(store, fences)
    assert len(cuts) == 1
    assert inflight.used == {"writer", "writer1"}
    assert all(not r.stale for r in results)
    for actor_id in fences:
        rows = await anyio.to_thread.run_sync(journal_commits, pg_url, actor_id)
        assert [seq for seq, _ in rows] == list(range(1, ROUNDS + 1))
        assert [xid for _, xid in rows] == sorted(xid for _, xid in rows)


async def test_a_runtime_goes_on_after_either_writers_backend_is_terminated(pg_url: str) -> None:
    store = PostgresStore(pg_url, writers=2)
    async with tether.Runtime(store=store, poll_interval=0.02, passivate_after=None) as rt:
        refs = [await rt.spawn(s.Account, f"acct-{i}") for i in range(8)]

        async def deposit_everywhere() -> None:
            async with anyio.create_task_group() as tg:
                for ref in refs:
                    deposit: Callable[[], Any] = functools.partial(
                        ref.ask, s.Deposit(amount=1), timeout=20
                    )
                    tg.start_soon(deposit)

        await deposit_everywhere()
        for writer in store._writers.all:
            conn = writer.conn.conn
            if conn is not None:  # a writer connects on its first batch
                await anyio.to_thread.run_sync(terminate, pg_url, [conn.info.backend_pid])
            await deposit_everywhere()
        assert len(store._writers.all) == 2
        assert [await ref.ask(s.GetBalance(), timeout=20) for ref in refs] == [3] * 8
        for i in range(len(refs)):
            rows = await store.load_journal(f"acct-{i}", 0, 100)
            assert [r.seq for r in rows] == [1, 2, 3]  # each deposit journaled once
