"""Conformance: ``reuse_id`` (a stopped actor's id given to a new actor, clean) and a dead
letter's notice stored with it."""

from __future__ import annotations

import msgspec

from tether.store.protocol import Store
from tether.store.records import (
    ApprovalRecord,
    AttemptFailed,
    Batch,
    Claim,
    EffectWrite,
    JournalRow,
    Park,
    Revive,
    Snapshot,
    Watch,
)
from tether.testing.conformance.support import (
    NOW,
    effect,
    halt,
    journal_seqs,
    lease,
    msg,
    owned,
    pending_ids,
    record,
    send,
    spawn,
    step,
    take_over,
)

# -- reuse_id (add_child of an id whose actor has stopped) --------------------------------------


def approval_of(actor_id: str, msg_id: str, request_id: str) -> ApprovalRecord:
    return ApprovalRecord(
        request_id=request_id,
        actor_id=actor_id,
        msg_id=msg_id,
        idx=0,
        tool="refund",
        tool_path="tests.tools:refund",
        args=msgspec.msgpack.encode({"cents": 5}),
        fingerprint="f" * 16,
        reason="requires approval",
        context=msgspec.msgpack.encode({}),
        deadline=NOW + 3600,
        on_timeout="reject",
        quorum=1,
        created_at=NOW,
    )


async def test_reuse_id_gives_a_stopped_actors_id_to_a_new_actor_that_inherits_nothing(
    store: Store,
) -> None:
    """The predecessor's journal, snapshot, ledger, approvals, dedup keys and the watches it held
    are gone; a message sent to it after its stop goes to dead letters; its dead letters stay;
    the new record is active under the predecessor's fence, which only grows."""
    fence = await owned(store, "a")
    await spawn(store, "b")
    await send(store, msg("m1", dedup_key="k1"), msg("m2"), msg("m3"))
    await store.apply(
        Batch(
            steps=[
                step(
                    "a",
                    fence,
                    "m1",
                    events=[JournalRow(1, b"e1"), JournalRow(2, b"e2")],
                    snapshot=Snapshot(2, b"s"),
                )
            ],
            effects=[EffectWrite(fence, effect("m1", status="done", result=b"\x01"))],
            watches=[Watch(watcher="a", watched="b")],
        )
    )
    await store.apply(Batch(claims=[Claim("a", fence, "m2")]))
    await store.apply(
        Batch(parks=[Park("a", fence, "m2", approval=approval_of("a", "m2", "req-1"))])
    )
    await store.apply(Batch(stops=[halt("a", "removed", now=NOW + 2)]))
    stopped = await store.get_actor("a")
    assert stopped is not None
    await send(store, msg("late", wants_reply=True))  # stored by a process that missed the stop
    successor = msgspec.structs.replace(
        record("a", parent_id="sup", class_path="tests.sample:Other"), created_at=NOW + 10
    )

    assert await store.reuse_id(successor) == []

    rec = await store.get_actor("a")
    assert rec is not None
    assert (rec.status, rec.stop_reason, rec.class_path, rec.parent_id, rec.created_at) == (
        "active",
        None,
        "tests.sample:Other",
        "sup",
        NOW + 10,
    )
    assert rec.fence == stopped.fence
    assert rec.head_seq == 0  # its predecessor's journal is gone, and its head with it
    assert await journal_seqs(store, "a") == []
    assert await store.load_snapshot("a") is None
    assert await store.find_effects(actor_id="a") == []
    assert await store.find_approvals(actor_id="a") == []
    assert await store.find_dedup("a", "k1") is None
    assert await store.watchers("b") == []
    dead = {d.msg_id: d for d in await store.dead_letters("a")}
    assert sorted(dead) == ["late", "m2", "m3"]
    assert "went to a new actor" in dead["late"].reason
    [reply] = await store.get_replies(["late"])
    assert reply.ok is False
    assert await pending_ids(store, "a") == []
    assert await lease(store, "a", "rt-1") == stopped.fence + 1


async def test_reuse_id_erases_its_dependents_state_and_fences_out_their_owner(
    store: Store,
) -> None:
    """A dependent (a session's guard) keeps its record but loses its journal, snapshot and the
    watches it held, and its fence grows: an owner still holding its old state is stale."""
    fence = await owned(store, "a")
    guard = await owned(store, "a/loops")
    await spawn(store, "b")
    await store.apply(
        Batch(
            steps=[
                step(
                    "a/loops", guard, "g1", events=[JournalRow(1, b"g")], snapshot=Snapshot(1, b"s")
                )
            ],
            watches=[Watch(watcher="a/loops", watched="b")],
        )
    )
    await store.apply(Batch(stops=[halt("a", "removed")]))
    assert await store.reuse_id(record("a"), dependents=["a/loops", "never-spawned"]) == []
    assert await journal_seqs(store, "a/loops") == []
    assert await store.load_snapshot("a/loops") is None
    assert await store.watchers("b") == []
    rec = await store.get_actor("a/loops")
    assert rec is not None
    assert (rec.status, rec.lease_owner, rec.fence, rec.head_seq) == (
        "active",
        None,
        guard + 1,
        0,
    )
    assert await store.get_actor("never-spawned") is None
    result = await store.apply(Batch(claims=[Claim("a/loops", guard, "g1")]))
    assert result.stale == {"a/loops"}
    assert fence < (await store.get_actor("a")).fence  # type: ignore[union-attr]


