"""``Reader``: the reads of many activations gathered into one store call.

When thousands of actors are activated at once (a runtime opening on a store whose sessions
hold mail), each reads its record, snapshot, journal and mail. Made one by one on SQLite, that
is four hops to the reader thread per actor, each queued behind everyone else's. The reader
gathers the reads requested while its previous call was under way into the next call
(``tether.store.reads.BatchedReads``): one hop for up to ``_BATCH`` reads. Each read still
sees every write committed before it was requested, as it would alone.

Only for a store whose operations wait (no ``immediate`` write path) and that declares
``batched_reads``; otherwise, and outside the runtime's life, every read goes straight to the
store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from tether.errors import RuntimeClosed, TetherError
from tether.store.admin import OnCorrupt
from tether.store.protocol import Store
from tether.store.reads import (
    BatchedReads,
    GetActor,
    LoadJournal,
    LoadSnapshot,
    Pending,
    Read,
    read_one_by_one,
)
from tether.store.records import ActorRecord, JournalRow, Snapshot, StoredMessage

_BATCH = 2_000  # reads per store call: a bounded hop, however many are waiting

_Waiting = list[tuple[Read, "asyncio.Future[Any]"]]


class Reader:
    """The runtime's reads of actor records, snapshots, journals and mail (module docstring)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._queue: _Waiting = []
        self._taken: _Waiting = []  # in the store call under way
        self._wake = asyncio.Event()
        self._running = False

    def _gathers(self) -> BatchedReads | None:
        store = self._store
        if not self._running or store.immediate is not None:
            return None
        batched: BatchedReads | None = getattr(store, "batched_reads", None)
        return batched

    async def get_actor(self, actor_id: str) -> ActorRecord | None:
        if self._gathers() is None:
            return await self._store.get_actor(actor_id)
        found: ActorRecord | None = await self._gather(GetActor(actor_id))
        return found

    async def load_snapshot(self, actor_id: str) -> Snapshot | None:
        if self._gathers() is None:
            return await self._store.load_snapshot(actor_id)
        found: Snapshot | None = await self._gather(LoadSnapshot(actor_id))
        return found

    async def load_journal(self, actor_id: str, after_seq: int, limit: int) -> list[JournalRow]:
        if self._gathers() is None:
            return await self._store.load_journal(actor_id, after_seq, limit)
        found: list[JournalRow] = await self._gather(LoadJournal(actor_id, after_seq, limit))
        return found

    async def pending(
        self, actor_id: str, now: float, limit: int, *, on_corrupt: OnCorrupt | None = None
    ) -> list[StoredMessage]:
        if self._gathers() is None:
            return await self._store.pending(actor_id, now, limit, on_corrupt=on_corrupt)
        found: list[StoredMessage] = await self._gather(Pending(actor_id, now, limit, on_corrupt))
        return found

    async def _gather(self, read: Read) -> Any:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((read, fut))
        self._wake.set()
        value = await fut
        if isinstance(value, TetherError):  # this read's own damaged row or page
            raise value
        return value

    async def run(self) -> None:
        """Serve the gathered reads, one store call at a time, until cancelled (the runtime's
        task group); reads still waiting then fail with ``RuntimeClosed``."""
        self._running = True
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._queue:
                    self._taken, self._queue = self._queue[:_BATCH], self._queue[_BATCH:]
                    await self._serve(self._taken)
                    self._taken = []
        finally:
            self._running = False
            closed = RuntimeClosed("the runtime closed before the read was made")
            for _, fut in (*self._taken, *self._queue):
                if not fut.done():
                    fut.set_exception(closed)
            self._taken, self._queue = [], []

    async def _serve(self, taken: _Waiting) -> None:
        reads: Sequence[Read] = [read for read, _ in taken]
        batched = self._gathers()
        try:
            if batched is not None:
                outcomes = await batched.read_many(reads)
            else:  # withdrawn meanwhile (a store whose immediate path came back)
                outcomes = await read_one_by_one(self._store, reads)
        except Exception as exc:  # noqa: BLE001 - every reader of this call gets the error
            for _, fut in taken:
                if not fut.done():
                    fut.set_exception(exc)
            return
        for (_, fut), value in zip(taken, outcomes, strict=True):
            if not fut.done():  # its reader was cancelled meanwhile
                fut.set_result(value)
