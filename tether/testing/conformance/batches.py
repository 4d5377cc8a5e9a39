"""Conformance: a batch is atomic (I2): one that fails leaves nothing behind."""

from __future__ import annotations

import pytest

from tether.errors import StoreError
from tether.store.protocol import Store
from tether.store.records import (
    Batch,
    Claim,
    JournalRow,
    LeaseAcquire,
    Snapshot,
    Spawn,
)
from tether.testing.conformance.support import (
    NOW,
    TTL,
    halt,
    journal_seqs,
    msg,
    owned,
    pending_ids,
    record,
    send,
    spawn,
    step,
)

# -- atomicity (I2) -----------------------------------------------------------------------------


async def _failing_batch(store: Store) -> tuple[int, Batch]:
    """A store with actor "a" holding journal seq 1, and a batch whose step re-uses seq 1."""
    fence = await owned(store, "a")
    await spawn(store, "b")
    await send(store, msg("m0"), msg("m1"), msg("m2"))
    await store.apply(Batch(steps=[step("a", fence, "m0", events=[JournalRow(1, b"e1")])]))
    batch = Batch(
        spawns=[Spawn(record("new-actor"))],
        acquires=[LeaseAcquire("b", "rt-1", TTL)],
        messages=[msg("ingress", "b", dedup_key="k")],
        claims=[Claim("a", fence, "m2")],
        steps=[
            step(
                "a",
                fence,
                "m1",
                events=[JournalRow(1, b"again")],  # already in the journal
                outbox=[msg("out", "b")],
                reply=b"r",
                snapshot=Snapshot(1, b"s"),
            )
        ],
        stops=[halt("b", "x")],
    )
    return fence, batch


async def test_failing_batch_leaves_nothing_of_itself_behind(store: Store) -> None:
    """A batch that fails (a journal seq that exists) applies none of its writes."""
    fence, batch = await _failing_batch(store)
    with pytest.raises(Exception):  # noqa: B017, PT011 -- the type is the next test's business
        await store.apply(batch)
    assert await store.get_actor("new-actor") is None
    b = await store.get_actor("b")
    assert b is not None
    assert (b.status, b.fence, b.lease_owner) == ("active", 0, None)
    assert await pending_ids(store, "b") == []
    assert await store.find_dedup("b", "k") is None
    assert await store.load_journal("a", 0, 100) == [JournalRow(1, b"e1")]
    assert await store.load_snapshot("a") is None
    assert await store.get_replies(["m1"]) == []
    got = await store.pending("a", NOW, 10)
    assert [(m.msg_id, m.attempts) for m in got] == [("m1", 0), ("m2", 0)]
    assert await store.dead_letters() == []
    # The store still works afterwards.
    await store.apply(Batch(steps=[step("a", fence, "m1", events=[JournalRow(2, b"e2")])]))
    assert await journal_seqs(store, "a") == [1, 2]


async def test_failing_batch_raises_a_store_error(store: Store) -> None:
    """A batch the store cannot apply raises StoreError (tether's error tree), not a driver error."""
    _, batch = await _failing_batch(store)
    with pytest.raises(StoreError):
        await store.apply(batch)


async def test_closed_store_refuses_reads_and_writes(store: Store) -> None:
    """After close, reads and apply raise StoreError."""
    await spawn(store, "a")
    await store.close()
    with pytest.raises(StoreError):
        await store.get_actor("a")
    with pytest.raises(StoreError):
        await store.apply(Batch(messages=[msg("m1")]))
