"""Conformance: parked steps — park, unpark, resolve, receipts' retention."""

from __future__ import annotations

import msgspec

from tether.store.protocol import Store
from tether.store.records import (
    PARKED,
    AttemptFailed,
    Batch,
    Claim,
    EffectWrite,
    JournalRow,
    Park,
)
from tether.testing.conformance.support import (
    LATER,
    NOW,
    effect,
    halt,
    lease,
    msg,
    owned,
    parked_with,
    pending_ids,
    scan,
    scanned,
    send,
    spawn,
    step,
)


async def test_park_sets_the_message_aside_and_writes_its_effect(store: Store) -> None:
    """A parked message (deliver_at PARKED) is not pending, not scanned, not due and does not make
    its actor orphaned; its effect row is written in the same batch; other messages flow."""
    fence = await parked_with(store, "a", "m1", "m2")
    assert await pending_ids(store, "a", LATER) == ["m2"]
    assert await scanned(store, None, LATER) == ["m2"]
    assert await store.due_between(NOW, LATER) == []
    [row] = await store.effects_of("a", "m1")
    assert (row.status, row.reason) == ("quarantined", "ambiguous")
    # Orphaned: only for its other, due message; once that is acked, the actor is not orphaned
    # even with a free lease.
    await store.remove_runtime("rt-1")
    assert await store.orphaned(LATER, 100) == ["a"]
    await store.register_runtime("rt-1", "host", 1, NOW)
    fence = await lease(store, "a") or 0
    await store.apply(Batch(steps=[step("a", fence, "m2")]))
    await store.remove_runtime("rt-1")
    assert await store.orphaned(LATER, 100) == []
    assert await store.pending("a", LATER, 100) == []


async def test_park_gives_back_the_counted_attempt_and_counts_a_park(store: Store) -> None:
    """Park decrements attempts (never below 0) and adds one to parks, which pending returns."""
    fence = await owned(store, "a")
    await send(store, msg("m1"), msg("m0"))
    await store.apply(Batch(claims=[Claim("a", fence, "m1"), Claim("a", fence, "m1")]))
    await store.apply(Batch(parks=[Park("a", fence, "m1", until=NOW + 5)]))
    [m] = [x for x in await store.pending("a", NOW + 5, 10) if x.msg_id == "m1"]
    assert (m.attempts, m.parks, m.deliver_at) == (1, 1, NOW + 5)
    await store.apply(Batch(parks=[Park("a", fence, "m1", until=NOW + 6)]))
    await store.apply(Batch(parks=[Park("a", fence, "m1", until=NOW + 7)]))
    await store.apply(Batch(parks=[Park("a", fence, "m0", until=NOW + 7)]))  # never claimed
    got = {x.msg_id: x for x in await store.pending("a", NOW + 7, 10)}
    assert (got["m1"].attempts, got["m1"].parks) == (0, 3)
    assert (got["m0"].attempts, got["m0"].parks) == (0, 1)
    # The parked message's errors are kept.
    await store.apply(Batch(failures=[AttemptFailed("a", fence, "m1", ["e1"])]))
    await store.apply(Batch(parks=[Park("a", fence, "m1")]))
    assert await pending_ids(store, "a", LATER) == ["m0"]
    assert await store.unpark("m1", NOW + 8)
    [m] = [x for x in await store.pending("a", NOW + 8, 10) if x.msg_id == "m1"]
    assert (m.errors, m.parks, m.attempts) == (["e1"], 4, 0)


async def test_park_until_a_time_makes_the_message_due_at_that_time(store: Store) -> None:
    """Park(until=t) is a delay: the message is due (and in due_between) from t on."""
    fence = await owned(store, "a")
    await send(store, msg("m1"))
    await store.apply(Batch(parks=[Park("a", fence, "m1", until=NOW + 30)]))
    assert await pending_ids(store, "a", NOW + 29) == []
    assert await store.due_between(NOW, NOW + 30) == ["a"]
    assert await pending_ids(store, "a", NOW + 30) == ["m1"]


async def test_park_of_a_message_not_in_the_mailbox_still_writes_its_effect(store: Store) -> None:
    """Parking an acked message changes no mailbox row; the effect row is written."""
    fence = await owned(store, "a")
    q = effect("gone", status="quarantined")
    result = await store.apply(Batch(parks=[Park("a", fence, "gone", effect=q)]))
    assert result.stale == set()
    assert await store.effects_of("a", "gone") == [q]
    assert await store.pending("a", LATER, 10) == []


