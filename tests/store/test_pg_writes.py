"""The PostgreSQL store's batch writes where several writers make the difference.

Lease claims never wait for another runtime's transaction. A claim takes the actor's row
``FOR UPDATE SKIP LOCKED``: a row another transaction holds (a stale owner's batch reading its
fence ``FOR SHARE``, perhaps of a host cut off in the middle of it, whose transaction the
server ends only at its idle timeout) is left for a later claim. Waiting for it instead would
stall the claiming runtime's one writer, and with it every session of that runtime. Fencing
still holds: the takeover's fence increment happens after the stale batch has committed, never
under it.

An effect slot held by another actor is refused with the whole batch, by the server inside
the statement: a batch in pipeline mode reads no count of rows before its commit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import psycopg
import pytest

from tests.store.effect_slots import refuses_another_actors_slot
from tests.store.test_pg_conformance import hold_open
from tether.store.postgres import PostgresStore
from tether.store.postgres.dsn import split_schema
from tether.store.records import Batch, EffectWrite
from tether.testing.conformance.support import NOW, effect, lease, msg, owned, send

pytestmark = pytest.mark.anyio


@pytest.fixture
async def stores(pg_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two handles on one store, as two runtimes have."""
    one, two = PostgresStore(pg_url), PostgresStore(pg_url)
    await one.open()
    try:
        await two.open()
        try:
            yield one, two
        finally:
            await two.close()
    finally:
        await one.close()


def waiting_on_a_lock(url: str) -> bool:
    """Whether a backend of this test's database waits for a row lock in a lease claim."""
    dsn, _ = split_schema(url, None)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE '%%lease_owner = v.owner%%'"
        ).fetchone()
    return row is not None and row[0] > 0


async def test_a_claim_skips_an_actor_whose_stale_owner_holds_a_batch_open(
    pg_url: str, stores: tuple[PostgresStore, PostgresStore]
) -> None:
    """The old owner's batch (an effect intent) is open when another runtime claims the
    actor, whose lease is free (the old owner was found dead): the claim returns at once
    without the lease, instead of waiting. Once the batch committed, a claim wins the next
    fence; the intent, committed under the old fence before the takeover, is there for the
    new owner, and the old owner's next write is refused."""
    old_store, new_store = stores
    old = await owned(old_store, "a", "rt-1")
    await send(old_store, msg("m1"))
    await old_store.remove_runtime("rt-1")  # found dead: its lease is free at once
    await new_store.register_runtime("rt-2", "host", 2, NOW)
    intent = effect("m1", 0)
    claimed: list[int | None] = []
    waited = False

    async def claim() -> None:
        claimed.append(await lease(new_store, "a", "rt-2"))

    held = hold_open(old_store, Batch(effects=[EffectWrite(old, intent)]))
    async with held, anyio.create_task_group() as tg:
        tg.start_soon(claim)
        while not claimed:
            if await anyio.to_thread.run_sync(waiting_on_a_lock, pg_url):
                waited = True
                tg.cancel_scope.cancel()  # the held batch commits on leaving, freeing it
                break
            await anyio.sleep(0.02)
    assert not waited, "the claim waited for the stale owner's open transaction"
    assert claimed == [None]
    fence = await lease(new_store, "a", "rt-2")
    assert fence == old + 1
    assert await new_store.effects_of("a", "m1") == [intent]
    late = effect("m1", 1)
    result = await old_store.apply(Batch(effects=[EffectWrite(old, late)]))
    assert result.stale == {"a"}
    assert await new_store.effects_of("a", "m1") == [intent]


async def test_an_effect_row_never_overwrites_another_actors_row_under_the_same_slot(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    """Refused by the server in the statement itself: a batch in pipeline mode reads no count
    of rows before its commit."""
    await refuses_another_actors_slot(stores[0])
