"""Conformance: taking and giving back leases (I8), registered runtimes, orphaned actors.

Expiry on the store's clock is ``clock.py``; fencing is ``fencing.py``."""

from __future__ import annotations

import pytest

from tether.store.protocol import Store
from tether.store.records import (
    Batch,
    LeaseAcquire,
    LeaseRelease,
    RuntimeRecord,
)
from tether.testing.conformance.support import (
    NOW,
    TTL,
    LeaseTime,
    halt,
    lease,
    msg,
    owned,
    send,
    spawn,
)

# -- leases -------------------------------------------------------------------------------------


async def test_lease_on_a_free_actor_gives_the_next_fence(
    store: Store, lease_time: LeaseTime
) -> None:
    """Acquiring a free actor's lease records the owner and an expiry ttl ahead on the store's
    clock, and returns fence N+1."""
    await spawn(store, "a")
    await store.register_runtime("rt-1", "host", 1, NOW)
    assert await lease(store, "a", "rt-1") == 1
    rec = await store.get_actor("a")
    assert rec is not None
    assert (rec.fence, rec.lease_owner) == (1, "rt-1")
    assert rec.lease_expires == pytest.approx(await store.store_time() + TTL, abs=lease_time.slack)
    # The holder itself may take its lease again; the fence still moves on.
    assert await lease(store, "a", "rt-1") == 2


async def test_lease_held_by_a_live_runtime_cannot_be_taken(store: Store) -> None:
    """While the holder is a registered runtime and its lease runs, another owner gets None and
    nothing changes."""
    fence = await owned(store, "a", "rt-1")
    before = await store.get_actor("a")
    await store.register_runtime("rt-2", "host", 2, NOW)
    assert await lease(store, "a", "rt-2") is None
    assert await store.get_actor("a") == before
    assert before is not None
    assert (before.fence, before.lease_owner) == (fence, "rt-1")


async def test_lease_of_a_removed_runtime_can_be_taken_at_once(store: Store) -> None:
    """After remove_runtime(holder), another owner takes an unexpired lease."""
    fence = await owned(store, "a", "rt-1")
    await store.remove_runtime("rt-1")
    assert [r.runtime_id for r in await store.list_runtimes()] == []
    assert await lease(store, "a", "rt-2") == fence + 1


async def test_lease_of_an_unregistered_owner_can_be_taken_at_once(store: Store) -> None:
    """A lease whose holder is not a registered runtime counts as held by a dead runtime."""
    await spawn(store, "a")
    assert await lease(store, "a", "ghost") == 1
    assert await lease(store, "a", "rt-2") == 2


async def test_released_lease_can_be_taken_by_another_owner(store: Store) -> None:
    """A release with the current fence frees the lease for anyone."""
    fence = await owned(store, "a", "rt-1")
    await store.register_runtime("rt-2", "host", 2, NOW)
    result = await store.apply(Batch(releases=[LeaseRelease("a", fence)]))
    assert result.stale == set()
    rec = await store.get_actor("a")
    assert rec is not None
    assert (rec.lease_owner, rec.fence) == (None, fence)
    assert await lease(store, "a", "rt-2") == fence + 1


async def test_lease_of_a_stopped_or_missing_actor_is_refused(store: Store) -> None:
    """No one gets the lease of a stopped actor or of an id never spawned."""
    await spawn(store, "a")
    await store.apply(Batch(stops=[halt("a", "bye")]))
    result = await store.apply(
        Batch(acquires=[LeaseAcquire("a", "rt-1", TTL), LeaseAcquire("missing", "rt-1", TTL)])
    )
    assert result.leases == {"a": None, "missing": None}
    assert await store.get_actor("missing") is None


# -- registered runtimes and orphans ------------------------------------------------------------


async def test_registered_runtimes_are_listed_until_removed(store: Store) -> None:
    """register_runtime adds (id, host, pid, started), listed by id; remove_runtime drops it and
    frees its leases (the fence stays)."""
    await store.register_runtime("rt-2", "h2", 22, NOW + 1)
    await store.register_runtime("rt-1", "h1", 11, NOW)
    assert await store.list_runtimes() == [
        RuntimeRecord("rt-1", "h1", 11, NOW),
        RuntimeRecord("rt-2", "h2", 22, NOW + 1),
    ]
    fence = await owned(store, "a", "rt-1")
    await store.remove_runtime("rt-1")
    assert await store.list_runtimes() == [RuntimeRecord("rt-2", "h2", 22, NOW + 1)]
    rec = await store.get_actor("a")
    assert rec is not None
    assert (rec.lease_owner, rec.fence) == (None, fence)


async def test_orphaned_lists_actors_with_due_mail_and_no_live_owner(store: Store) -> None:
    """orphaned names actors with messages due at ``now`` whose lease is free or held by an
    owner that is not a registered runtime; a live holder's actors are not orphaned."""
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
    assert sorted(await store.orphaned(NOW + 60, 100)) == ["dead-owner", "free", "later"]
    assert len(await store.orphaned(NOW + 60, 2)) == 2
