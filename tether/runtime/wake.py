"""``Wake``: what a cell's own task waits on for work."""

from __future__ import annotations

import asyncio


class Wake:
    """``asyncio.Event`` for a single waiter (the cell's own task), at half its cost: the cell
    waits for it once per message when idle."""

    __slots__ = ("_set", "_waiter")

    def __init__(self) -> None:
        self._set = False
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        if not self._set:
            self._set = True
            waiter = self._waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> None:
        if self._set:
            return
        if self._waiter is not None:
            raise RuntimeError("a Wake has one waiter: the cell's own task")
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._waiter = None