async def test_unpark_brings_the_message_back_after_every_other_message(store: Store) -> None:
    """unpark makes a parked message due now and last in mailbox order, and ready again: a scan
    whose cursor went past everything else returns it, restored."""
    await parked_with(store, "a", "m1", "m2")
    await spawn(store, "b")
    await send(store, msg("m3"), msg("b1", "b"))
    seen, cursor = await scan(store, None, LATER)
    assert "m1" not in [m.msg_id for m in seen]
    assert await store.unpark("m1", NOW + 5) is True
    got = await store.pending("a", NOW + 5, 10)
    assert [m.msg_id for m in got] == ["m2", "m3", "m1"]
    m1 = got[-1]
    assert (m1.deliver_at, m1.attempts, m1.parks) == (NOW + 5, 0, 1)
    again, _ = await scan(store, cursor, NOW + 5)
    assert [(m.actor_id, m.msg_id, m.restored) for m in again] == [("a", "m1", True)]
    # Its sender's scan leaves out the messages it routed itself, but not one that came back.
    assert await scanned(store, cursor, NOW + 5, skip_prefix="m") == ["m1"]
    assert await store.unpark("m1", NOW + 6) is False  # not parked any more
    # The ledger row is untouched by unpark.
    [row] = await store.effects_of("a", "m1")
    assert row.status == "quarantined"


async def test_unparked_message_is_returned_past_a_cursor_beyond_acked_messages(
    store: Store,
) -> None:
    """A cursor that went past messages acked since still returns the unparked message."""
    fence = await parked_with(store, "a", "m1")
    await send(store, msg("m2"), msg("m3"))
    _, cursor = await scan(store, None, LATER)
    await store.apply(Batch(steps=[step("a", fence, "m2"), step("a", fence, "m3")]))
    assert await store.unpark("m1", NOW + 5)
    assert await scanned(store, cursor, NOW + 5) == ["m1"]


async def test_a_message_stored_after_an_unparked_one_was_acked_is_returned_next(
    store: Store,
) -> None:
    """Once the unparked message was returned and acked, a message stored after it is returned
    by the next page (the unparked message's place is never given again)."""
    fence = await parked_with(store, "a", "m1")
    await send(store, msg("m2"))
    assert await store.unpark("m1", NOW)
    seen, cursor = await scan(store, None, NOW)
    assert "m1" in [m.msg_id for m in seen]
    await store.apply(Batch(steps=[step("a", fence, "m1")]))
    await send(store, msg("m3"))
    assert await scanned(store, cursor, NOW) == ["m3"]


async def test_unpark_of_a_message_that_is_not_parked_returns_false(store: Store) -> None:
    """unpark of a due message or of an unknown id changes nothing and returns False."""
    await owned(store, "a")
    await send(store, msg("m1"), msg("m2"))
    before = await store.pending("a", NOW, 10)
    assert await store.unpark("m1", NOW) is False
    assert await store.unpark("missing", NOW) is False
    assert await store.pending("a", NOW, 10) == before


async def test_resolve_effect_replaces_the_quarantined_row_and_unparks_its_message(
    store: Store,
) -> None:
    """resolve_effect on a quarantined key writes the new row (keeping created_at) and makes
    its parked message due now, last in the mailbox, returned again past any cursor."""
    await parked_with(store, "a", "m1", "m2")
    _, cursor = await scan(store, None, LATER)
    [q] = await store.find_effects(status="quarantined")
    new = msgspec.structs.replace(
        q,
        status="retry",
        reason=None,
        history=["approved by ops"],
        created_at=NOW + 9,
        updated_at=NOW + 9,
    )
    assert await store.resolve_effect(q.key, new, NOW + 9) == new
    [row] = await store.effects_of("a", "m1")
    assert row == msgspec.structs.replace(new, created_at=q.created_at)
    assert await store.find_effects(status="quarantined") == []
    assert await pending_ids(store, "a", NOW + 9) == ["m2", "m1"]
    assert await scanned(store, cursor, NOW + 9) == ["m1"]
    # Resolved once: a second resolve of the key finds nothing quarantined.
    again = msgspec.structs.replace(new, status="aborted")
    assert await store.resolve_effect(q.key, again, NOW + 10) is None
    assert (await store.effects_of("a", "m1"))[0].status == "retry"


async def test_resolve_effect_of_a_key_that_is_not_quarantined_changes_nothing(
    store: Store,
) -> None:
    """resolve_effect returns None for an unknown key or a row in any other status, and writes
    neither the row nor the mailbox (a parked message stays parked)."""
    fence = await owned(store, "a")
    await send(store, msg("m1"), msg("m2"))
    rows = [
        effect("m1", 0, status="pending"),
        effect("m1", 1, status="done", result=b"\x01"),
        effect("m1", 2, status="retry"),
        effect("m1", 3, status="aborted", reason="no"),
    ]
    await store.apply(Batch(effects=[EffectWrite(fence, r) for r in rows]))
    await store.apply(Batch(parks=[Park("a", fence, "m1")]))
    for r in [*rows, effect("m1", 9, key="unknown")]:
        replacement = msgspec.structs.replace(r, status="aborted", reason="by hand")
        assert await store.resolve_effect(r.key, replacement, NOW + 1) is None
    assert await store.effects_of("a", "m1") == rows
    assert await pending_ids(store, "a", LATER) == ["m2"]


