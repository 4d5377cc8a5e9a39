"""The ``Store`` protocol's semantics, checked against every implementation (DESIGN §3).

Each test runs once on an opened ``SqliteStore`` (a file under ``tmp_path``) and once on an
opened ``MemoryStore``. The invariants named here are the ones the runtime relies on: I1 (dedup),
I2 (atomic step), I7 (dead letters) and I8 (leases and fencing), plus the supervision writes
(StopActor status, Revive, Watch and its Terminated notice).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from tether.errors import StoreError
from tether.runtime.memory_store import MemoryStore
from tether.runtime.sqlite_store import SqliteStore
from tether.runtime.store import (
    PARKED,
    ActorRecord,
    AttemptFailed,
    Batch,
    BatchResult,
    Claim,
    EffectRecord,
    EffectWrite,
    JournalRow,
    LeaseAcquire,
    LeaseRelease,
    NewMessage,
    Park,
    Revive,
    Snapshot,
    Spawn,
    StepCommit,
    StopActor,
    Store,
    Watch,
)

pytestmark = pytest.mark.anyio

NOW = 1_000.0  # the tests' clock: every message is due at NOW unless delayed
TTL = 30.0
LATER = NOW + 1_000_000.0  # a "now" at which every message in these tests is due


@pytest.fixture(params=["sqlite", "memory"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str
) -> AsyncIterator[Store]:
    """An opened store of each kind, closed after the test."""
    s: Store = SqliteStore(tmp_path / "tether.db") if request.param == "sqlite" else MemoryStore()
    await s.open()
    try:
        yield s
    finally:
        await s.close()


# -- helpers ------------------------------------------------------------------------------------


def record(
    actor_id: str,
    *,
    parent_id: str | None = None,
    class_path: str = "tests.sample:Counter",
    created_at: float = NOW,
) -> ActorRecord:
    return ActorRecord(
        actor_id=actor_id,
        class_path=class_path,
        init=b"\x80",
        parent_id=parent_id,
        status="active",
        stop_reason=None,
        fence=0,
        lease_owner=None,
        lease_expires=0.0,
        created_at=created_at,
    )


def msg(
    msg_id: str,
    actor_id: str = "a",
    *,
    deliver_at: float = NOW,
    created_at: float = NOW,
    dedup_key: str | None = None,
    wants_reply: bool = False,
    type_: str = "Ping",
    payload: bytes | None = None,
) -> NewMessage:
    return NewMessage(
        msg_id=msg_id,
        actor_id=actor_id,
        type=type_,
        payload=payload if payload is not None else msg_id.encode(),
        deliver_at=deliver_at,
        created_at=created_at,
        dedup_key=dedup_key,
        wants_reply=wants_reply,
    )


def step(
    actor_id: str,
    fence: int,
    msg_id: str,
    *,
    events: list[JournalRow] | None = None,
    outbox: list[NewMessage] | None = None,
    reply: bytes | None = None,
    snapshot: Snapshot | None = None,
    claim_next: str | None = None,
    stop: StopActor | None = None,
) -> StepCommit:
    return StepCommit(
        actor_id=actor_id,
        fence=fence,
        msg_id=msg_id,
        events=events or [],
        outbox=outbox or [],
        reply=reply,
        snapshot=snapshot,
        claim_next=claim_next,
        stop=stop,
    )


def halt(actor_id: str, reason: str, *, now: float = NOW, status: str = "stopped") -> StopActor:
    """A StopActor whose Terminated notice payload names the actor."""
    return StopActor(actor_id, reason, now, notice=f"terminated {actor_id}".encode(), status=status)


async def spawn(store: Store, *actor_ids: str) -> None:
    await store.apply(Batch(spawns=[Spawn(record(a)) for a in actor_ids]))


async def send(store: Store, *messages: NewMessage) -> BatchResult:
    return await store.apply(Batch(messages=list(messages)))


async def lease(
    store: Store, actor_id: str, owner: str = "rt-1", *, now: float = NOW
) -> int | None:
    result = await store.apply(Batch(acquires=[LeaseAcquire(actor_id, owner, now + TTL, now)]))
    return result.leases[actor_id]


async def owned(store: Store, actor_id: str, owner: str = "rt-1") -> int:
    """Spawn ``actor_id`` and lease it to a registered ``owner``; return the fence."""
    await spawn(store, actor_id)
    await store.register_runtime(owner, "host", 1, NOW)
    fence = await lease(store, actor_id, owner)
    assert fence is not None
    return fence


async def pending_ids(store: Store, actor_id: str, now: float = LATER) -> list[str]:
    return [m.msg_id for m in await store.pending(actor_id, now, 1000)]


async def journal_seqs(store: Store, actor_id: str) -> list[int]:
    return [r.seq for r in await store.load_journal(actor_id, 0, 1000)]


# -- spawn --------------------------------------------------------------------------------------


async def test_spawn_stores_the_record_and_returns_it(store: Store) -> None:
    """A spawn of a new id stores the record as given and returns it in BatchResult.spawned."""
    rec = record("a", parent_id="p")
    result = await store.apply(Batch(spawns=[Spawn(rec)]))
    assert result.spawned == {"a": rec}
    assert await store.get_actor("a") == rec


async def test_spawn_of_a_taken_id_keeps_and_returns_the_existing_record(store: Store) -> None:
    """Spawning an id that exists changes nothing and returns the record stored first."""
    first = record("a", class_path="first:Actor", created_at=NOW)
    await store.apply(Batch(spawns=[Spawn(first)]))
    result = await store.apply(
        Batch(spawns=[Spawn(record("a", class_path="second:Actor", created_at=NOW + 5))])
    )
    assert result.spawned == {"a": first}
    assert await store.get_actor("a") == first
    assert [r.actor_id for r in await store.list_actors()] == ["a"]


async def test_spawn_of_a_taken_id_returns_its_current_state(store: Store) -> None:
    """A repeated spawn returns the stored record as it is now (leased, fenced), not as spawned."""
    fence = await owned(store, "a")
    result = await store.apply(Batch(spawns=[Spawn(record("a"))]))
    assert result.spawned["a"].fence == fence
    assert result.spawned["a"].lease_owner == "rt-1"


async def test_list_actors_returns_every_actor_or_the_children_of_one_parent(
    store: Store,
) -> None:
    """list_actors lists every actor by creation time, or only those of one parent_id."""
    await store.apply(
        Batch(
            spawns=[
                Spawn(record("root", created_at=NOW)),
                Spawn(record("c2", parent_id="root", created_at=NOW + 2)),
                Spawn(record("c1", parent_id="root", created_at=NOW + 1)),
                Spawn(record("other", parent_id="elsewhere", created_at=NOW + 3)),
            ]
        )
    )
    assert [r.actor_id for r in await store.list_actors()] == ["root", "c1", "c2", "other"]
    assert [r.actor_id for r in await store.list_actors(parent_id="root")] == ["c1", "c2"]
    assert await store.list_actors(parent_id="nobody") == []


async def test_get_actor_of_a_missing_id_is_none(store: Store) -> None:
    """get_actor of an id never spawned is None."""
    await spawn(store, "a")
    assert await store.get_actor("missing") is None


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


async def test_delayed_message_is_not_pending_until_due(store: Store) -> None:
    """A message with deliver_at in the future is neither pending nor new until that time."""
    await spawn(store, "a")
    await send(store, msg("late", deliver_at=NOW + 10), msg("now"))
    assert await pending_ids(store, "a", NOW) == ["now"]
    assert [m for _, _, m, _ in await store.new_messages(0, NOW, 100)] == ["now"]
    # Once due, it takes its place in mailbox (storage) order, ahead of "now".
    assert await pending_ids(store, "a", NOW + 10) == ["late", "now"]
    assert [m for _, _, m, _ in await store.new_messages(0, NOW + 10, 100)] == ["late", "now"]


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
    """deliver_at == created_at: due for pending/new_messages/orphaned even to a reader whose clock
    is behind the sender's, and left to new_messages by due_between (only delayed ones there)."""
    await spawn(store, "a", "b")
    await send(
        store,
        msg("now", "a", deliver_at=NOW + 1, created_at=NOW + 1),
        msg("later", "b", deliver_at=NOW + 2, created_at=NOW),
    )
    behind = NOW  # the reader's clock, a little behind the sender's
    assert [m.msg_id for m in await store.pending("a", behind, 10)] == ["now"]
    assert [m for _, _, m, _ in await store.new_messages(0, behind, 10)] == ["now"]
    assert await store.orphaned(behind, 10) == ["a"]
    assert await store.due_between(NOW - 5, NOW + 5) == ["b"]