async def test_reuse_id_of_a_missing_or_active_actor_changes_nothing(store: Store) -> None:
    """Only a stopped or failed actor's id can be given to a new actor."""
    fence = await owned(store, "a")
    await store.apply(Batch(steps=[step("a", fence, "x", events=[JournalRow(1, b"e")])]))
    [why] = await store.reuse_id(record("a", class_path="tests.sample:Other"))
    assert "'a' is active" in why
    [why] = await store.reuse_id(record("ghost"))
    assert "no actor 'ghost'" in why
    assert await store.get_actor("ghost") is None
    rec = await store.get_actor("a")
    assert rec is not None
    assert rec.class_path == "tests.sample:Counter"
    assert await journal_seqs(store, "a") == [1]


async def test_reuse_id_is_refused_while_an_effect_has_no_recorded_outcome(store: Store) -> None:
    """A quarantined row waits for a person (resolving it frees the id); a pending intent of a
    stopped actor can never be settled: both are named, and nothing is erased."""
    fence = await owned(store, "a")
    await send(store, msg("m1"), msg("m2"))
    q = effect("m1", status="quarantined", reason="ambiguous")
    p = effect("m2", status="pending", tool="charge")
    await store.apply(
        Batch(
            steps=[step("a", fence, "x", events=[JournalRow(1, b"e")])],
            effects=[EffectWrite(fence, q), EffectWrite(fence, p)],
        )
    )
    await store.apply(Batch(stops=[halt("a", "removed")]))
    quarantined, pending = await store.reuse_id(record("a"))
    assert q.key in quarantined
    assert "resolve it first" in quarantined
    assert p.key in pending
    assert "(charge)" in pending
    assert "cannot be used again" in pending
    rec = await store.get_actor("a")
    assert rec is not None
    assert rec.status == "stopped"
    assert await journal_seqs(store, "a") == [1]
    assert len(await store.find_effects(actor_id="a")) == 2

    done = msgspec.structs.replace(q, status="done", result=b"\x01")
    assert await store.resolve_effect(q.key, done, NOW + 1) == done
    [still] = await store.reuse_id(record("a"))
    assert p.key in still
    # Revived and delivered its message again, the actor records the call's outcome.
    await store.apply(Batch(revives=[Revive("a")]))
    again = await lease(store, "a", "rt-1")
    assert again is not None
    settled = msgspec.structs.replace(p, status="failed", error="E: no")
    await store.apply(Batch(effects=[EffectWrite(again, settled)]))
    await store.apply(Batch(stops=[halt("a", "removed again")]))
    assert await store.reuse_id(record("a")) == []
    assert await store.find_effects(actor_id="a") == []


# -- a dead letter's notice ---------------------------------------------------------------------


async def test_a_dead_letters_notice_is_stored_with_it_once_and_never_by_a_stale_owner(
    store: Store,
) -> None:
    """``AttemptFailed.notice`` (the actor's ``DeadLettered``) is inserted in the transaction
    that moves the message; its dedup key makes a second move's notice a duplicate; a stale
    failure stores nothing."""
    fence = await owned(store, "a")
    await send(store, msg("m1"), msg("m2"))
    notice = msg("n1", type_="DeadLettered", dedup_key="dead-letter:m1")
    failed = AttemptFailed(
        "a", fence, "m1", ["e"], dead_letter_reason="poison", now=NOW, notice=notice
    )
    await store.apply(Batch(failures=[failed]))
    assert await pending_ids(store, "a") == ["m2", "n1"]
    again = msg("n2", type_="DeadLettered", dedup_key="dead-letter:m1")
    result = await store.apply(
        Batch(failures=[msgspec.structs.replace(failed, msg_id="m2", notice=again)])
    )
    assert result.duplicates == {"n2": "n1"}
    assert await pending_ids(store, "a") == ["n1"]
    await take_over(store, "a")  # "a"'s fence is stale now
    await send(store, msg("m3"))
    stale = AttemptFailed(
        "a", fence, "m3", ["e"], dead_letter_reason="poison", now=NOW, notice=msg("n3")
    )
    assert (await store.apply(Batch(failures=[stale]))).stale == {"a"}
    assert await pending_ids(store, "a") == ["n1", "m3"]