async def test_purge_receipts_deletes_old_finished_rows_of_acked_messages_only(
    store: Store,
) -> None:
    """purge_receipts(before) deletes done / failed / aborted rows last updated before
    ``before`` whose message has left the mailbox; it keeps pending, quarantined and retry rows,
    newer rows, and every row of a message still in the mailbox (parked or not)."""
    fence = await owned(store, "a")
    await send(store, msg("live"), msg("parked"))
    old, new = NOW, NOW + 100
    gone = [
        effect("acked", 0, status="done", updated_at=old),
        effect("acked", 1, status="failed", error="E", updated_at=old),
        effect("acked", 2, status="aborted", updated_at=old),
    ]
    kept = [
        effect("acked", 3, status="pending", updated_at=old),
        effect("acked", 4, status="quarantined", updated_at=old),
        effect("acked", 5, status="retry", updated_at=old),
        effect("acked", 6, status="done", updated_at=new),  # not old enough (before exclusive)
        effect("live", 0, status="done", updated_at=old),
        effect("parked", 0, status="done", updated_at=old),
    ]
    await store.apply(Batch(effects=[EffectWrite(fence, r) for r in [*gone, *kept]]))
    await store.apply(Batch(parks=[Park("a", fence, "parked")]))
    assert await store.purge_receipts(new) == 3
    left = await store.find_effects()
    assert sorted((e.msg_id, e.idx) for e in left) == sorted((e.msg_id, e.idx) for e in kept)
    assert await store.purge_receipts(new) == 0
    # Once "live" is acked, its receipt goes too.
    await store.apply(Batch(steps=[step("a", fence, "live")]))
    assert await store.purge_receipts(new) == 1
    assert await store.effects_of("a", "live") == []
    assert len(await store.effects_of("a", "parked")) == 1


async def test_stopping_an_actor_dead_letters_its_parked_messages(store: Store) -> None:
    """StopActor moves parked messages to dead letters with the others (an asked one gets its
    error reply); their ledger rows stay for the record."""
    fence = await owned(store, "a")
    await send(store, msg("m1", wants_reply=True), msg("m2"), msg("m3"))
    q = effect("m1", status="quarantined", reason="ambiguous")
    await store.apply(
        Batch(
            claims=[Claim("a", fence, "m1")],
            parks=[Park("a", fence, "m1", effect=q), Park("a", fence, "m3", until=NOW + 60)],
        )
    )
    await store.apply(Batch(stops=[halt("a", "retired", now=NOW + 3)]))
    dead = {d.msg_id: d for d in await store.dead_letters("a")}
    assert sorted(dead) == ["m1", "m2", "m3"]
    assert all("retired" in d.reason for d in dead.values())
    assert dead["m1"].attempts == 0
    assert await store.pending("a", LATER, 10) == []
    assert await store.unpark("m1", NOW + 4) is False
    [reply] = await store.get_replies(["m1"])
    assert reply.ok is False
    assert await store.effects_of("a", "m1") == [q]
    # The quarantined row can still be resolved; there is no message left to unpark.
    done = msgspec.structs.replace(q, status="aborted", reason="actor stopped")
    assert await store.resolve_effect(q.key, done, NOW + 5) == done
    assert await store.pending("a", LATER, 10) == []
    assert await store.dead_letters("a") != []


async def test_park_and_effect_write_in_one_batch_with_other_actors_writes(store: Store) -> None:
    """Parks and effect writes ride in a batch with steps and claims of other actors; all apply
    in the one transaction."""
    fa = await owned(store, "a")
    fb = await owned(store, "b")
    await send(store, msg("ma", "a"), msg("mb", "b"), msg("mb2", "b"))
    q = effect("ma", status="quarantined")
    await store.apply(
        Batch(
            effects=[EffectWrite(fb, effect("mb", 0, actor_id="b", status="done"))],
            parks=[Park("a", fa, "ma", effect=q)],
            steps=[step("b", fb, "mb", events=[JournalRow(1, b"e")], claim_next="mb2")],
        )
    )
    assert await pending_ids(store, "a") == []
    assert await store.effects_of("a", "ma") == [q]
    assert [e.status for e in await store.effects_of("b", "mb")] == ["done"]
    assert [(m.msg_id, m.attempts) for m in await store.pending("b", NOW, 10)] == [("mb2", 1)]
    assert await store.find_effects(status="quarantined") == [q]
    assert PARKED > LATER
