"""``MemoryStore.apply_one``: the short path of a single write stores exactly what
``apply_sync`` stores for a batch of that write alone, and declines every other write."""

from __future__ import annotations

from typing import Any

import pytest

from tether.errors import StoreError
from tether.store.memory import MemoryStore
from tether.store.records import (
    Batch,
    BatchResult,
    JournalRow,
    LateReply,
    LeaseAcquire,
    NewMessage,
    Snapshot,
    Spawn,
    StepCommit,
    StopActor,
)
from tether.testing.conformance.support import NOW, TTL, msg, record, step

pytestmark = pytest.mark.anyio


async def two_stores() -> tuple[MemoryStore, MemoryStore, int]:
    """Two opened stores holding the actor ``a``, leased: (by apply_sync, by apply_one, fence)."""
    stores = (MemoryStore(clock=lambda: NOW), MemoryStore(clock=lambda: NOW))
    for s in stores:
        await s.open()
        await s.register_runtime("rt-1", "host", 1, NOW)
        s.apply_sync(Batch(spawns=[Spawn(record("a")), Spawn(record("b"))]))
        result = s.apply_sync(Batch(acquires=[LeaseAcquire("a", "rt-1", TTL)]))
    fence = result.leases["a"]
    assert fence is not None
    return stores[0], stores[1], fence


def alone(write: Any) -> Batch:
    if isinstance(write, NewMessage):
        return Batch(messages=[write])
    return Batch(steps=[write])


def state(s: MemoryStore) -> tuple[Any, ...]:
    return (s.mailbox, s.dedup, s.journal, s.snapshots, s.replies, s.actors, s._seq)


def same(by_batch: MemoryStore, by_one: MemoryStore, write: Any) -> BatchResult:
    """Apply ``write`` to each store, each way; both end the same, with the same result."""
    expected = by_batch.apply_sync(alone(write))
    got = by_one.apply_one(write)
    assert got is not None, "declined a write it takes"
    assert got == expected
    assert state(by_one) == state(by_batch)
    return got


async def test_apply_one_stores_a_send_and_a_step_as_apply_sync_does() -> None:
    by_batch, by_one, fence = await two_stores()
    m1 = msg("m1", wants_reply=True)
    m3 = NewMessage("m3", "a", "Ping", b"m3", NOW, NOW, attempts=1)
    same(by_batch, by_one, m1)
    same(by_batch, by_one, m3)
    assert by_one.apply_one(msg("m2", dedup_key="k")) is None  # keyed: apply_sync takes it
    for s in (by_batch, by_one):
        s.apply_sync(alone(msg("m2", dedup_key="k")))
    full = StepCommit(
        actor_id="a",
        fence=fence,
        msg_id="m1",
        events=[JournalRow(1, b"e1"), JournalRow(2, b"e2")],
        outbox=[msg("o1", "b"), msg("o2", dedup_key="k"), msg("o3", "b", dedup_key="k")],
        reply=b"answer",
        snapshot=Snapshot(2, b"state"),
        claim_next="m3",
        late_replies=[LateReply("earlier", b"late", NOW)],
    )
    result = same(by_batch, by_one, full)
    assert result.duplicates == {"o2": "m2"}  # o3: the same key, another actor's
    assert by_one.mailbox["m3"].attempts == 2
    assert "m1" not in by_one.mailbox  # acked
    assert {"o1", "o3"} <= by_one.mailbox.keys()
    same(by_batch, by_one, step("a", fence, "m3"))  # nothing to report: no outbox


async def test_apply_one_declines_stale_and_stopping_steps() -> None:
    _, by_one, fence = await two_stores()
    by_one.apply_one(msg("m1"))
    before = state(by_one)
    assert by_one.apply_one(step("a", fence + 1, "m1")) is None  # stale: apply_sync reports it
    assert by_one.apply_one(step("c", 0, "m1")) is None  # no such actor
    stop = StopActor("a", "done", NOW, b"", "stopped")
    assert by_one.apply_one(step("a", fence, "m1", stop=stop)) is None
    assert state(by_one) == before


async def test_apply_one_refuses_a_step_whose_events_do_not_follow_the_journal() -> None:
    by_batch, by_one, fence = await two_stores()
    for s in (by_batch, by_one):
        s.apply_sync(alone(msg("m1")))
        s.apply_sync(alone(msg("m2")))
    same(by_batch, by_one, step("a", fence, "m1", events=[JournalRow(1, b"e1")]))
    again = step("a", fence, "m2", events=[JournalRow(1, b"e1")], outbox=[msg("o1")])
    before = state(by_one)
    with pytest.raises(StoreError):
        by_one.apply_one(again)
    with pytest.raises(StoreError):
        by_batch.apply_sync(alone(again))
    assert state(by_one) == before == state(by_batch)


@pytest.mark.parametrize("applier", ["apply", "apply_sync"])
async def test_an_applier_replaced_on_a_running_store_receives_every_write(applier: str) -> None:
    """The committer caches the store's appliers; one replaced on the instance afterwards (a
    test injecting a failure) still gets the writes: a failing one fails the send, and once
    it is put back, sends are stored again."""
    import tether
    from tests import sample_actors as sa

    async with tether.Runtime(":memory:") as rt:
        acct = await rt.spawn(sa.Account, "acct")
        assert isinstance(rt.store, MemoryStore)

        def broken(*_: Any) -> Any:
            raise StoreError("disk on fire")

        setattr(rt.store, applier, broken)
        with pytest.raises(tether.JournalWriteError, match="disk on fire"):
            await acct.tell(sa.Deposit(amount=5))
        delattr(rt.store, applier)
        await acct.tell(sa.Deposit(amount=7))
        assert await acct.ask(sa.GetBalance(), timeout=5) == 7
