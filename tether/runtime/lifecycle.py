"""The runtime's life: whether it is open, and the task group its work runs in.

A runtime is *open* from the end of its ``__aenter__`` to the start of its ``aclose``: sends,
spawns and activations are refused outside that time (``RuntimeClosed``). Its cells, its
committer and its background loops run in one task group, entered on open and cancelled on
close, after the cells left and the committer drained.

``start_soon`` starts a task in that group from a task or from a callback of the event loop
(where anyio cannot start one); ``keep_running`` runs a background loop that a store error
must not stop.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import anyio.abc

from tether import telemetry
from tether.errors import RuntimeClosed


class Lifecycle:
    """One runtime's open flag and task group. ``restart_pause``: seconds a background loop
    waits after a failure before it starts again."""

    def __init__(self, restart_pause: float) -> None:
        self.open = False
        self._restart_pause = restart_pause
        self._tg: anyio.abc.TaskGroup | None = None
        # Tasks asked for where none can be started (a loop callback): started by _starter.
        self._pending_starts: collections.deque[
            tuple[Callable[..., Coroutine[Any, Any, Any]], tuple[Any, ...]]
        ] = collections.deque()
        self._starts_wake = asyncio.Event()

    @property
    def started(self) -> bool:
        """Whether the task group was entered (it stays so after a close)."""
        return self._tg is not None

    def check_open(self) -> None:
        """Raise ``RuntimeClosed`` unless the runtime is open."""
        if not self.open:
            raise RuntimeClosed(
                "the Runtime is not open; use `async with tether.Runtime(...) as rt:`"
            )

    async def enter(self) -> None:
        """Enter a new task group, with the starter of ``start_soon``'s deferred tasks."""
        tg = self._tg = anyio.create_task_group()
        await tg.__aenter__()
        tg.start_soon(self._starter)

    async def exit(self) -> None:
        """Cancel every task of the group and wait for them to end."""
        tg = self._tg
        if tg is None:
            return
        tg.cancel_scope.cancel()
        await tg.__aexit__(None, None, None)

    def start_soon(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run ``fn(*args)`` in the runtime's task group (it ends with the runtime), whether
        called from a task or from a callback of the event loop.

        The group committer settles writes, and so routes the messages it stored, from loop
        callbacks too (the later slices of a large batch, every 32nd write of a store that
        never waits). No task runs there, and anyio cannot start one: it finds the running
        async library through the current task (with sniffio installed, as it is beside most
        HTTP clients), and raises ``NoEventLoopError``. Such starts go to ``_starter``, a task,
        which makes them on its next turn."""
        tg = self._tg
        if tg is None:
            raise RuntimeClosed("the Runtime is not open")
        if asyncio.current_task() is not None:
            tg.start_soon(fn, *args)
        else:
            self._pending_starts.append((fn, args))
            self._starts_wake.set()

    async def _starter(self) -> None:
        """Start the tasks asked for from loop callbacks (see ``start_soon``), in order."""
        pending, wake = self._pending_starts, self._starts_wake
        while True:
            await wake.wait()
            wake.clear()
            while pending and self._tg is not None:
                fn, args = pending.popleft()
                self._tg.start_soon(fn, *args)

    def keep_running(self, name: str, fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Start the background loop ``fn`` in the task group (see ``_keep_running``)."""
        if self._tg is None:
            raise RuntimeClosed("the Runtime is not open")
        self._tg.start_soon(self._keep_running, name, fn)

    async def _keep_running(self, name: str, fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run a background loop; a store error is logged and the loop starts again after a
        pause, so one bad read never stops the runtime from serving."""
        while True:
            try:
                await fn()
            except Exception as exc:  # noqa: BLE001 - logged; the loop restarts
                telemetry.log.error("background_task_failed", task=name, error=repr(exc))
                await anyio.sleep(self._restart_pause)
