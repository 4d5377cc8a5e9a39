"""Conformance: a step's commit (I2) — journal, snapshot, reply, ack, outbox, claims."""

from __future__ import annotations

import msgspec

from tether.store.protocol import Store
from tether.store.records import (
    Batch,
    Claim,
    EffectWrite,
    JournalRow,
    Snapshot,
)
from tether.testing.conformance.support import (
    LATER,
    NOW,
    effect,
    halt,
    journal_seqs,
    msg,
    owned,
    pending_ids,
    scanned,
    send,
    spawn,
    step,
    take_over,
)

# -- step commit (I2) ---------------------------------------------------------------------------


async def test_step_commit_appends_events_to_the_journal(store: Store) -> None:
    """A step's events are appended to the actor's journal; load_journal honours after_seq and limit."""
    fence = await owned(store, "a")
    await spawn(store, "b")
    await send(store, msg("m1"), msg("m2"))
    ev = [JournalRow(1, b"e1"), JournalRow(2, b"e2")]
    await store.apply(Batch(steps=[step("a", fence, "m1", events=ev)]))
    await store.apply(Batch(steps=[step("a", fence, "m2", events=[JournalRow(3, b"e3")])]))
    assert await store.load_journal("a", 0, 100) == [*ev, JournalRow(3, b"e3")]
    assert await store.load_journal("a", 1, 100) == [JournalRow(2, b"e2"), JournalRow(3, b"e3")]
    assert await store.load_journal("a", 0, 2) == ev
    assert await store.load_journal("a", 3, 100) == []
    assert await store.load_journal("b", 0, 100) == []


async def test_step_commit_moves_the_actors_head_seq_to_its_last_event(store: Store) -> None:
    """``ActorRecord.head_seq`` is the seq of the actor's last committed event (0 before any),
    moved by the step that commits it, in the same batch as other actors' steps and steps
    without events; a step whose fence is stale moves nothing."""
    fence = await owned(store, "a")
    other = await owned(store, "b")
    assert [(await store.get_actor(x)).head_seq for x in "ab"] == [0, 0]  # type: ignore[union-attr]
    await send(store, msg("m1"), msg("m2"), msg("m3"), msg("n1", "b"))
    await store.apply(
        Batch(
            steps=[
                step("a", fence, "m1", events=[JournalRow(1, b"e1"), JournalRow(2, b"e2")]),
                step("a", fence, "m2", events=[JournalRow(3, b"e3")]),
                step("b", other, "n1", events=[JournalRow(1, b"f1")]),
            ]
        )
    )
    await store.apply(Batch(steps=[step("a", fence, "m3")]))  # no events: the head stays
    assert [(await store.get_actor(x)).head_seq for x in "ab"] == [3, 1]  # type: ignore[union-attr]
    assert [r.head_seq for r in await store.list_actors()] == [3, 1]
    await send(store, msg("m4"))
    result = await store.apply(
        Batch(steps=[step("a", fence + 1, "m4", events=[JournalRow(4, b"e4")])])
    )
    assert result.stale == {"a"}
    assert (await store.get_actor("a")).head_seq == 3  # type: ignore[union-attr]


async def test_step_commit_stores_the_snapshot(store: Store) -> None:
    """A step with a snapshot stores it; a later snapshot replaces it; none before the first."""
    fence = await owned(store, "a")
    await send(store, msg("m1"), msg("m2"))
    assert await store.load_snapshot("a") is None
    await store.apply(
        Batch(
            steps=[
                step("a", fence, "m1", events=[JournalRow(1, b"e")], snapshot=Snapshot(1, b"s1"))
            ]
        )
    )
    assert await store.load_snapshot("a") == Snapshot(1, b"s1")
    await store.apply(
        Batch(
            steps=[
                step("a", fence, "m2", events=[JournalRow(2, b"e")], snapshot=Snapshot(2, b"s2"))
            ]
        )
    )
    assert await store.load_snapshot("a") == Snapshot(2, b"s2")


async def test_step_commit_stores_a_reply_only_when_given(store: Store) -> None:
    """A step with a reply stores Reply(ok=True, payload); a step without one stores none."""
    fence = await owned(store, "a")
    await send(store, msg("ask", wants_reply=True), msg("tell"))
    await store.apply(
        Batch(steps=[step("a", fence, "ask", reply=b"answer"), step("a", fence, "tell")])
    )
    replies = await store.get_replies(["ask", "tell", "never-sent"])
    assert [(r.msg_id, r.ok, r.payload) for r in replies] == [("ask", True, b"answer")]


