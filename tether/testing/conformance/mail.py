"""Conformance: mailboxes — mailbox order, delays, dedup (I1) and retention."""

from __future__ import annotations

from tether.store.protocol import Store
from tether.store.records import (
    Batch,
    Park,
)
from tether.testing.conformance.support import (
    NOW,
    msg,
    owned,
    pending_ids,
    scanned,
    send,
    spawn,
    step,
)

# -- messages -----------------------------------------------------------------------------------


async def test_pending_returns_messages_in_mailbox_order(store: Store) -> None:
    """pending lists one actor's due messages in the order they were stored, up to limit."""
    await spawn(store, "a", "b")
    await send(store, msg("m-c"), msg("m-a"), msg("x-1", "b"))
    await send(store, msg("m-b", wants_reply=True, type_="Ask", payload=b"\x01\x02"))
    got = await store.pending("a", NOW, 1000)
    assert [m.msg_id for m in got] == ["m-c", "m-a", "m-b"]
    assert [m.seq for m in got] == sorted(m.seq for m in got)
    last = got[-1]
    assert (last.actor_id, last.type, last.payload, last.deliver_at) == (
        "a",
        "Ask",
        b"\x01\x02",
        NOW,
    )
    assert (last.attempts, last.errors, last.wants_reply) == (0, [], True)
    assert got[0].wants_reply is False
    assert [m.msg_id for m in await store.pending("a", NOW, 2)] == ["m-c", "m-a"]
    assert await pending_ids(store, "b") == ["x-1"]


async def test_a_messages_trace_context_is_stored_with_it_and_read_back_unchanged(
    store: Store,
) -> None:
    """traceparent (the W3C trace context a message was sent in) round-trips as written, for a
    sent message and a step's outbox alike, through pending and list_messages and through a
    park and unpark; a message sent without one reads None."""
    one = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    two = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
    fence = await owned(store, "a")
    await spawn(store, "b")
    await send(store, msg("in", traceparent=one), msg("plain"))
    await store.apply(
        Batch(steps=[step("a", fence, "in", outbox=[msg("out", "b", traceparent=two)])])
    )
    await store.apply(Batch(parks=[Park("a", fence, "plain")]))
    await send(store, msg("later", traceparent=one))
    await store.apply(Batch(parks=[Park("a", fence, "later")]))
    assert await store.unpark("later", NOW + 1)
    assert [(m.msg_id, m.traceparent) for m in await store.pending("a", NOW + 1, 10)] == [
        ("later", one)
    ]
    assert [(m.msg_id, m.traceparent) for m in await store.list_messages("a", 10)] == [
        ("plain", None),
        ("later", one),
    ]
    assert [(m.msg_id, m.traceparent) for m in await store.pending("b", NOW, 10)] == [("out", two)]


async def test_delayed_message_is_not_pending_until_due(store: Store) -> None:
    """A message with deliver_at in the future is neither pending nor new until that time."""
    await spawn(store, "a")
    await send(store, msg("late", deliver_at=NOW + 10), msg("now"))
    assert await pending_ids(store, "a", NOW) == ["now"]
    assert await scanned(store, None, NOW) == ["now"]
    # Once due, it takes its place in mailbox (storage) order, ahead of "now".
    assert await pending_ids(store, "a", NOW + 10) == ["late", "now"]
    assert await scanned(store, None, NOW + 10) == ["late", "now"]


async def test_due_between_names_actors_with_a_delayed_message_due_in_the_window(
    store: Store,
) -> None:
    """due_between(after, upto) names each actor with a message due in (after, upto], once."""
    await spawn(store, "a", "b", "c")
    await send(
        store,
        msg("a1", "a", deliver_at=NOW + 10),
        msg("a2", "a", deliver_at=NOW + 15),
        msg("b1", "b", deliver_at=NOW + 20),
        msg("c1", "c", deliver_at=NOW + 30),
    )
    assert sorted(await store.due_between(NOW, NOW + 20)) == ["a", "b"]
    assert await store.due_between(NOW + 10, NOW + 15) == ["a"]  # after is exclusive
    assert await store.due_between(NOW + 20, NOW + 29) == []
    assert await store.due_between(NOW + 29, NOW + 30) == ["c"]  # upto is inclusive


async def test_a_message_sent_without_delay_is_due_at_once_and_never_named_by_due_between(
    store: Store,
) -> None:
    """deliver_at == created_at: due for pending/scan_messages/orphaned even to a reader whose clock
    is behind the sender's, and left to scan_messages by due_between (only delayed ones there)."""
    await spawn(store, "a", "b")
    await send(
        store,
        msg("now", "a", deliver_at=NOW + 1, created_at=NOW + 1),
        msg("later", "b", deliver_at=NOW + 2, created_at=NOW),
    )
    behind = NOW  # the reader's clock, a little behind the sender's
    assert [m.msg_id for m in await store.pending("a", behind, 10)] == ["now"]
    assert await scanned(store, None, behind) == ["now"]
    assert await store.orphaned(behind, 10) == ["a"]
    assert await store.due_between(NOW - 5, NOW + 5) == ["b"]