async def test_new_messages_lists_due_messages_after_a_seq_watermark(store: Store) -> None:
    """new_messages returns (seq, actor, msg, restored) of due messages stored after the
    watermark, in order; a message sent once is not restored."""
    await spawn(store, "a", "b")
    await send(store, msg("m1", "a"), msg("m2", "b"))
    first = await store.new_messages(0, NOW, 100)
    assert [(a, m, r) for _, a, m, r in first] == [("a", "m1", False), ("b", "m2", False)]
    watermark = first[-1][0]
    assert await store.new_messages(watermark, NOW, 100) == []
    await send(store, msg("m3", "a"), msg("m4", "b"), msg("m5", "a", deliver_at=NOW + 5))
    later = await store.new_messages(watermark, NOW, 100)
    assert [(a, m) for _, a, m, _ in later] == [("a", "m3"), ("b", "m4")]
    assert all(seq > watermark for seq, _, _, _ in later)
    assert [s for s, _, _, _ in later] == sorted(s for s, _, _, _ in later)
    assert [m for _, _, m, _ in await store.new_messages(0, NOW, 3)] == ["m1", "m2", "m3"]


async def test_new_messages_leaves_out_the_scanning_runtimes_own_sends(store: Store) -> None:
    """With skip_prefix, messages whose id starts with it are left out (their sender routed
    them); every other message is listed, in seq order, and the limit counts only those."""
    await spawn(store, "a", "b")
    await send(store, msg("rt1-1", "a"), msg("rt2-1", "b"), msg("rt1-2", "b"), msg("rt2-2", "a"))
    got = await store.new_messages(0, NOW, 100, skip_prefix="rt1-")
    assert [(a, m, r) for _, a, m, r in got] == [("b", "rt2-1", False), ("a", "rt2-2", False)]
    assert [m for _, _, m, _ in await store.new_messages(0, NOW, 1, skip_prefix="rt1-")] == [
        "rt2-1"
    ]
    assert len(await store.new_messages(0, NOW, 100, skip_prefix=None)) == 4


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
    assert [m for _, _, m, _ in await store.new_messages(0, LATER, 100)] == ["m1", "m3"]


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