async def test_step_commit_acks_the_message(store: Store) -> None:
    """The processed message leaves the mailbox; the others stay, in order."""
    fence = await owned(store, "a")
    await send(store, msg("m1"), msg("m2"), msg("m3"))
    await store.apply(Batch(steps=[step("a", fence, "m2")]))
    assert await pending_ids(store, "a") == ["m1", "m3"]
    assert await scanned(store, None, LATER) == ["m1", "m3"]


async def test_step_commit_stores_the_outbox_messages(store: Store) -> None:
    """Messages sent during a step are stored with it, due or delayed as given."""
    fence = await owned(store, "a")
    await spawn(store, "b")
    await send(store, msg("in"))
    outbox = [msg("o1", "b"), msg("o2", "b", deliver_at=NOW + 60, wants_reply=True)]
    await store.apply(Batch(steps=[step("a", fence, "in", outbox=outbox)]))
    assert await pending_ids(store, "b", NOW) == ["o1"]
    got = await store.pending("b", NOW + 60, 100)
    assert [(m.msg_id, m.deliver_at, m.wants_reply) for m in got] == [
        ("o1", NOW, False),
        ("o2", NOW + 60, True),
    ]


async def test_step_commit_claim_next_counts_an_attempt_on_that_message(store: Store) -> None:
    """claim_next increments the attempts of the named message and of no other."""
    fence = await owned(store, "a")
    await send(store, msg("m1"), msg("m2"), msg("m3"))
    await store.apply(Batch(steps=[step("a", fence, "m1", claim_next="m2")]))
    got = {m.msg_id: m.attempts for m in await store.pending("a", NOW, 100)}
    assert got == {"m2": 1, "m3": 0}


async def test_step_commit_settles_its_ledger_rows_with_it_unless_stale(store: Store) -> None:
    """The ledger rows a step carries (a retry it went on without, settled as failed) are
    written in the step's own transaction, as an ``EffectWrite`` of the slot would write
    them; a stale step writes none of them (I2, I8)."""
    fence = await owned(store, "a")
    await send(store, msg("m1"), msg("m2"))
    left = [effect("m1", 0, status="retry", attempts=2), effect("m2", 0, status="retry")]
    await store.apply(Batch(effects=[EffectWrite(fence, row) for row in left]))
    settled = msgspec.structs.replace(
        left[0], status="failed", error="attempt 2 was not made", updated_at=NOW + 5
    )
    committed = msgspec.structs.replace(
        step("a", fence, "m1", events=[JournalRow(1, b"e1")]), effects=[settled]
    )
    assert (await store.apply(Batch(steps=[committed]))).stale == set()
    assert await store.effects_of("a", "m1") == [settled]
    assert await store.load_journal("a", 0, 10) == [JournalRow(1, b"e1")]
    assert await pending_ids(store, "a") == ["m2"]
    await take_over(store, "a")
    late = msgspec.structs.replace(left[1], status="failed", error="not made")
    stale = msgspec.structs.replace(step("a", fence, "m2"), effects=[late])
    assert (await store.apply(Batch(steps=[stale]))).stale == {"a"}
    assert await store.effects_of("a", "m2") == [left[1]]
    assert await pending_ids(store, "a") == ["m2"]


async def test_claim_counts_a_delivery_attempt(store: Store) -> None:
    """Each Claim increments the message's attempts by one."""
    fence = await owned(store, "a")
    await send(store, msg("m1"), msg("m2"))
    await store.apply(Batch(claims=[Claim("a", fence, "m1")]))
    await store.apply(Batch(claims=[Claim("a", fence, "m1")]))
    got = {m.msg_id: m.attempts for m in await store.pending("a", NOW, 100)}
    assert got == {"m1": 2, "m2": 0}


async def test_step_commit_with_a_stop_stops_the_actor_and_dead_letters_the_rest(
    store: Store,
) -> None:
    """A step carrying a stop commits, stops the actor, and moves its remaining messages to dead letters."""
    fence = await owned(store, "a")
    await send(store, msg("m1"), msg("m2"), msg("m3", deliver_at=NOW + 60))
    await store.apply(
        Batch(steps=[step("a", fence, "m1", events=[JournalRow(1, b"e")], stop=halt("a", "done"))])
    )
    rec = await store.get_actor("a")
    assert rec is not None
    assert (rec.status, rec.stop_reason) == ("stopped", "done")
    assert rec.fence > fence
    assert await journal_seqs(store, "a") == [1]
    assert await pending_ids(store, "a") == []
    dead = await store.dead_letters("a")
    assert sorted(d.msg_id for d in dead) == ["m2", "m3"]
    assert all("done" in d.reason and d.created_at == NOW for d in dead)