# -- dedup (I1) ---------------------------------------------------------------------------------


async def test_same_dedup_key_twice_in_one_batch_stores_one_message(store: Store) -> None:
    """Two messages with one (actor, dedup_key) in one batch: the first is stored, the second is a duplicate."""
    await spawn(store, "a")
    result = await send(store, msg("m1", dedup_key="k"), msg("m2", dedup_key="k"))
    assert result.duplicates == {"m2": "m1"}
    assert await pending_ids(store, "a") == ["m1"]
    assert await store.find_dedup("a", "k") == "m1"


async def test_same_dedup_key_in_a_later_batch_is_a_duplicate_of_the_original(
    store: Store,
) -> None:
    """A message reusing a stored (actor, dedup_key) is not stored; duplicates names the original."""
    await spawn(store, "a")
    assert (await send(store, msg("m1", dedup_key="k"))).duplicates == {}
    result = await send(store, msg("m2", dedup_key="k"), msg("m3", dedup_key="other"))
    assert result.duplicates == {"m2": "m1"}
    assert await pending_ids(store, "a") == ["m1", "m3"]


async def test_dedup_key_still_dedups_after_the_original_was_acked(store: Store) -> None:
    """After the original message was processed (acked), its key still refuses a second copy."""
    fence = await owned(store, "a")
    await send(store, msg("m1", dedup_key="k"))
    await store.apply(Batch(steps=[step("a", fence, "m1")]))
    assert await pending_ids(store, "a") == []
    result = await send(store, msg("m2", dedup_key="k"))
    assert result.duplicates == {"m2": "m1"}
    assert await pending_ids(store, "a") == []
    assert await store.find_dedup("a", "k") == "m1"


async def test_dedup_keys_are_scoped_per_actor(store: Store) -> None:
    """The same dedup_key sent to two different actors stores both messages."""
    await spawn(store, "a", "b")
    result = await send(store, msg("m1", "a", dedup_key="k"), msg("m2", "b", dedup_key="k"))
    assert result.duplicates == {}
    assert await pending_ids(store, "a") == ["m1"]
    assert await pending_ids(store, "b") == ["m2"]


async def test_duplicate_in_a_step_outbox_is_reported_and_not_stored(store: Store) -> None:
    """Outbox messages are deduplicated like ingress: a reused key is reported, not stored."""
    fence = await owned(store, "a")
    await spawn(store, "b")
    await send(store, msg("first", "b", dedup_key="k"), msg("in"))
    out = msg("second", "b", dedup_key="k")
    result = await store.apply(Batch(steps=[step("a", fence, "in", outbox=[out])]))
    assert result.duplicates == {"second": "first"}
    assert await pending_ids(store, "b") == ["first"]


async def test_purge_forgets_old_dedup_keys_so_the_key_can_be_used_again(store: Store) -> None:
    """purge(before) removes keys created before the cutoff (keeping newer ones); the key then stores again."""
    fence = await owned(store, "a")
    await send(store, msg("old", dedup_key="k-old", created_at=NOW))
    await send(store, msg("new", dedup_key="k-new", created_at=NOW + 100))
    await store.apply(Batch(steps=[step("a", fence, "old"), step("a", fence, "new")]))
    assert await store.purge(NOW + 50) == 1
    assert await store.find_dedup("a", "k-old") is None
    assert await store.find_dedup("a", "k-new") == "new"
    result = await send(store, msg("again", dedup_key="k-old"), msg("dup", dedup_key="k-new"))
    assert result.duplicates == {"dup": "new"}
    assert await pending_ids(store, "a") == ["again"]
    assert await store.find_dedup("a", "k-old") == "again"


async def test_purge_removes_old_replies(store: Store) -> None:
    """purge(before) removes replies created before the cutoff and counts them."""
    fence = await owned(store, "a")
    await send(
        store,
        msg("q-old", wants_reply=True, created_at=NOW),
        msg("q-new", wants_reply=True, created_at=NOW + 100),
    )
    await store.apply(
        Batch(steps=[step("a", fence, "q-old", reply=b"1"), step("a", fence, "q-new", reply=b"2")])
    )
    assert await store.purge(NOW + 50) == 1
    assert [r.msg_id for r in await store.get_replies(["q-old", "q-new"])] == ["q-new"]