# -- leases and fencing (I8) --------------------------------------------------------------------


async def test_lease_on_a_free_actor_gives_the_next_fence(store: Store) -> None:
    """Acquiring a free actor's lease records the owner and expiry and returns fence N+1."""
    await spawn(store, "a")
    await store.register_runtime("rt-1", "host", 1, NOW)
    assert await lease(store, "a", "rt-1") == 1
    rec = await store.get_actor("a")
    assert rec is not None
    assert (rec.fence, rec.lease_owner, rec.lease_expires) == (1, "rt-1", NOW + TTL)
    # The holder itself may take its lease again; the fence still moves on.
    assert await lease(store, "a", "rt-1", now=NOW + 1) == 2


async def test_lease_held_by_a_live_runtime_cannot_be_taken_before_it_expires(
    store: Store,
) -> None:
    """While the holder is a registered runtime and now <= expires, another owner gets None."""
    fence = await owned(store, "a", "rt-1")
    await store.register_runtime("rt-2", "host", 2, NOW)
    assert await lease(store, "a", "rt-2", now=NOW + 1) is None
    result = await store.apply(
        Batch(acquires=[LeaseAcquire("a", "rt-2", NOW + TTL + 100, NOW + TTL)])
    )
    assert result.leases == {"a": None}  # now == expires: not yet expired
    rec = await store.get_actor("a")
    assert rec is not None
    assert (rec.fence, rec.lease_owner, rec.lease_expires) == (fence, "rt-1", NOW + TTL)


async def test_expired_lease_can_be_taken_by_another_owner(store: Store) -> None:
    """Once now > expires, another owner takes the lease with the next fence."""
    fence = await owned(store, "a", "rt-1")
    assert await lease(store, "a", "rt-2", now=NOW + TTL + 0.5) == fence + 1
    rec = await store.get_actor("a")
    assert rec is not None
    assert rec.lease_owner == "rt-2"


async def test_lease_of_a_removed_runtime_can_be_taken_at_once(store: Store) -> None:
    """After remove_runtime(holder), another owner takes an unexpired lease."""
    fence = await owned(store, "a", "rt-1")
    await store.remove_runtime("rt-1")
    assert [r[0] for r in await store.list_runtimes()] == []
    assert await lease(store, "a", "rt-2", now=NOW + 1) == fence + 1


async def test_lease_of_an_unregistered_owner_can_be_taken_at_once(store: Store) -> None:
    """A lease whose holder is not a registered runtime counts as held by a dead runtime."""
    await spawn(store, "a")
    assert await lease(store, "a", "ghost") == 1
    assert await lease(store, "a", "rt-2", now=NOW + 1) == 2


async def test_released_lease_can_be_taken_by_another_owner(store: Store) -> None:
    """A release with the current fence frees the lease for anyone."""
    fence = await owned(store, "a", "rt-1")
    await store.register_runtime("rt-2", "host", 2, NOW)
    result = await store.apply(Batch(releases=[LeaseRelease("a", fence)]))
    assert result.stale == set()
    rec = await store.get_actor("a")
    assert rec is not None
    assert (rec.lease_owner, rec.fence) == (None, fence)
    assert await lease(store, "a", "rt-2", now=NOW + 1) == fence + 1


