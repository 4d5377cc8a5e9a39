"""The scheduler: the loops that find work this runtime must do without being told.

* ``scan``: messages stored by other processes (the store's cursor, ``Store.scan_messages``),
  delayed messages that came due, parked steps whose deadline passed (``wake_at``), actors
  whose owner died (their leases expired on the store's clock, or their runtime's process is
  gone from this host), and replies to asks answered elsewhere; after an open, the resident
  trees (supervisors that never passivate) come back.
* ``renew_leases``: every lease this runtime holds, every third of ``lease_ttl`` (I8).
* ``purge``: dedup keys, replies and receipts past their retention.

Each loop is run by ``Lifecycle.keep_running``: a store error is logged and the loop
starts again, from where its scan stopped (the cursor and the due watermark are kept here).
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol

import anyio

from tether import telemetry
from tether.actors.actor import import_class
from tether.errors import ConfigError, CorruptRecordError
from tether.runtime.approval_desk import Approvals
from tether.runtime.cell import Cell
from tether.runtime.replies import Replies
from tether.store.hosts import runtime_gone
from tether.store.protocol import Store
from tether.store.records import MessageCursor


class SchedulerHost(Protocol):
    """What the scheduler touches of its runtime (``Runtime``, by its shape)."""

    @property
    def store(self) -> Store: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def cells(self) -> Mapping[str, Cell]: ...
    @property
    def approvals(self) -> Approvals: ...
    @property
    def replies(self) -> Replies: ...
    @property
    def runtime_id(self) -> str: ...
    @property
    def lease_ttl(self) -> float: ...
    @property
    def poll_interval(self) -> float: ...
    @property
    def retention(self) -> float: ...
    @property
    def receipt_retention(self) -> float: ...

    def start_soon(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None: ...
    def activate_soon(self, actor_id: str) -> None: ...
    def report_corrupt_actor(self, actor_id: str, exc: CorruptRecordError) -> None: ...


class Scheduler:
    """The background loops of one serving runtime. ``own_prefix``: the prefix of the message
    ids this runtime sends, which its scan leaves out (each was routed after its commit)."""

    def __init__(self, runtime: SchedulerHost, *, own_prefix: str) -> None:
        self._rt = runtime
        self._own_prefix = own_prefix
        self._timers: list[float] = []  # when to scan again: delayed sends, parked deadlines
        self._wake = asyncio.Event()
        self._scan_cursor: MessageCursor | None = None  # where the scan stopped
        self._last_due: float | None = None  # delayed messages seen up to then

    def __len__(self) -> int:
        """How many wake-up times are waiting."""
        return len(self._timers)

    def wake(self) -> None:
        """Scan now (an ask waits on a reply that may be stored already, a cell left)."""
        self._wake.set()

    def wake_at(self, when: float) -> None:
        """Scan at ``when``: a delayed message comes due, a parked step's deadline passes."""
        heapq.heappush(self._timers, when)
        self._wake.set()

    async def scan(self) -> None:
        """Find work this process must do: messages from other processes, delayed messages
        that came due, actors whose owner died, and replies to asks answered elsewhere."""
        # Kept across a restart of this loop after a store error, so that a delayed message
        # that came due while it was down is still found.
        if self._last_due is None:
            self._last_due = self._rt.clock()
        last_due = self._last_due
        next_orphan_scan = 0.0
        await self.resume_resident_trees()
        while True:
            now = self._rt.clock()
            touched: dict[str, None] = {}
            # Our own sends are left out: each one was routed (to its cell, or to activation)
            # right after its commit, by Mail.message_stored or Mail.step_committed. A message
            # that came back through the store (unparked, or a dead letter retried, from any
            # process) was not, even if we sent it first: the store returns those. The cursor
            # is the store's (Store.scan_messages): handed back as it came, never looked into.
            # So are the mail of actors another live runtime holds (their holder delivers it;
            # if it dies, the orphan scan below finds them once their lease has expired): a
            # runtime reads and activates what is its own or free, not every runtime's traffic.
            runtime_id = self._rt.runtime_id
            page = await self._rt.store.scan_messages(
                self._scan_cursor, now, 5000, skip_prefix=self._own_prefix, runtime_id=runtime_id
            )
            for found in page.messages:
                cell = self._rt.cells.get(found.actor_id)
                if cell is None:
                    touched[found.actor_id] = None
                elif found.msg_id not in cell.known:
                    cell.rescan_requested = True
                    cell.wake.set()
                    if cell.interrupting and cell.current is not None:  # a CancelTask?
                        self._rt.start_soon(cell.look_for_interrupts)
            for actor_id in await self._rt.store.due_between(last_due, now, runtime_id=runtime_id):
                cell = self._rt.cells.get(actor_id)
                if cell is None:
                    touched[actor_id] = None
                else:
                    cell.rescan_requested = True
                    cell.wake.set()
            while self._timers and self._timers[0] <= now:
                heapq.heappop(self._timers)
            if now >= next_orphan_scan:
                await self._rt.approvals.offer_pending()
                await self.reap_dead_runtimes()
                for actor_id in await self._rt.store.orphaned(now, 1000):
                    touched[actor_id] = None
                next_orphan_scan = now + min(self._rt.lease_ttl / 2, 5.0)
            for actor_id in touched:
                self._rt.activate_soon(actor_id)
            # Moved on only now that every actor the scans found is on its way: after a store
            # error above, this loop starts again from the same place and loses nothing.
            self._scan_cursor = page.cursor
            last_due = self._last_due = now
            await self._rt.replies.poll()
            if page.more:
                continue
            wait = self._rt.poll_interval
            if self._timers:
                wait = max(0.0, min(wait, self._timers[0] - self._rt.clock()))
            self._wake.clear()
            with anyio.move_on_after(wait):
                await self._wake.wait()

    async def resume_resident_trees(self) -> None:
        """Bring back every top-level actor that never passivates (supervisors): the trees
        come back by themselves when a runtime opens on an existing store."""
        for rec in await self._rt.store.list_actors(on_corrupt=self._rt.report_corrupt_actor):
            if rec.parent_id is not None or rec.status != "active":
                continue
            try:
                cls = import_class(rec.class_path)
            except ConfigError as exc:
                telemetry.log.error("cannot_resume_actor", actor_id=rec.actor_id, error=str(exc))
                continue
            if not getattr(cls, "passivates", True):
                self._rt.activate_soon(rec.actor_id)

    async def renew_leases(self) -> None:
        while True:
            await anyio.sleep(self._rt.lease_ttl / 3)
            await self._rt.store.renew_leases(self._rt.runtime_id, self._rt.lease_ttl)

    async def purge(self) -> None:
        while True:
            now = self._rt.clock()
            removed = await self._rt.store.purge(now - self._rt.retention)
            removed += await self._rt.store.purge_receipts(now - self._rt.receipt_retention)
            if removed:
                telemetry.log.info("retention_purge", rows=removed)
            await anyio.sleep(min(3600.0, self._rt.retention / 4, self._rt.receipt_retention / 4))

    async def reap_dead_runtimes(self) -> None:
        """Runtimes of this very host (pid namespace, boot: ``tether.store.hosts``) whose
        process is gone give up their leases at once. A runtime of any other host is never
        judged here: its leases expire on the store's clock."""
        runtimes = await self._rt.store.list_runtimes(
            on_corrupt=lambda key, exc: telemetry.report_corrupt(
                "runtime_record_corrupt", key, exc, runtime_id=key
            )
        )
        for r in runtimes:
            if r.runtime_id != self._rt.runtime_id and runtime_gone(r.host, r.pid, r.started_at):
                telemetry.log.info("dead_runtime_reaped", runtime_id=r.runtime_id, pid=r.pid)
                await self._rt.store.remove_runtime(r.runtime_id)
