"""Conformance: failures and dead letters (I7), stops, revives and death watch."""

from __future__ import annotations

import msgspec

from tether.store.protocol import Store
from tether.store.records import (
    AttemptFailed,
    Batch,
    Claim,
    Revive,
    Watch,
)
from tether.testing.conformance.support import (
    LATER,
    NOW,
    halt,
    lease,
    msg,
    owned,
    pending_ids,
    scan,
    send,
    spawn,
    step,
    take_over,
)

# -- failures and dead letters (I7) -------------------------------------------------------------


async def test_attempt_failed_records_the_error_history_on_the_message(store: Store) -> None:
    """A failure without a reason replaces the message's errors and keeps it pending."""
    fence = await owned(store, "a")
    await send(store, msg("m1"))
    await store.apply(Batch(claims=[Claim("a", fence, "m1")]))
    await store.apply(Batch(failures=[AttemptFailed("a", fence, "m1", ["e1"], now=NOW)]))
    await store.apply(Batch(failures=[AttemptFailed("a", fence, "m1", ["e1", "e2"], now=NOW)]))
    [m] = await store.pending("a", NOW, 10)
    assert (m.msg_id, m.errors, m.attempts) == ("m1", ["e1", "e2"], 1)
    assert await store.dead_letters() == []


async def test_attempt_failed_with_a_reason_moves_the_message_to_dead_letters(
    store: Store,
) -> None:
    """A failure with dead_letter_reason moves the message to dead letters with errors, attempts and reason."""
    fence = await owned(store, "a")
    await send(store, msg("m1", type_="Charge", payload=b"pay"), msg("m2"))
    await store.apply(Batch(claims=[Claim("a", fence, "m1")]))
    await store.apply(Batch(claims=[Claim("a", fence, "m1")]))
    await store.apply(
        Batch(
            failures=[
                AttemptFailed(
                    "a", fence, "m1", ["e1", "e2"], dead_letter_reason="poison", now=NOW + 7
                )
            ]
        )
    )
    assert await pending_ids(store, "a") == ["m2"]
    [d] = await store.dead_letters()
    assert (d.msg_id, d.actor_id, d.type, d.payload) == ("m1", "a", "Charge", b"pay")
    assert (d.attempts, d.errors, d.reason, d.created_at) == (2, ["e1", "e2"], "poison", NOW + 7)
    assert await store.dead_letters("a") == [d]
    assert await store.dead_letters("other") == []
    assert await store.get_replies(["m1"]) == []  # nobody asked: no reply


async def test_dead_lettering_an_asked_message_answers_the_ask_with_its_error_history(
    store: Store,
) -> None:
    """A dead-lettered ask gets Reply(ok=False) whose payload is the encoded error history (list[str])."""
    fence = await owned(store, "a")
    await send(store, msg("q", wants_reply=True))
    await store.apply(
        Batch(
            failures=[
                AttemptFailed("a", fence, "q", ["e1", "e2"], dead_letter_reason="poison", now=NOW)
            ]
        )
    )
    [reply] = await store.get_replies(["q"])
    assert (reply.msg_id, reply.ok) == ("q", False)
    history = msgspec.msgpack.decode(reply.payload, type=list[str])
    # store.Reply: "else the encoded error history (list[str])"; the runtime turns it into
    # MessageDeadLettered(errors=...), whose message reports len(errors) attempts and the last one.
    assert history[:2] == ["e1", "e2"]