async def test_lease_of_a_stopped_or_missing_actor_is_refused(store: Store) -> None:
    """No one gets the lease of a stopped actor or of an id never spawned."""
    await spawn(store, "a")
    await store.apply(Batch(stops=[halt("a", "bye")]))
    result = await store.apply(
        Batch(
            acquires=[
                LeaseAcquire("a", "rt-1", NOW + TTL, NOW),
                LeaseAcquire("missing", "rt-1", NOW + TTL, NOW),
            ]
        )
    )
    assert result.leases == {"a": None, "missing": None}
    assert await store.get_actor("missing") is None


async def test_stale_step_commit_is_rejected_without_effect(store: Store) -> None:
    """A step with an old fence is reported stale and changes nothing; the batch's other writes apply."""
    old = await owned(store, "a", "rt-1")
    new = await lease(store, "a", "rt-2", now=NOW + TTL + 1)
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
    await lease(store, "a", "rt-2", now=NOW + TTL + 1)
    fb = await owned(store, "b", "rt-1")
    await send(store, msg("ma", "a"), msg("mb", "b"))
    result = await store.apply(Batch(claims=[Claim("a", old, "ma"), Claim("b", fb, "mb")]))
    assert result.stale == {"a"}
    assert [m.attempts for m in await store.pending("a", NOW, 10)] == [0]
    assert [m.attempts for m in await store.pending("b", NOW, 10)] == [1]


async def test_stale_attempt_failure_is_rejected_without_effect(store: Store) -> None:
    """A failure with an old fence records no error and dead-letters nothing."""
    old = await owned(store, "a", "rt-1")
    await lease(store, "a", "rt-2", now=NOW + TTL + 1)
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
    new = await lease(store, "a", "rt-2", now=NOW + TTL + 1)
    result = await store.apply(Batch(releases=[LeaseRelease("a", old)]))
    assert result.stale == {"a"}
    rec = await store.get_actor("a")
    assert rec is not None
    assert (rec.fence, rec.lease_owner, rec.lease_expires) == (new, "rt-2", NOW + 2 * TTL + 1)


async def test_fenced_write_for_a_missing_actor_is_stale(store: Store) -> None:
    """A fenced write naming an actor that does not exist is rejected as stale."""
    await spawn(store, "a")
    await send(store, msg("m1"))
    result = await store.apply(Batch(claims=[Claim("ghost", 0, "m1")]))
    assert result.stale == {"ghost"}
    assert [m.attempts for m in await store.pending("a", NOW, 10)] == [0]


async def test_renew_leases_extends_only_that_owners_leases(store: Store) -> None:
    """renew_leases(owner, expires) moves the expiry of that owner's leases and of no other."""
    fa = await owned(store, "a", "rt-1")
    fb = await owned(store, "b", "rt-2")
    await spawn(store, "free")
    await store.renew_leases("rt-1", NOW + 500)
    a, b, free = [await store.get_actor(x) for x in ("a", "b", "free")]
    assert a is not None
    assert b is not None
    assert free is not None
    assert (a.lease_owner, a.lease_expires, a.fence) == ("rt-1", NOW + 500, fa)
    assert (b.lease_owner, b.lease_expires, b.fence) == ("rt-2", NOW + TTL, fb)
    assert (free.lease_owner, free.lease_expires) == (None, 0.0)


async def test_registered_runtimes_are_listed_until_removed(store: Store) -> None:
    """register_runtime adds (id, host, pid, started); remove_runtime drops it and frees its leases."""
    await store.register_runtime("rt-1", "h1", 11, NOW)
    await store.register_runtime("rt-2", "h2", 22, NOW + 1)
    assert sorted(await store.list_runtimes()) == [
        ("rt-1", "h1", 11, NOW),
        ("rt-2", "h2", 22, NOW + 1),
    ]
    fence = await owned(store, "a", "rt-1")
    await store.remove_runtime("rt-1")
    assert await store.list_runtimes() == [("rt-2", "h2", 22, NOW + 1)]
    rec = await store.get_actor("a")
    assert rec is not None
    assert (rec.lease_owner, rec.fence) == (None, fence)


