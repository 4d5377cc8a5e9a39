"""The conformance suite catches the watermark bug a multi-writer store could ship.

With concurrent writers, a transaction holding a lower mailbox number can commit after a
higher one was scanned; a scan for "numbers above the last one seen" then skips it for good
(Akka Persistence JDBC's bug). SQLite and memory cannot show it (one writer at a time), so
here is a memory store whose writes can be held open like a multi-writer database's: a held
batch takes its mailbox numbers at once and is seen when it commits. Scanned by a watermark,
the suite's case fails; scanned by a cursor over commit order, it passes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from tether.store.memory import MemoryStore
from tether.store.memory.tables import Row, due
from tether.store.protocol import Store
from tether.store.records import Batch, BatchResult, MessageCursor, MessagePage, ScannedMessage
from tether.store.sequence import cursor_at, seq_after
from tether.testing.conformance import StoreTarget
from tether.testing.conformance.cursor import (
    test_a_write_that_commits_after_a_later_one_was_scanned_is_still_returned as held_write_case,
)
from tether.testing.conformance.support import NOW, msg, spawn

pytestmark = pytest.mark.anyio


class OutOfOrder(MemoryStore):
    """Messages of a held batch get their numbers when it begins, and appear when it ends.
    Its scan is the watermark: the last number returned."""

    @asynccontextmanager
    async def hold(self, batch: Batch) -> AsyncIterator[None]:
        places = [self.next_seq() for _ in batch.messages]  # taken now, below later writes'
        yield
        for place, m in zip(places, batch.messages, strict=True):
            self.mailbox[m.msg_id] = Row(place, m)  # committed: seen from now on


class CommitOrder(OutOfOrder):
    """The same store, scanned by a cursor over the order messages became visible in."""

    def __init__(self) -> None:
        super().__init__()
        self.visible: list[str] = []  # msg ids in the order they became visible

    @asynccontextmanager
    async def hold(self, batch: Batch) -> AsyncIterator[None]:
        async with super().hold(batch):
            yield
        self.visible += [m.msg_id for m in batch.messages]

    def apply_sync(self, batch: Batch) -> BatchResult:
        result = super().apply_sync(batch)
        self.visible += [m.msg_id for m in batch.messages if m.msg_id in self.mailbox]
        return result

    async def scan_messages(
        self,
        cursor: MessageCursor | None,
        now: float,
        limit: int,
        *,
        skip_prefix: str | None = None,
        runtime_id: str | None = None,
    ) -> MessagePage:
        start = seq_after(cursor, "a commit-order store")
        held = self._held_elsewhere(runtime_id)
        found: list[ScannedMessage] = []
        position = start  # how many visible messages the scan has gone past
        for msg_id in self.visible[start:]:
            if len(found) == limit:
                break
            position += 1
            row = self.mailbox.get(msg_id)
            if row is not None and due(row.msg, now) and not held(row.msg.actor_id):
                found.append(ScannedMessage(row.msg.actor_id, msg_id, row.parks > 0))
        return MessagePage(found, cursor_at(position), len(found) == limit)


def _target(store: OutOfOrder) -> StoreTarget:
    return StoreTarget(":memory:", shared=False, hold_open=lambda _, batch: store.hold(batch))


async def _opened(store: OutOfOrder) -> OutOfOrder:
    await store.open()
    await spawn(store, "a")
    return store


async def test_a_watermark_scan_skips_a_write_held_open_across_a_scan() -> None:
    """The hazard itself: the held message, numbered below one scanned, is never returned."""
    store = await _opened(OutOfOrder())
    async with store.hold(Batch(messages=[msg("first")])):
        await spawn(store, "b")
        store.apply_sync(Batch(messages=[msg("second")]))
        page = await store.scan_messages(None, NOW, 10)
        assert [m.msg_id for m in page.messages] == ["second"]
    later = await store.scan_messages(page.cursor, NOW, 10)
    assert later.messages == []  # "first" is in the mailbox, and lost to this scan


async def test_the_conformance_suite_fails_a_store_whose_scan_is_a_watermark() -> None:
    store: Store = await _opened(OutOfOrder())
    with pytest.raises(AssertionError):
        await held_write_case(store, store, _target(store))  # type: ignore[arg-type]


async def test_the_conformance_suite_passes_the_same_store_scanned_in_commit_order() -> None:
    store = await _opened(CommitOrder())
    await held_write_case(store, store, _target(store))
