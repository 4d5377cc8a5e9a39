"""Passivation: an idle actor leaves memory, and gives its lease back.

A cell with nothing to deliver waits for work at most ``passivate_after`` seconds
(``IdleTimer``). Then, unless work arrived meanwhile or its class never passivates
(``Registry.detach_if_idle``), its actor leaves memory: ``on_stop`` runs and the lease is
released (``release``), so that any runtime may activate it on its next message. Nothing is
lost: its state is the fold of its journal, and its mail waits in the store.
"""

from __future__ import annotations

import asyncio
import contextlib

from tether import telemetry
from tether.errors import StaleLeaseError
from tether.runtime.live_actor import LiveActor
from tether.runtime.wake import Wake
from tether.store.records import LeaseRelease


class IdleTimer:
    """The wait of an idle cell for work, bounded. One loop timer per cell, re-armed only
    when it fires early, serves every wait: cheaper than a cancel scope per wait."""

    __slots__ = ("_deadline", "_expired", "_timer", "_wake")

    def __init__(self, wake: Wake) -> None:
        self._wake = wake
        self._deadline: float | None = None  # set while waiting for work
        self._timer: asyncio.TimerHandle | None = None
        self._expired = False

    async def wait(self, idle: float) -> bool:
        """Wait for the cell's ``wake``; True if ``idle`` seconds passed first."""
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + idle
        if self._timer is None:
            self._timer = loop.call_at(self._deadline, self._check, loop)
        try:
            await self._wake.wait()
        finally:
            self._deadline = None
        expired, self._expired = self._expired, False
        return expired

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        deadline = self._deadline
        if deadline is None:  # not waiting: the next wait arms a new timer
            return
        if loop.time() >= deadline:
            self._expired = True
            self._wake.set()
        else:
            self._timer = loop.call_at(deadline, self._check, loop)

    def cancel(self) -> None:
        """The cell exits: no timer of it stays on the loop."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


async def release(cell: LiveActor) -> None:
    """Give the lease back so that any runtime can activate the actor on its next message.
    Counted as a passivation unless the actor leaves because the runtime closes."""
    # A newer activation (here or elsewhere) may hold it already: then nothing to release.
    with contextlib.suppress(StaleLeaseError):
        await cell.runtime.committer.submit(LeaseRelease(cell.actor_id, cell.fence))
    if not cell.leaving:
        telemetry.passivations.add(1)