async def test_orphaned_lists_actors_with_due_mail_and_no_live_owner(store: Store) -> None:
    """orphaned names actors with due messages whose lease is free, expired or held by a dead runtime."""
    await owned(store, "held", "rt-1")
    await owned(store, "dead-owner", "rt-2")
    await spawn(store, "free", "idle", "later")
    await send(
        store,
        msg("h", "held"),
        msg("d", "dead-owner"),
        msg("f", "free"),
        msg("l", "later", deliver_at=NOW + 60),
    )
    await store.remove_runtime("rt-2")
    assert sorted(await store.orphaned(NOW, 100)) == ["dead-owner", "free"]
    assert sorted(await store.orphaned(NOW + TTL + 1, 100)) == ["dead-owner", "free", "held"]
    assert sorted(await store.orphaned(NOW + 60, 100)) == ["dead-owner", "free", "held", "later"]


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
    letter = await store.retry_dead_letter("m1", NOW + 10)
    assert letter is not None
    assert (letter.msg_id, letter.attempts, letter.errors, letter.reason) == ("m1", 1, ["e"], "x")
    assert await store.dead_letters() == []
    got = await store.pending("a", NOW + 10, 10)
    assert [m.msg_id for m in got] == ["m2", "m3", "m1"]
    assert [m.seq for m in got] == sorted(m.seq for m in got)
    assert (got[-1].attempts, got[-1].errors, got[-1].payload) == (0, [], b"m1")
    assert (got[-1].seq, True) in [
        (s, r) for s, _, _, r in await store.new_messages(got[1].seq, NOW + 10, 10)
    ]  # restored: whoever sent it first must pick it up again


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
    new = await lease(store, "a", "rt-2", now=NOW + 1)
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
    assert [m for _, a, m, _ in await store.new_messages(0, NOW, 10) if a == "sup"] == [
        notice.msg_id
    ]


async def test_stale_step_with_a_stop_neither_stops_nor_notifies(store: Store) -> None:
    """A stop carried by a stale step is rejected with it: the actor stays active, no notice is sent."""
    old = await owned(store, "a", "rt-1")
    new = await lease(store, "a", "rt-2", now=NOW + TTL + 1)
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


# -- atomicity (I2) -----------------------------------------------------------------------------


