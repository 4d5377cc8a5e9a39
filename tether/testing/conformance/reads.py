"""Conformance: a store's optional batched reads (``batched_reads.read_many``) answer each read
exactly as the single read would, in order. A store without ``batched_reads`` is read one call
at a time by the runtime: for it there is nothing to check."""

from __future__ import annotations

from tether.store import reads as r
from tether.store.protocol import Store
from tether.store.records import Batch, JournalRow, Snapshot
from tether.testing.conformance.support import NOW, msg, owned, send, spawn, step


async def test_batched_reads_answer_each_read_as_it_would_be_answered_alone(store: Store) -> None:
    """Records (and a missing one), snapshots, journals with after_seq and limit, and mailboxes,
    mixed and repeated in one call, each answered as its single read, in the order asked."""
    batched: r.BatchedReads | None = getattr(store, "batched_reads", None)
    if batched is None:
        return  # optional: the runtime reads such a store one call at a time
    fence = await owned(store, "a")
    await spawn(store, "b")
    await send(store, msg("m1"), msg("m2"), msg("m3"), msg("x1", "b"))
    events = [JournalRow(1, b"e1"), JournalRow(2, b"e2"), JournalRow(3, b"e3")]
    await store.apply(
        Batch(steps=[step("a", fence, "m1", events=events, snapshot=Snapshot(3, b"s3"))])
    )
    reads: list[r.Read] = [
        r.Pending("a", NOW, 1000),
        r.GetActor("a"),
        r.GetActor("missing"),
        r.LoadSnapshot("a"),
        r.LoadSnapshot("b"),
        r.LoadJournal("a", 0, 100),
        r.LoadJournal("a", 1, 1),
        r.LoadJournal("b", 0, 100),
        r.Pending("b", NOW, 1000),
        r.Pending("a", NOW, 1),
        r.GetActor("b"),
    ]
    got = await batched.read_many(reads)
    assert got == await r.read_one_by_one(store, reads)
    assert [m.msg_id for m in got[0]] == ["m2", "m3"]  # type: ignore[attr-defined]
    assert got[2] is None
    assert got[4] is None
    assert got[5] == events
    assert got[6] == [JournalRow(2, b"e2")]
    assert await batched.read_many([]) == []
