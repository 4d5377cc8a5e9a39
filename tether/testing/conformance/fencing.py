"""Conformance: fencing is inside the write (I8).

Every fenced write (steps, claims, failures, releases, effect intents and receipts, parks) is
checked against the actor's current fence in the transaction that writes it: a stale owner's
writes are refused, each on its own, while the rest of its batch commits, and a takeover that
commits first is never followed by a stale write landing after it (``tether.store.protocol``).
"""

from __future__ import annotations

import anyio

from tether.store.protocol import Store
from tether.store.records import (
    AttemptFailed,
    Batch,
    Claim,
    EffectRecord,
    EffectWrite,
    JournalRow,
    LeaseRelease,
    Park,
    Snapshot,
)
from tether.testing.conformance.support import (
    LATER,
    NOW,
    effect,
    journal_seqs,
    lease,
    msg,
    owned,
    pending_ids,
    send,
    spawn,
    step,
    take_over,
)

# -- a stale fence, write by write ------------------------------------------------------------


async def test_stale_step_commit_is_rejected_without_effect(store: Store) -> None:
    """A step with an old fence is reported stale and changes nothing; the batch's other writes apply."""
    old = await owned(store, "a", "rt-1")
    new = await take_over(store, "a")
    assert new == old + 1
    fb = await owned(store, "b", "rt-1")
    await spawn(store, "c")
    await send(store, msg("m1", "a", dedup_key="k"), msg("mb", "b"))
    result = await store.apply(
        Batch(
            messages=[msg("ingress", "c")],
            steps=[
                step(
                    "a",
                    old,
                    "m1",
                    events=[JournalRow(1, b"e")],
                    outbox=[msg("out", "c")],
                    reply=b"r",
                    snapshot=Snapshot(1, b"s"),
                ),
                step("b", fb, "mb", events=[JournalRow(1, b"eb")]),
            ],
        )
    )
    assert result.stale == {"a"}
    assert await journal_seqs(store, "a") == []
    assert await store.load_snapshot("a") is None
    assert await store.get_replies(["m1"]) == []
    assert await pending_ids(store, "a") == ["m1"]
    assert await pending_ids(store, "c") == ["ingress"]  # the stale step's outbox is not stored
    assert await journal_seqs(store, "b") == [1]
    assert await pending_ids(store, "b") == []
    rec = await store.get_actor("a")
    assert rec is not None
    assert (rec.fence, rec.lease_owner) == (new, "rt-2")


async def test_stale_claim_is_rejected_without_effect(store: Store) -> None:
    """A claim with an old fence is reported stale and counts no attempt; other claims apply."""
    old = await owned(store, "a", "rt-1")
    await take_over(store, "a")
    fb = await owned(store, "b", "rt-1")
    await send(store, msg("ma", "a"), msg("mb", "b"))
    result = await store.apply(Batch(claims=[Claim("a", old, "ma"), Claim("b", fb, "mb")]))
    assert result.stale == {"a"}
    assert [m.attempts for m in await store.pending("a", NOW, 10)] == [0]
    assert [m.attempts for m in await store.pending("b", NOW, 10)] == [1]


async def test_stale_attempt_failure_is_rejected_without_effect(store: Store) -> None:
    """A failure with an old fence records no error and dead-letters nothing."""
    old = await owned(store, "a", "rt-1")
    await take_over(store, "a")
    await send(store, msg("m1", wants_reply=True), msg("m2"))
    result = await store.apply(
        Batch(
            failures=[
                AttemptFailed("a", old, "m1", ["boom"], dead_letter_reason="poison", now=NOW),
                AttemptFailed("a", old, "m2", ["boom"], now=NOW),
            ]
        )
    )
    assert result.stale == {"a"}
    got = await store.pending("a", NOW, 10)
    assert [(m.msg_id, m.errors) for m in got] == [("m1", []), ("m2", [])]
    assert await store.dead_letters() == []
    assert await store.get_replies(["m1"]) == []


async def test_stale_release_is_rejected_without_effect(store: Store) -> None:
    """A release with an old fence leaves the new owner's lease in place."""
    old = await owned(store, "a", "rt-1")
    new = await take_over(store, "a")
    before = await store.get_actor("a")
    result = await store.apply(Batch(releases=[LeaseRelease("a", old)]))
    assert result.stale == {"a"}
    rec = await store.get_actor("a")
    assert rec == before
    assert rec is not None
    assert (rec.fence, rec.lease_owner) == (new, "rt-2")


async def test_fenced_write_for_a_missing_actor_is_stale(store: Store) -> None:
    """A fenced write naming an actor that does not exist is rejected as stale."""
    await spawn(store, "a")
    await send(store, msg("m1"))
    result = await store.apply(Batch(claims=[Claim("ghost", 0, "m1")]))
    assert result.stale == {"ghost"}
    assert [m.attempts for m in await store.pending("a", NOW, 10)] == [0]