async def _failing_batch(store: Store) -> tuple[int, Batch]:
    """A store with actor "a" holding journal seq 1, and a batch whose step re-uses seq 1."""
    fence = await owned(store, "a")
    await spawn(store, "b")
    await send(store, msg("m0"), msg("m1"), msg("m2"))
    await store.apply(Batch(steps=[step("a", fence, "m0", events=[JournalRow(1, b"e1")])]))
    batch = Batch(
        spawns=[Spawn(record("new-actor"))],
        acquires=[LeaseAcquire("b", "rt-1", NOW + TTL, NOW)],
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


# -- the effects ledger (I4): EffectWrite, Park, resolve, unpark, purge_receipts ----------------


def effect(
    msg_id: str = "m1",
    idx: int = 0,
    *,
    actor_id: str = "a",
    tool: str = "send_email",
    status: str = "pending",
    attempts: int = 1,
    key: str | None = None,
    result: bytes | None = None,
    error: str | None = None,
    reason: str | None = None,
    history: list[str] | None = None,
    created_at: float = NOW,
    updated_at: float | None = None,
) -> EffectRecord:
    """A ledger row; its key names its slot unless given."""
    return EffectRecord(
        actor_id=actor_id,
        msg_id=msg_id,
        idx=idx,
        key=key if key is not None else f"k-{actor_id}-{msg_id}-{idx}",
        tool=tool,
        input_hash="h" * 16,
        args=msgspec.msgpack.encode({"to": "x@example.com"}),
        status=status,
        attempts=attempts,
        result=result,
        error=error,
        reason=reason,
        history=history or [],
        created_at=created_at,
        updated_at=updated_at if updated_at is not None else created_at,
    )


async def parked_with(store: Store, actor_id: str = "a", *ids: str) -> int:
    """Own ``actor_id``, store ``ids`` (default "m1") and park the first, claimed once; the fence."""
    fence = await owned(store, actor_id)
    ids = ids or ("m1",)
    await send(store, *(msg(m, actor_id) for m in ids))
    await store.apply(Batch(claims=[Claim(actor_id, fence, ids[0])]))
    q = effect(ids[0], actor_id=actor_id, status="quarantined", reason="ambiguous")
    await store.apply(Batch(parks=[Park(actor_id, fence, ids[0], effect=q)]))
    return fence


async def test_effect_write_stores_a_ledger_row_read_back_by_effects_of(store: Store) -> None:
    """EffectWrite inserts rows; effects_of returns one step's rows by index, every field intact."""
    fence = await owned(store, "a")
    await spawn(store, "b")
    rows = [
        effect("m1", 1, status="done", result=b"\x01", history=["attempt 1: E: x"]),
        effect("m1", 0, status="failed", error="E: boom", attempts=3),
        effect("m2", 0),
    ]
    result = await store.apply(Batch(effects=[EffectWrite(fence, r) for r in rows]))
    assert result.stale == set()
    assert await store.effects_of("a", "m1") == [rows[1], rows[0]]
    assert await store.effects_of("a", "m2") == [rows[2]]
    assert await store.effects_of("a", "nope") == []
    assert await store.effects_of("b", "m1") == []


async def test_effect_write_upsert_keeps_created_at_and_replaces_the_outcome(store: Store) -> None:
    """A second write of a slot replaces status, attempts, result, error, reason, history and
    updated_at, and keeps the row's created_at (and its place in find_effects)."""
    fence = await owned(store, "a")
    first = effect("m1", 0, status="pending", created_at=NOW)
    await store.apply(Batch(effects=[EffectWrite(fence, first)]))
    await store.apply(Batch(effects=[EffectWrite(fence, effect("m2", 0, created_at=NOW + 1))]))
    later = msgspec.structs.replace(
        first,
        status="done",
        attempts=2,
        result=b"\x2a",
        error=None,
        reason="was ambiguous",
        history=["attempt 1: TimeoutError", "retried"],
        created_at=NOW + 50,  # a writer's own clock: must not move the row
        updated_at=NOW + 50,
    )
    await store.apply(Batch(effects=[EffectWrite(fence, later)]))
    [row] = await store.effects_of("a", "m1")
    assert row == msgspec.structs.replace(later, created_at=NOW)
    # replaced again, fewer fields set: nothing of the previous outcome lingers
    again = msgspec.structs.replace(
        later, status="failed", result=None, error="E", reason=None, history=[], updated_at=NOW + 60
    )
    await store.apply(Batch(effects=[EffectWrite(fence, again)]))
    [row] = await store.effects_of("a", "m1")
    assert row == msgspec.structs.replace(again, created_at=NOW)
    assert [e.msg_id for e in await store.find_effects(actor_id="a")] == ["m1", "m2"]


async def test_effect_write_upsert_keeps_the_slot_identity(store: Store) -> None:
    """A slot's identity (key, tool, input hash, args) is fixed by its first write: a later
    write of the slot only replaces the outcome. (The runtime always rewrites a slot from the
    recorded row; the stores must still agree on what a differing write does.)"""
    fence = await owned(store, "a")
    first = effect("m1", 0)
    await store.apply(Batch(effects=[EffectWrite(fence, first)]))
    other = msgspec.structs.replace(
        first, key="other-key", tool="other", input_hash="i" * 16, args=b"\x80", status="done"
    )
    await store.apply(Batch(effects=[EffectWrite(fence, other)]))
    [row] = await store.effects_of("a", "m1")
    assert (row.key, row.tool, row.input_hash, row.args) == (
        first.key,
        first.tool,
        first.input_hash,
        first.args,
    )
    assert row.status == "done"


async def test_stale_effect_write_is_rejected_without_effect(store: Store) -> None:
    """An EffectWrite under an old fence records nothing (neither insert nor update); the
    batch's other writes apply."""
    old = await owned(store, "a", "rt-1")
    await store.apply(Batch(effects=[EffectWrite(old, effect("m1", 0))]))
    new = await lease(store, "a", "rt-2", now=NOW + TTL + 1)
    assert new is not None
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
    await lease(store, "a", "rt-2", now=NOW + TTL + 1)
    q = effect("m1", status="quarantined", reason="ambiguous")
    result = await store.apply(Batch(parks=[Park("a", old, "m1", effect=q)]))
    assert result.stale == {"a"}
    [m] = await store.pending("a", NOW, 10)
    assert (m.msg_id, m.deliver_at, m.attempts, m.parks) == ("m1", NOW, 1, 0)
    assert await store.effects_of("a", "m1") == []
    assert await store.find_effects(status="quarantined") == []


async def test_find_effects_filters_by_actor_status_and_key_oldest_first(store: Store) -> None:
    """find_effects returns the rows matching every filter given, by created_at."""
    fa = await owned(store, "a")
    fb = await owned(store, "b")
    rows = [
        effect("m2", 0, status="quarantined", created_at=NOW + 2),
        effect("m1", 0, status="done", created_at=NOW + 1),
        effect("mb", 0, actor_id="b", status="quarantined", created_at=NOW + 3),
        effect("m1", 1, status="quarantined", created_at=NOW),
    ]
    await store.apply(
        Batch(effects=[EffectWrite(fa if r.actor_id == "a" else fb, r) for r in rows])
    )

    def slots(found: list[EffectRecord]) -> list[tuple[str, str, int]]:
        return [(e.actor_id, e.msg_id, e.idx) for e in found]

    assert slots(await store.find_effects()) == [
        ("a", "m1", 1),
        ("a", "m1", 0),
        ("a", "m2", 0),
        ("b", "mb", 0),
    ]
    assert slots(await store.find_effects(status="quarantined")) == [
        ("a", "m1", 1),
        ("a", "m2", 0),
        ("b", "mb", 0),
    ]
    assert slots(await store.find_effects(actor_id="a", status="quarantined")) == [
        ("a", "m1", 1),
        ("a", "m2", 0),
    ]
    assert slots(await store.find_effects(key=rows[2].key)) == [("b", "mb", 0)]
    assert await store.find_effects(key=rows[2].key, actor_id="a") == []
    assert await store.find_effects(status="retry") == []


def slot_ids(found: list[EffectRecord]) -> list[tuple[str, int]]:
    return [(e.msg_id, e.idx) for e in found]


async def write_effects(store: Store, rows: list[EffectRecord]) -> None:
    fences = {a: await owned(store, a) for a in sorted({r.actor_id for r in rows})}
    result = await store.apply(Batch(effects=[EffectWrite(fences[r.actor_id], r) for r in rows]))
    assert result.stale == set()


async def test_recent_effects_returns_the_newest_rows_of_the_actor_oldest_first(
    store: Store,
) -> None:
    """recent_effects keeps the newest ``limit`` rows of one actor (another actor's newer rows
    take no place), in find_effects' order; a limit past the rows returns them all, 0 none."""
    await write_effects(
        store,
        [
            effect("m3", 0, created_at=NOW + 3),
            effect("m1", 0, created_at=NOW + 1),
            effect("m4", 0, created_at=NOW + 4),
            effect("m2", 0, created_at=NOW + 2, status="done", result=b"\x01"),
            effect("mb", 0, actor_id="b", created_at=NOW + 9),
        ],
    )
    recent = await store.recent_effects("a", 2)
    assert slot_ids(recent) == [("m3", 0), ("m4", 0)]
    assert recent == (await store.find_effects(actor_id="a"))[-2:]  # whole rows, as stored
    assert slot_ids(await store.recent_effects("a", 3)) == [("m2", 0), ("m3", 0), ("m4", 0)]
    assert len(await store.recent_effects("a", 100)) == 4
    assert await store.recent_effects("a", 0) == []
    assert await store.recent_effects("ghost", 5) == []
    with pytest.raises(ValueError, match="limit must be >= 0"):
        await store.recent_effects("a", -1)


async def test_recent_effects_after_is_a_strict_lower_bound_applied_before_the_limit(
    store: Store,
) -> None:
    """Only rows created strictly after ``after`` count; fewer than ``limit`` may be left."""
    await write_effects(store, [effect(f"m{i}", 0, created_at=NOW + i) for i in range(1, 6)])
    assert slot_ids(await store.recent_effects("a", 10, after=NOW + 3)) == [("m4", 0), ("m5", 0)]
    assert slot_ids(await store.recent_effects("a", 1, after=NOW + 3)) == [("m5", 0)]
    assert await store.recent_effects("a", 10, after=NOW + 5) == []
    assert len(await store.recent_effects("a", 10, after=0.0)) == 5


async def test_recent_effects_excludes_tools_before_the_limit(store: Store) -> None:
    """Rows of an excluded tool are left out before the limit is applied: the newest rows being
    excluded ones does not shorten the result."""
    await write_effects(
        store,
        [
            effect("m1", 0, tool="search", created_at=NOW + 1),
            effect("m2", 0, tool="fetch", created_at=NOW + 2),
            effect("m3", 0, tool="search", created_at=NOW + 3),
            effect("m4", 0, tool="model", created_at=NOW + 4),
            effect("m5", 0, tool="think", created_at=NOW + 5),
        ],
    )
    found = await store.recent_effects("a", 2, exclude_tools=frozenset({"model", "think"}))
    assert slot_ids(found) == [("m2", 0), ("m3", 0)]
    found = await store.recent_effects("a", 5, exclude_tools=["search", "model", "think"])
    assert slot_ids(found) == [("m2", 0)]
    assert len(await store.recent_effects("a", 5, exclude_tools=())) == 5


async def test_recent_effects_orders_ties_by_msg_id_then_idx(store: Store) -> None:
    """Rows made at the same moment are ordered by (msg_id, idx), and a limit falling inside
    such a tie keeps the last of them in that order."""
    await write_effects(
        store,
        [
            effect("m2", 0, created_at=NOW),
            effect("m1", 1, created_at=NOW),
            effect("m10", 0, created_at=NOW),
            effect("m1", 0, created_at=NOW),
            effect("m0", 3, created_at=NOW - 1),
        ],
    )
    order = [("m0", 3), ("m1", 0), ("m1", 1), ("m10", 0), ("m2", 0)]
    assert slot_ids(await store.recent_effects("a", 5)) == order
    assert slot_ids(await store.recent_effects("a", 3)) == order[-3:]
    assert slot_ids(await store.recent_effects("a", 1)) == [("m2", 0)]


async def test_recent_effects_is_the_filtered_tail_of_find_effects(store: Store) -> None:
    """On a ledger with many ties and several tools, every limit, bound and exclusion gives
    the tail of find_effects(actor_id) filtered the same way: the rows a loop guard kept when
    it read the whole ledger."""
    tools = ["search", "fetch", "model"]
    rows = [
        effect(f"m{(i * 7) % 13}", i % 3, tool=tools[i % 3], created_at=NOW + (i * 5) % 4)
        for i in range(39)
    ]
    await write_effects(store, [*rows, effect("mb", 0, actor_id="b", created_at=NOW + 2)])
    everything = await store.find_effects(actor_id="a")
    for after in (None, NOW, NOW + 2):
        for excluded in (frozenset[str](), frozenset({"model"}), frozenset({"fetch", "model"})):
            kept = [
                r
                for r in everything
                if (after is None or r.created_at > after) and r.tool not in excluded
            ]
            for limit in (1, 2, 5, 13, 40):
                found = await store.recent_effects("a", limit, after=after, exclude_tools=excluded)
                assert found == kept[-limit:], (after, excluded, limit)


async def test_park_sets_the_message_aside_and_writes_its_effect(store: Store) -> None:
    """A parked message (deliver_at PARKED) is not pending, not new, not due and does not make
    its actor orphaned; its effect row is written in the same batch; other messages flow."""
    fence = await parked_with(store, "a", "m1", "m2")
    assert await pending_ids(store, "a", LATER) == ["m2"]
    assert [m for _, _, m, _ in await store.new_messages(0, LATER, 100)] == ["m2"]
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
    """unpark makes a parked message due now with a new seq above every other message's, so it
    is pending last and a watermark scan that saw everything else sees it."""
    await parked_with(store, "a", "m1", "m2")
    await spawn(store, "b")
    await send(store, msg("m3"), msg("b1", "b"))
    seen = await store.new_messages(0, LATER, 100)
    watermark = max(s for s, _, _, _ in seen)
    assert "m1" not in [m for _, _, m, _ in seen]
    assert await store.unpark("m1", NOW + 5) is True
    got = await store.pending("a", NOW + 5, 10)
    assert [m.msg_id for m in got] == ["m2", "m3", "m1"]
    m1 = got[-1]
    assert (m1.deliver_at, m1.attempts, m1.parks) == (NOW + 5, 0, 1)
    assert m1.seq > watermark
    assert await store.new_messages(watermark, NOW + 5, 100) == [(m1.seq, "a", "m1", True)]
    # Its sender's scan leaves out the messages it routed itself, but not one that came back.
    assert await store.new_messages(watermark, NOW + 5, 100, skip_prefix="m") == [
        (m1.seq, "a", "m1", True)
    ]
    assert await store.unpark("m1", NOW + 6) is False  # not parked any more
    # The ledger row is untouched by unpark.
    [row] = await store.effects_of("a", "m1")
    assert row.status == "quarantined"


async def test_unparked_message_is_seen_past_a_watermark_of_acked_messages(store: Store) -> None:
    """The new seq is above every seq ever assigned, not just above the messages still in the
    mailbox: a runtime whose watermark passed messages acked since must see the unparked one."""
    fence = await parked_with(store, "a", "m1")
    await send(store, msg("m2"), msg("m3"))
    watermark = max(s for s, _, _, _ in await store.new_messages(0, LATER, 100))
    await store.apply(Batch(steps=[step("a", fence, "m2"), step("a", fence, "m3")]))
    assert await store.unpark("m1", NOW + 5)
    assert [m for _, _, m, _ in await store.new_messages(watermark, NOW + 5, 100)] == ["m1"]


async def test_seq_is_not_reused_after_an_unparked_message_is_acked(store: Store) -> None:
    """A message stored after an unparked message was acked gets a seq above the unparked
    message's: a watermark that saw the unparked message must see the next one."""
    fence = await parked_with(store, "a", "m1")
    await send(store, msg("m2"))
    assert await store.unpark("m1", NOW)
    [seq] = [s for s, _, m, _ in await store.new_messages(0, NOW, 100) if m == "m1"]
    await store.apply(Batch(steps=[step("a", fence, "m1")]))
    await send(store, msg("m3"))
    assert [m for _, _, m, _ in await store.new_messages(seq, NOW, 100)] == ["m3"]


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
    its parked message due now, last in the mailbox, visible past any watermark."""
    await parked_with(store, "a", "m1", "m2")
    watermark = max(s for s, _, _, _ in await store.new_messages(0, LATER, 100))
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
    assert [m for _, _, m, _ in await store.new_messages(watermark, NOW + 9, 100)] == ["m1"]
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
