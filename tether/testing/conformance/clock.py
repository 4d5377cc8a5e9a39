"""Conformance: leases run on the store's clock.

A lease write carries a ttl, never an absolute expiry computed on the writer's clock; the
store sets and judges expiry on its own clock (``Store.store_time``), so runtimes whose clocks
disagree still agree on who holds a lease (``tether.store.protocol``). On a store opened with
the suite's fake clock, time moves when a test says so; on one with a clock of its own (a
database server's), the test waits for it.
"""

from __future__ import annotations

import pytest

from tether.store.protocol import Store
from tether.testing.conformance.support import (
    NOW,
    LeaseTime,
    lease,
    msg,
    owned,
    scan,
    scanned,
    send,
    spawn,
)


async def test_a_lease_expires_ttl_after_it_was_taken_on_the_stores_clock(
    store: Store, lease_time: LeaseTime
) -> None:
    """Another owner is refused while the lease runs (up to and including its expiry), and
    takes it with the next fence once the store's clock is past it."""
    ttl = lease_time.ttl
    fence = await owned(store, "a", "rt-1", ttl=ttl)
    await store.register_runtime("rt-2", "host", 2, NOW)
    assert await lease(store, "a", "rt-2", ttl=ttl) is None
    if lease_time.fake is not None:  # the boundary, on a clock the test moves
        await lease_time.elapse(ttl)
        assert await lease(store, "a", "rt-2", ttl=ttl) is None  # now == expires: it runs
        await lease_time.elapse(0.5)
    else:
        await lease_time.elapse(ttl + lease_time.slack)
    assert await lease(store, "a", "rt-2", ttl=ttl) == fence + 1
    rec = await store.get_actor("a")
    assert rec is not None
    assert rec.lease_owner == "rt-2"


async def test_a_lease_expires_on_the_stores_clock_whatever_the_runtimes_clock_says(
    store: Store, lease_time: LeaseTime
) -> None:
    """The expiry a store records is its own now plus the ttl, and a runtime whose clock runs
    an hour ahead of it (a skewed host) finds no live lease orphaned: only messages are judged
    due on the runtime's clock."""
    await owned(store, "held", "rt-1", ttl=lease_time.ttl)
    rec = await store.get_actor("held")
    assert rec is not None
    assert rec.lease_expires == pytest.approx(
        await store.store_time() + lease_time.ttl, abs=lease_time.slack
    )
    await send(store, msg("h", "held"))
    assert await store.orphaned(NOW + 3600, 100) == []


async def test_an_expired_lease_makes_its_actor_orphaned(
    store: Store, lease_time: LeaseTime
) -> None:
    """Once a lease has expired on the store's clock, its actor with due mail is orphaned, even
    though its holder is still a registered runtime."""
    await owned(store, "held", "rt-1", ttl=lease_time.ttl)
    await send(store, msg("h", "held"))
    assert await store.orphaned(NOW, 100) == []
    await lease_time.elapse(lease_time.ttl + max(lease_time.slack, 0.5))
    assert await store.orphaned(NOW, 100) == ["held"]


async def test_mail_left_to_a_holder_that_died_is_taken_over_once_its_lease_expires(
    store: Store, lease_time: LeaseTime
) -> None:
    """A runtime's scan leaves out the mail of an actor another live runtime holds. When that
    holder dies without giving the lease back, nothing is skipped: once the lease has expired
    on the store's clock the actor is orphaned, a new owner takes it with the next fence and
    reads every message from its mailbox; a new chain of scans returns them too."""
    fence = await owned(store, "a", "rt-1", ttl=lease_time.ttl)
    await store.register_runtime("rt-2", "host", 2, NOW)
    await send(store, msg("m1"), msg("m2"))
    found, cursor = await scan(store, runtime_id="rt-2")
    assert found == []
    assert await store.orphaned(NOW, 100) == []
    await lease_time.elapse(lease_time.ttl + max(lease_time.slack, 0.5))
    assert await store.orphaned(NOW, 100) == ["a"]
    assert await scanned(store, runtime_id="rt-2") == ["m1", "m2"]
    # The chain that left them out may have gone past them (a store need not return them to
    # it again): the orphan scan is what hands them over.
    assert await scanned(store, cursor, runtime_id="rt-2") in (["m1", "m2"], [])
    assert await lease(store, "a", "rt-2", ttl=lease_time.ttl) == fence + 1
    assert [m.msg_id for m in await store.pending("a", NOW, 10)] == ["m1", "m2"]


async def test_renew_leases_extends_only_that_owners_leases_from_the_stores_now(
    store: Store, lease_time: LeaseTime
) -> None:
    """renew_leases(owner, ttl) sets the expiry of that owner's leases to the store's now + ttl,
    and of no other's."""
    fa = await owned(store, "a", "rt-1")
    fb = await owned(store, "b", "rt-2")
    b_before = await store.get_actor("b")
    await spawn(store, "free")
    await lease_time.elapse(lease_time.slack or 5.0)
    await store.renew_leases("rt-1", 500.0)
    renewed_at = await store.store_time()
    a, b, free = [await store.get_actor(x) for x in ("a", "b", "free")]
    assert a is not None
    assert b is not None
    assert free is not None
    assert (a.lease_owner, a.fence) == ("rt-1", fa)
    assert a.lease_expires == pytest.approx(renewed_at + 500.0, abs=lease_time.slack)
    assert b == b_before
    assert b.fence == fb
    assert (free.lease_owner, free.lease_expires) == (None, 0.0)


async def test_a_renewed_lease_runs_its_ttl_from_the_renewal(
    store: Store, lease_time: LeaseTime
) -> None:
    """A lease renewed before it expired outlives its first expiry by the time between."""
    ttl = lease_time.ttl
    fence = await owned(store, "a", "rt-1", ttl=ttl)
    await store.register_runtime("rt-2", "host", 2, NOW)
    await lease_time.elapse(ttl * 0.6)
    await store.renew_leases("rt-1", ttl)
    await lease_time.elapse(ttl * 0.6)  # past the first expiry, not the renewed one
    assert await lease(store, "a", "rt-2", ttl=ttl) is None
    await lease_time.elapse(ttl * 0.6 + lease_time.slack)
    assert await lease(store, "a", "rt-2", ttl=ttl) == fence + 1


async def test_store_time_is_the_clock_leases_run_on(store: Store, lease_time: LeaseTime) -> None:
    """store_time reads the store's lease clock: the caller's clock on a store that has none
    of its own, moving as it moves."""
    before = await store.store_time()
    await lease_time.elapse(lease_time.slack or 7.0)
    after = await store.store_time()
    assert after > before
    if lease_time.fake is not None:
        assert (before, after) == (NOW, NOW + 7.0)