async def test_retry_dead_letter_puts_it_back_at_the_end_of_the_mailbox(store: Store) -> None:
    """retry_dead_letter returns the letter and re-queues the message last, with attempts 0 and no errors."""
    fence = await owned(store, "a")
    await send(store, msg("m1", dedup_key="k"))
    await store.apply(Batch(claims=[Claim("a", fence, "m1")]))
    await store.apply(
        Batch(failures=[AttemptFailed("a", fence, "m1", ["e"], dead_letter_reason="x", now=NOW)])
    )
    await send(store, msg("m2"), msg("m3"))
    _, cursor = await scan(store, None, NOW + 10)
    letter = await store.retry_dead_letter("m1", NOW + 10)
    assert letter is not None
    assert (letter.msg_id, letter.attempts, letter.errors, letter.reason) == ("m1", 1, ["e"], "x")
    assert await store.dead_letters() == []
    got = await store.pending("a", NOW + 10, 10)
    assert [m.msg_id for m in got] == ["m2", "m3", "m1"]
    assert [m.seq for m in got] == sorted(m.seq for m in got)
    assert (got[-1].attempts, got[-1].errors, got[-1].payload) == (0, [], b"m1")
    # Ready again, restored: whoever sent it first must pick it up again.
    again, _ = await scan(store, cursor, NOW + 10)
    assert [(m.msg_id, m.restored) for m in again] == [("m1", True)]


async def test_discard_dead_letter_removes_it(store: Store) -> None:
    """discard_dead_letter deletes the letter for good and returns True."""
    fence = await owned(store, "a")
    await send(store, msg("m1"))
    await store.apply(
        Batch(failures=[AttemptFailed("a", fence, "m1", ["e"], dead_letter_reason="x", now=NOW)])
    )
    assert await store.discard_dead_letter("m1") is True
    assert await store.dead_letters() == []
    assert await pending_ids(store, "a") == []
    assert await store.discard_dead_letter("m1") is False


async def test_unknown_dead_letter_ids_return_none_or_false(store: Store) -> None:
    """retry of an unknown id returns None and discard returns False; nothing is stored."""
    await spawn(store, "a")
    await send(store, msg("live"))
    assert await store.retry_dead_letter("nope", NOW) is None
    assert await store.retry_dead_letter("live", NOW) is None  # pending, not dead
    assert await store.discard_dead_letter("nope") is False
    assert await pending_ids(store, "a") == ["live"]


# -- StopActor ----------------------------------------------------------------------------------


async def test_stop_actor_marks_it_stopped_and_dead_letters_its_pending_messages(
    store: Store,
) -> None:
    """StopActor sets status and stop_reason, bumps the fence, frees the lease, dead-letters the mailbox."""
    fence = await owned(store, "a")
    await spawn(store, "b")
    await send(
        store,
        msg("m1"),
        msg("q", wants_reply=True),
        msg("later", deliver_at=NOW + 60),
        msg("other", "b"),
    )
    await store.apply(Batch(stops=[halt("a", "retired", now=NOW + 3)]))
    rec = await store.get_actor("a")
    assert rec is not None
    assert (rec.status, rec.stop_reason, rec.lease_owner) == ("stopped", "retired", None)
    assert rec.fence == fence + 1
    assert await pending_ids(store, "a") == []
    assert await pending_ids(store, "b") == ["other"]
    dead = {d.msg_id: d for d in await store.dead_letters("a")}
    assert sorted(dead) == ["later", "m1", "q"]
    assert all("retired" in d.reason and d.created_at == NOW + 3 for d in dead.values())
    [reply] = await store.get_replies(["q", "m1"])
    assert (reply.msg_id, reply.ok) == ("q", False)
    # The old owner's fence no longer commits.
    result = await store.apply(Batch(claims=[Claim("a", fence, "m1")]))
    assert result.stale == {"a"}


async def test_stop_actor_with_status_failed_marks_it_failed(store: Store) -> None:
    """StopActor(status="failed") stores that status; the actor takes no lease, its mail is dead-lettered."""
    await owned(store, "a")
    await send(store, msg("m1"))
    await store.apply(Batch(stops=[halt("a", "gave up", status="failed")]))
    rec = await store.get_actor("a")
    assert rec is not None
    assert (rec.status, rec.stop_reason) == ("failed", "gave up")
    [letter] = await store.dead_letters("a")
    assert letter.msg_id == "m1"
    assert "gave up" in letter.reason
    assert await lease(store, "a", "rt-1") is None


# -- Revive and Watch (supervision) -------------------------------------------------------------


