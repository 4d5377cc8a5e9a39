"""A runtime's scans leave alone the actors another live runtime holds, and still lose nothing.

Runtime B serves a store where a runtime of another host (``rt-a``, registered, holding
``acct``'s lease, never renewing it: a process that died without giving it back) holds an
actor; an administration runtime (``serve=False``, which routes nothing itself) stores mail
for it. While the lease runs, B's scans return none of that mail and B never tries to activate
the actor: the holder delivers its own mail. Once the lease has expired on the store's clock,
B takes the actor over and delivers every message, in order. On SQLite (the lease on the
runtimes' fake clock) and PostgreSQL (on the server's clock: real time passes).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import pytest

import tether
from tests import sample_actors as s
from tether.store.records import Batch, LeaseAcquire, MessageCursor, MessagePage
from tether.testing import FakeClock

pytestmark = pytest.mark.anyio

LEASE = 1.5  # seconds: rt-a's lease, on the store's clock


class Spy:
    """What B's scheduler asked of the store and of activation."""

    def __init__(self, rt: tether.Runtime) -> None:
        self.scans = 0
        self.scanned: Counter[str] = Counter()  # actor id -> messages the scans returned
        self.activations: Counter[str] = Counter()  # actor id -> activations asked for
        scan = rt.store.scan_messages
        activate_soon: Callable[[str], None] = rt.activate_soon

        async def scanning(cursor: MessageCursor | None, *args: Any, **kw: Any) -> MessagePage:
            page = await scan(cursor, *args, **kw)
            self.scans += 1
            self.scanned.update(m.actor_id for m in page.messages)
            return page

        def activating(actor_id: str) -> None:
            self.activations[actor_id] += 1
            activate_soon(actor_id)

        rt.store.scan_messages = scanning  # type: ignore[method-assign]
        rt.activate_soon = activating

    async def scans_after(self, n: int) -> None:
        """Wait until ``n`` more scans than now have returned (each starts after the call)."""
        until = self.scans + n + 1  # one may be under way: it may have read before the call
        with anyio.fail_after(30):
            while self.scans < until:
                await anyio.sleep(0.01)


async def test_mail_of_an_actor_another_live_runtime_holds_is_left_to_it_until_its_lease_expires(
    store_url: str,
) -> None:
    clock = FakeClock()
    async with (
        tether.Runtime(store_url, clock=clock, poll_interval=0.02, lease_ttl=2.0) as b,
        tether.Runtime(store_url, clock=clock, serve=False) as admin,
    ):
        spy = Spy(b)
        await admin.spawn(s.Account, "acct")  # spawned, not activated: admin serves nothing
        store = b.store
        await store.register_runtime("rt-a", "another-host", 4242, clock.now())
        taken = await store.apply(Batch(acquires=[LeaseAcquire("acct", "rt-a", LEASE)]))
        assert taken.leases["acct"] is not None

        acct = admin.ref("acct")
        for amount in (1, 2, 4):
            await acct.tell(s.Deposit(amount=amount))
        await spy.scans_after(5)
        assert spy.scanned["acct"] == 0  # rt-a's mail, to rt-a
        assert spy.activations["acct"] == 0  # nor tried: rt-a holds it
        assert [m.msg_id for m in await store.pending("acct", clock.now(), 10)] != []

        # rt-a never renews: once its lease expired on the store's clock, B takes acct over.
        clock.advance(LEASE + 1)
        await anyio.sleep(LEASE + 0.5 if store_url.startswith("postgresql") else 0)
        with anyio.fail_after(30):
            while await store.pending("acct", clock.now(), 10):
                clock.advance(0.5)  # the orphan scan's turn comes on the runtime's clock
                await anyio.sleep(0.02)
        rec = await store.get_actor("acct")
        assert rec is not None
        assert rec.lease_owner == b.runtime_id
        assert spy.activations["acct"] >= 1
        assert await acct.ask(s.GetLog(), timeout=10) == [1, 2, 4]