async def test_stale_effect_write_is_rejected_without_effect(store: Store) -> None:
    """An EffectWrite under an old fence records nothing (neither insert nor update); the
    batch's other writes apply."""
    old = await owned(store, "a", "rt-1")
    await store.apply(Batch(effects=[EffectWrite(old, effect("m1", 0))]))
    await take_over(store, "a")
    fb = await owned(store, "b", "rt-2")
    result = await store.apply(
        Batch(
            effects=[
                EffectWrite(old, effect("m1", 0, status="done", result=b"\x01")),
                EffectWrite(old, effect("m1", 1)),
                EffectWrite(fb, effect("mb", 0, actor_id="b")),
            ]
        )
    )
    assert result.stale == {"a"}
    assert await store.effects_of("a", "m1") == [effect("m1", 0)]
    assert await store.effects_of("b", "mb") == [effect("mb", 0, actor_id="b")]
    # a missing actor is stale too
    result = await store.apply(Batch(effects=[EffectWrite(0, effect("m1", actor_id="ghost"))]))
    assert result.stale == {"ghost"}
    assert await store.find_effects(actor_id="ghost") == []


async def test_stale_park_is_rejected_without_effect(store: Store) -> None:
    """A Park under an old fence neither parks the message, nor gives back its attempt, nor
    counts a park, nor writes its effect row."""
    old = await owned(store, "a", "rt-1")
    await send(store, msg("m1"))
    await store.apply(Batch(claims=[Claim("a", old, "m1")]))
    await take_over(store, "a")
    q = effect("m1", status="quarantined", reason="ambiguous")
    result = await store.apply(Batch(parks=[Park("a", old, "m1", effect=q)]))
    assert result.stale == {"a"}
    [m] = await store.pending("a", NOW, 10)
    assert (m.msg_id, m.deliver_at, m.attempts, m.parks) == ("m1", NOW, 1, 0)
    assert await store.effects_of("a", "m1") == []
    assert await store.find_effects(status="quarantined") == []


# -- the whole of a stale owner's batch --------------------------------------------------------


async def test_a_stale_owners_every_write_is_refused_while_the_rest_of_its_batch_commits(
    store: Store,
) -> None:
    """After a takeover, one batch of the old owner holding an effect intent, a receipt, a
    park with its approval request, a claim, a failure, a step with an outbox and a release:
    none of it is stored, and another actor's writes in the same batch all are."""
    old = await owned(store, "a", "rt-1")
    fb = await owned(store, "b", "rt-1")
    await send(store, msg("m1"), msg("m2"), msg("m3"), msg("m4"), msg("mb", "b"))
    await store.apply(Batch(effects=[EffectWrite(old, effect("m1", 0))]))
    new = await take_over(store, "a")
    before = (await store.pending("a", LATER, 10), await store.effects_of("a", "m1"))
    result = await store.apply(
        Batch(
            effects=[
                EffectWrite(old, effect("m1", 0, status="done", result=b"\x01")),  # receipt
                EffectWrite(old, effect("m1", 1)),  # intent
                EffectWrite(fb, effect("mb", 0, actor_id="b")),
            ],
            parks=[Park("a", old, "m2", effect=effect("m2", status="quarantined"))],
            claims=[Claim("a", old, "m3"), Claim("b", fb, "mb")],
            failures=[AttemptFailed("a", old, "m4", ["boom"], dead_letter_reason="poison")],
            steps=[step("a", old, "m1", events=[JournalRow(1, b"e")], outbox=[msg("o", "b")])],
            releases=[LeaseRelease("a", old)],
        )
    )
    assert result.stale == {"a"}
    assert (await store.pending("a", LATER, 10), await store.effects_of("a", "m1")) == before
    assert await store.effects_of("a", "m2") == []
    assert await store.find_effects(status="quarantined") == []
    assert await journal_seqs(store, "a") == []
    assert await store.dead_letters() == []
    assert await pending_ids(store, "b") == ["mb"]  # the stale step's outbox is not stored
    assert [m.attempts for m in await store.pending("b", NOW, 10)] == [1]
    assert await store.effects_of("b", "mb") == [effect("mb", 0, actor_id="b")]
    rec = await store.get_actor("a")
    assert rec is not None
    assert (rec.fence, rec.lease_owner) == (new, "rt-2")


async def test_a_takeover_racing_the_old_owners_intents_never_lets_one_land_after_it(
    store: Store, second_store: Store
) -> None:
    """Round after round, the old owner writes an intent for a slot while, on another handle
    (another runtime), a new owner takes the lease and writes that slot's receipt. Whichever
    commits first, the receipt is never overwritten by the stale intent: the fence is checked
    in the intent's own transaction, not by a read before it."""
    for n in range(25):
        actor = f"race-{n}"
        old = await owned(store, actor, "rt-1")
        await store.register_runtime("rt-2", "host", 2, NOW)
        await store.remove_runtime("rt-1")  # rt-1 is found dead: its lease is free at once
        intent = effect(f"m-{n}", 0, actor_id=actor)
        receipt = effect(f"m-{n}", 0, actor_id=actor, status="done", result=b"\x01")

        async def stale_intent(intent: EffectRecord = intent, old: int = old) -> None:
            await store.apply(Batch(effects=[EffectWrite(old, intent)]))

        async def takeover_and_receipt(actor: str = actor, receipt: EffectRecord = receipt) -> None:
            # A store may skip a row another transaction holds (the stale intent's, reading
            # the fence): the claim is then made again, as a runtime's next orphan scan does.
            fence = None
            for _ in range(200):
                fence = await lease(second_store, actor, "rt-2")
                if fence is not None:
                    break
                await anyio.sleep(0.01)
            assert fence is not None
            done = await second_store.apply(Batch(effects=[EffectWrite(fence, receipt)]))
            assert done.stale == set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(stale_intent)
            tg.start_soon(takeover_and_receipt)
        [row] = await store.effects_of(actor, f"m-{n}")
        assert (row.status, row.result) == ("done", b"\x01"), n
