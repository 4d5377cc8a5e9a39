"""Inline dispatch: an asker runs the step of an idle cell in its own turn of the event loop.

An in-memory ``ask`` of an idle actor costs two wake-ups of the event loop (the cell's task, then
the asker's), a future for each, and the loop's own turns: more than the step. When the store
never waits and the cell is idle in this process, its task parked on its ``Wake`` with nothing
in its buffer but the message just stored, the asker runs that delivery itself
(``deliver``), as the cell's task would have: in the cell's context (its log
bindings, its ``current_step``), with the cell's task as the current task (``asyncio``'s and
``anyio``'s cancel scopes and timeouts entered by the handler belong to the cell), and with
``current`` set, so that every other sender sees the cell busy and queues behind it.

What is run is the delivery's coroutine, sent into, not awaited: the asker's cancellation can
never reach it. If it finishes in that one send, the step is committed and the asker's reply
future is already resolved. If it waits on something (a tool that really waits, a store that
does), the coroutine, suspended, is handed to the cell's own task (``Rest``), which goes on
with it (woken by the future it waits on) exactly where it stopped, and takes its mailbox back
once it ends. If it raises (``Exit``, ``Deactivate``: supervision decided), the exception is
handed to the cell's task too (``Raised``), which ends as it would have. Either way a cell
never runs two steps at once: ``current`` is set from the first send to the end of the step,
and the cell's task looks for a handed-over step before its buffer.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine, Generator
from typing import Any

from tether import telemetry
from tether.runtime.cell import Cell

# The current task of the event loop is swapped for the cell's while the step runs in the
# asker's turn. Private to asyncio, present in every CPython since 3.7; without them there is
# no inline dispatch (``AVAILABLE``), and every step runs in the cell's own task.
_enter_task = getattr(asyncio.tasks, "_enter_task", None)
_leave_task = getattr(asyncio.tasks, "_leave_task", None)
AVAILABLE = _enter_task is not None and _leave_task is not None


class Rest:
    """The rest of a step begun inline: awaited by the cell's task, it passes what the
    suspended coroutine waits on to that task and what the task is woken with (a value, an
    exception, its cancellation) back to the coroutine, in the context it began in."""

    __slots__ = ("_coro", "_ctx", "_first")

    def __init__(self, coro: Coroutine[Any, Any, None], ctx: contextvars.Context, first: Any):
        self._coro = coro
        self._ctx = ctx
        self._first = first

    def __await__(self) -> Generator[Any, Any, None]:
        coro, run, value = self._coro, self._ctx.run, self._first
        self._first = None
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                run(coro.close)
                raise
            except BaseException as exc:  # noqa: BLE001 - cancellation too: passed on
                try:
                    value = run(coro.throw, exc)
                except StopIteration:
                    return
            else:
                try:
                    value = run(coro.send, sent)
                except StopIteration:
                    return

    def close(self) -> None:
        """The cell's task ends without going on with the step (it was cancelled before it
        took it over): the step's coroutine is closed where it waits, in its context, as a
        cancellation there would end it."""
        self._ctx.run(self._coro.close)


class Raised:
    """An exception that ended a step begun inline, raised again in the cell's task."""

    __slots__ = ("_exc",)

    def __init__(self, exc: BaseException) -> None:
        self._exc: BaseException | None = exc

    def __await__(self) -> Generator[Any, Any, None]:
        exc, self._exc = self._exc, None
        if exc is not None:
            raise exc
        yield  # a generator: awaited once, it raises before this

    def close(self) -> None:
        self._exc = None


def _begin(coro: Coroutine[Any, Any, None], msg_id: str) -> Any:
    # The delivery's log lines carry its message, as ``Cell._loop`` binds it.
    telemetry.bind_msg_id(msg_id)
    return coro.send(None)


def start(
    coro: Coroutine[Any, Any, None], msg_id: str, ctx: contextvars.Context, task: asyncio.Task[Any]
) -> Rest | Raised | None:
    """Run ``coro``, the delivery of ``msg_id``, as ``task`` in ``ctx`` until it first waits:
    None if it finished, else what ``task`` must await to go on with it (or to raise what
    ended it)."""
    loop = asyncio.get_running_loop()
    asker = asyncio.current_task(loop)
    if asker is not None:
        _leave_task(loop, asker)  # type: ignore[misc]
    _enter_task(loop, task)  # type: ignore[misc]
    try:
        first = ctx.run(_begin, coro, msg_id)
    except StopIteration:
        return None
    except Exception as exc:  # noqa: BLE001 - the cell's task raises it, as if it had run it
        return Raised(exc)
    finally:
        _leave_task(loop, task)  # type: ignore[misc]
        if asker is not None:
            _enter_task(loop, asker)  # type: ignore[misc]
    return Rest(coro, ctx, first)


def ready(cell: Cell) -> bool:
    """Whether an asker may run ``cell``'s next step in its own turn: its task waits for work
    with nothing buffered, nothing stops it, no step of it runs or waits to go on."""
    return (
        AVAILABLE
        and cell.idle_waiting
        and not cell.buffer
        and cell.current is None
        and cell.inline_rest is None
        and cell.inline_ctx is not None
        and cell.instance is not None
        and cell.stop_reason is None
        and not cell.leaving
        and not cell.rescan_requested
        and not cell.scope.cancel_called
    )


def deliver(cell: Cell, msg_id: str) -> None:
    """Deliver ``msg_id`` (offered to ``cell`` without waking it, buffered alone) in the
    caller's turn of the loop, as the cell's task would have; or wake the cell if it is no
    longer as ``ready`` found it. What waits, or ends the cell, is handed to the cell's task."""
    buffer, task, ctx = cell.buffer, cell.inline_task, cell.inline_ctx
    if not (
        len(buffer) == 1
        and buffer[0].msg_id == msg_id
        and cell.idle_waiting
        and cell.current is None
        and cell.inline_rest is None
        and task is not None
        and ctx is not None
    ):
        cell.wake.set()
        return
    m = cell.current = buffer[0]
    telemetry.queue_age.record(max(0.0, cell.runtime.clock() - m.deliver_at))
    telemetry.in_flight.add(1)
    try:
        rest = start(cell.delivery(m), m.msg_id, ctx, task)
    except BaseException:  # KeyboardInterrupt, SystemExit: the delivery ended with them
        cell.delivered()
        raise
    if rest is None:
        cell.delivered()
        if cell.buffer or cell.stop_reason is not None or cell.leaving or cell.rescan_requested:
            cell.wake.set()  # what its loop does next: a redelivery, a stop, a rescan
    else:
        cell.inline_rest = rest
        cell.wake.set()
