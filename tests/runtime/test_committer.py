"""The group committer on its own: how committed writes are settled (DESIGN §8)."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import structlog
import structlog.testing

import tether
from tests.sample_actors import Account, Deposit
from tether.runtime.committer import _SETTLE_SLICE, _YIELD_EVERY, GroupCommitter
from tether.store.records import Batch, BatchResult, Claim

pytestmark = pytest.mark.anyio


class SlowStore:
    """Applies each batch after ``release`` is set (none by default: at the next turn)."""

    immediate = None  # its writes wait: no immediate path (tether.store.protocol)

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.entered = anyio.Event()
        self.release: anyio.Event | None = None

    async def apply(self, batch: Batch) -> BatchResult:
        self.batches.append(len(batch.claims))
        self.entered.set()
        if self.release is not None:
            await self.release.wait()
        await anyio.lowlevel.checkpoint()
        return BatchResult()


def claim(i: int) -> Claim:
    return Claim(actor_id=f"a{i}", fence=1, msg_id=f"m{i}")


async def test_a_large_batch_settles_in_slices_and_a_later_batch_waits_behind_it() -> None:
    """Settled a slice per turn of the loop (so the next commit can start while the loop works
    through the rest), and still in commit order: a write committed later settles later."""
    store = SlowStore()
    committer = GroupCommitter(store)  # type: ignore[arg-type]
    n = 8 * _SETTLE_SLICE + 10  # more turns to settle than the next commit takes
    settled: list[str] = []
    futures = [committer.submit(claim(i)) for i in range(n)]
    for i, fut in enumerate(futures):

        def on_settled(_: asyncio.Future[BatchResult], i: int = i) -> None:
            settled.append(f"m{i}")

        fut.add_done_callback(on_settled)
    seen_at_first: list[bool] = []

    def first_settled(_: asyncio.Future[BatchResult]) -> None:
        # What the first write's waiter sees: the batch's last write is not settled yet, and
        # a write it sends now goes to a commit of its own, behind the first.
        seen_at_first.append(futures[-1].done())
        later = committer.submit(claim(n))
        later.add_done_callback(lambda f: settled.append(f"m{n}"))

    futures[0].add_done_callback(first_settled)
    async with anyio.create_task_group() as tg:
        tg.start_soon(committer.run)
        await asyncio.gather(*futures)
        await committer.close()
    assert seen_at_first == [False]
    assert store.batches[0] == n
    assert sum(store.batches) == n + 1
    assert settled == [f"m{i}" for i in range(n + 1)]


async def test_writes_committed_before_close_settle_as_committed() -> None:
    """A close that comes while a large batch commits settles every write of it as committed,
    not as failed, however many slices were still to go."""
    store = SlowStore()
    store.release = anyio.Event()
    committer = GroupCommitter(store)  # type: ignore[arg-type]
    futures = [committer.submit(claim(i)) for i in range(3 * _SETTLE_SLICE)]
    async with anyio.create_task_group() as tg:
        tg.start_soon(committer.run)
        await store.entered.wait()
        tg.start_soon(committer.close)
        await anyio.lowlevel.checkpoint()
        store.release.set()
    assert all(f.done() and f.exception() is None for f in futures)


def test_messages_settled_from_a_loop_callback_activate_their_actors_at_once() -> None:
    """The committer settles some writes from loop callbacks (the later slices of a large
    batch; with a store that never waits, every 32nd write), where no task runs. A message
    stored there for a passivated actor must still start its activation at once. With sniffio
    installed (as beside most HTTP clients) anyio cannot start a task from a callback of a
    loop it did not start itself: the message waited for the orphan scan, logged as
    ``message_not_routed``, its activation's coroutine never awaited."""
    import sniffio  # the condition: anyio finds the running library through it

    # Under asyncio.run, as an application runs it (anyio.run and its pytest plugin name the
    # library in a context variable that callbacks inherit, which hides the problem).
    configured = structlog.is_configured()
    try:
        logs = asyncio.run(_deposit_to_passivated_accounts(3 * _YIELD_EVERY))
    finally:
        if not configured:  # capture_logs leaves structlog "configured": the CLI then logs
            structlog.reset_defaults()  # to stdout instead of stderr
    assert sniffio.current_async_library_cvar.get() is None
    problems = [e for e in logs if e["log_level"] in ("warning", "error", "critical")]
    assert problems == []


async def _deposit_to_passivated_accounts(n: int) -> list[MutableMapping[str, Any]]:
    """Tell one deposit to each of ``n`` passivated accounts and wait until all committed
    it; the log lines of that. No scan may find the messages instead of their routing: the
    poll and the orphan scan (at lease_ttl / 2) are an hour away."""
    async with tether.Runtime(
        ":memory:", poll_interval=3600, lease_ttl=3600, passivate_after=0.01
    ) as rt:
        refs = [await rt.spawn(Account, f"acct-{i}") for i in range(n)]
        with anyio.fail_after(10):
            while rt.cells:
                await anyio.sleep(0.01)  # every account passivated
        with structlog.testing.capture_logs() as logs:
            for ref in refs:
                await ref.tell(Deposit(amount=1))
            with anyio.fail_after(10):
                while await _journaled(rt, n) < n:
                    await anyio.sleep(0.01)
    return logs


async def _journaled(rt: tether.Runtime, n: int) -> int:
    """How many of the ``n`` accounts have committed their deposit."""
    return sum([len(await rt.store.load_journal(f"acct-{i}", 0, 10)) for i in range(n)])
