"""The group committer on its own: how committed writes are settled (DESIGN §8)."""

from __future__ import annotations

import asyncio

import anyio
import anyio.lowlevel
import pytest

from tether.runtime.committer import _SETTLE_SLICE, GroupCommitter
from tether.runtime.store import Batch, BatchResult, Claim

pytestmark = pytest.mark.anyio


class SlowStore:
    """Applies each batch after ``release`` is set (none by default: at the next turn)."""

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