async def test_revive_makes_a_stopped_actor_active_and_leasable_with_a_higher_fence(
    store: Store,
) -> None:
    """Revive sets status active and clears stop_reason; the fence never goes back, so old owners stay fenced."""
    old = await owned(store, "a")
    await store.apply(Batch(stops=[halt("a", "crashed", status="failed")]))
    stopped = await store.get_actor("a")
    assert stopped is not None
    await store.apply(Batch(revives=[Revive("a")]))
    rec = await store.get_actor("a")
    assert rec is not None
    assert (rec.status, rec.stop_reason, rec.lease_owner) == ("active", None, None)
    assert rec.fence == stopped.fence
    new = await lease(store, "a", "rt-2")
    assert new is not None
    assert new > stopped.fence > old
    await send(store, msg("m1"))
    assert (await store.apply(Batch(claims=[Claim("a", old, "m1")]))).stale == {"a"}


async def test_revive_of_a_missing_actor_creates_nothing(store: Store) -> None:
    """Revive of an id never spawned is a no-op."""
    await store.apply(Batch(revives=[Revive("ghost")]))
    assert await store.get_actor("ghost") is None


async def test_watch_delivers_one_terminated_notice_when_the_watched_actor_stops(
    store: Store,
) -> None:
    """A watcher gets the StopActor's notice as a "Terminated" message in its mailbox, once; the watch is used up."""
    await spawn(store, "watched", "w1", "w2")
    await store.apply(
        Batch(
            watches=[
                Watch("w1", "watched"),
                Watch("w2", "watched"),
                Watch("w1", "watched"),  # twice: still one watch
            ]
        )
    )
    assert await store.watchers("watched") == ["w1", "w2"]
    assert await store.watchers("w1") == []
    await store.apply(Batch(stops=[halt("watched", "bye", now=NOW + 5)]))
    for watcher in ("w1", "w2"):
        [notice] = await store.pending(watcher, NOW + 5, 10)
        assert (notice.type, notice.payload, notice.deliver_at) == (
            "Terminated",
            b"terminated watched",
            NOW + 5,
        )
        assert (notice.attempts, notice.wants_reply) == (0, False)
    assert await store.watchers("watched") == []
    assert await store.dead_letters("w1") == []
    # A second stop (e.g. of a revived actor) notifies no one: the watch was used up.
    await store.apply(Batch(stops=[halt("watched", "again", now=NOW + 6)]))
    assert len(await store.pending("w1", LATER, 10)) == 1


async def test_watch_notice_is_sent_when_an_actor_stops_itself_in_a_step(store: Store) -> None:
    """A step that stops its actor delivers the Terminated notice in the same transaction."""
    fence = await owned(store, "a")
    await spawn(store, "sup")
    await store.apply(Batch(watches=[Watch("sup", "a")]))
    await send(store, msg("m1"))
    await store.apply(Batch(steps=[step("a", fence, "m1", stop=halt("a", "done"))]))
    [notice] = await store.pending("sup", NOW, 10)
    assert (notice.type, notice.payload) == ("Terminated", b"terminated a")
    found, _ = await scan(store, None, NOW)
    assert [m.msg_id for m in found if m.actor_id == "sup"] == [notice.msg_id]


async def test_stale_step_with_a_stop_neither_stops_nor_notifies(store: Store) -> None:
    """A stop carried by a stale step is rejected with it: the actor stays active, no notice is sent."""
    old = await owned(store, "a", "rt-1")
    new = await take_over(store, "a")
    await spawn(store, "sup")
    await store.apply(Batch(watches=[Watch("sup", "a")]))
    await send(store, msg("m1"), msg("m2"))
    result = await store.apply(Batch(steps=[step("a", old, "m1", stop=halt("a", "done"))]))
    assert result.stale == {"a"}
    rec = await store.get_actor("a")
    assert rec is not None
    assert (rec.status, rec.fence, rec.lease_owner) == ("active", new, "rt-2")
    assert await pending_ids(store, "a") == ["m1", "m2"]
    assert await store.pending("sup", LATER, 10) == []
    assert await store.watchers("a") == ["sup"]
