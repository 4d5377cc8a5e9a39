"""``ActivationQueue``: actors found with work, activated in the order found, a few at a time.

When a runtime opens on a store where thousands of sessions hold mail, the scheduler finds them
all in one scan, in mailbox order. Started all at once, every activation would queue its reads
behind everyone else's, and the sessions would go through their steps in lockstep, each
group commit holding a write of every one: the first would finish only with nearly all the
others. Here at most ``at_once`` activations run at a time, in the order the actors were found,
each holding its place until its actor has caught up with its mail (its mailbox empty for the
first time) or ``_SLOT_WAIT`` passed: the first sessions serve early, and the reads of those at
work are gathered into few store calls (``tether.runtime.reads``).

An actor that takes longer (a long backlog, an ``on_start`` or a step waiting for another
actor, which may itself wait in this queue) gives its place up after ``_SLOT_WAIT``: the bound
shapes the order of work, it never makes one activation wait for another to finish.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from tether.runtime.cell import Cell

_SLOT_WAIT = 3.0  # s an activation holds its place at most

Starter = Callable[..., object]  # Lifecycle.start_soon: fn(*args) in the runtime's task group


class ActivationQueue:
    def __init__(
        self,
        activate: Callable[[str], Awaitable[Cell | None]],
        start_soon: Starter,
        at_once: int,
    ) -> None:
        self._activate = activate
        self._start_soon = start_soon
        self._at_once = at_once
        self._queued: dict[str, None] = {}  # in the order found; a dict: each actor once
        self._workers = 0

    def __len__(self) -> int:
        return len(self._queued)

    def __contains__(self, actor_id: str) -> bool:
        return actor_id in self._queued

    def add(self, actor_id: str) -> None:
        """Activate ``actor_id`` after those queued before it (nothing if it is queued)."""
        if actor_id in self._queued:
            return
        self._queued[actor_id] = None
        if self._workers < self._at_once:
            self._workers += 1
            work: Callable[[], Coroutine[Any, Any, None]] = self._work
            self._start_soon(work)

    async def _work(self) -> None:
        try:
            while self._queued:
                actor_id = next(iter(self._queued))
                del self._queued[actor_id]
                cell = await self._activate(actor_id)
                if cell is not None and not cell.caught_up.is_set():
                    with anyio.move_on_after(_SLOT_WAIT):
                        await cell.caught_up.wait()
        finally:
            self._workers -= 1
