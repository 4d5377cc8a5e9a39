"""Replies: the futures of asks waiting in this process, their deadlines, and the polling of
stored replies for asks answered by another process.

An ask's future waits here under the id of the message it sent (or, after a dedup hit, of
the first message sent with its key). It is answered by the step that committed its reply
(``resolve``, from ``Mail.step_committed``), by a reply found in the store
(``poll``: answered elsewhere, or before this process asked), by the dead letters
(``failed``), by the stop of the actor asked (``answer_stopped``), at its deadline
(``AskTimeout``, one loop timer for all asks: ``_Deadlines``), or when the runtime closes.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec

from tether.actors.actor import ActorSpec
from tether.actors.messages import UNENCODABLE, FallibleReply
from tether.errors import (
    ActorStopped,
    AskTimeout,
    CorruptRecordError,
    MessageDeadLettered,
    RuntimeClosed,
    TetherError,
)
from tether.store.protocol import Store


class Replies:
    """The asks waiting in one runtime. ``spec_of`` finds an actor's spec (to decode a stored
    reply as its handler's declared return type)."""

    def __init__(self, store: Store, spec_of: Callable[[str], Awaitable[ActorSpec]]) -> None:
        self._store = store
        self._spec_of = spec_of
        self._asks: dict[str, list[asyncio.Future[Any]]] = {}  # msg id -> futures waiting
        self._ask_actor: dict[str, str] = {}  # msg id -> the actor asked
        self._decoders: dict[Any, msgspec.msgpack.Decoder[Any]] = {}
        self._deadlines = _Deadlines(AskTimeout)
        self._wake = asyncio.Event()  # a reply may be stored (the store's change feed)

    def __len__(self) -> int:
        """How many messages have asks waiting on their reply."""
        return len(self._asks)

    def __contains__(self, msg_id: str) -> bool:
        return msg_id in self._asks

    def wait(self, msg_id: str, actor_id: str, fut: asyncio.Future[Any]) -> None:
        self._asks.setdefault(msg_id, []).append(fut)
        self._ask_actor[msg_id] = actor_id

    def unwait(self, msg_id: str, fut: asyncio.Future[Any]) -> None:
        futs = self._asks.get(msg_id)
        if futs is not None and fut in futs:
            futs.remove(fut)
            if not futs:
                del self._asks[msg_id]
                self._ask_actor.pop(msg_id, None)

    def deadline(
        self, loop: asyncio.AbstractEventLoop, at: float, fut: asyncio.Future[Any], what: Any
    ) -> None:
        """Fail ``fut`` with ``AskTimeout(*what)`` at ``at`` (loop time) if still waiting."""
        self._deadlines.add(loop, at, fut, what)

    def resolve(self, msg_id: str, value: Any = None, error: BaseException | None = None) -> None:
        if error is None and isinstance(value, FallibleReply):
            error = value.failure()  # a reply that stands for a failure is raised
        for fut in self._asks.pop(msg_id, ()):
            if not fut.done():
                if error is not None:
                    fut.set_exception(error)
                else:
                    fut.set_result(value)
        self._ask_actor.pop(msg_id, None)

    def failed(self, msg_id: str, actor_id: str, errors: list[str]) -> None:
        """``msg_id`` went to the dead letters with ``errors``: its asks fail with them."""
        if msg_id in self._asks:
            self.resolve(msg_id, error=MessageDeadLettered(actor_id, msg_id, errors))

    def waits_on(self, actor_id: str) -> bool:
        return actor_id in self._ask_actor.values()

    async def answer_stopped(self, actor_id: str, reason: str) -> None:
        """A message the stop moved to the dead letters answers with its stored error history
        (``MessageDeadLettered``); one whose reply the actor deferred (``reply_later``: an agent
        session's task) with ``ActorStopped``: no step of a stopped actor will answer it."""
        waiting = [msg_id for msg_id, a in self._ask_actor.items() if a == actor_id]
        await self.poll(waiting)
        for msg_id in waiting:
            if msg_id in self._asks:
                self.resolve(msg_id, error=ActorStopped(actor_id, reason))

    async def poll(self, msg_ids: list[str] | None = None) -> None:
        """Fetch stored replies for asks answered by another process (or before a dedup hit);
        of ``msg_ids`` only, if given."""
        if not self._asks:
            return
        wanted = list(self._asks) if msg_ids is None else msg_ids
        for reply in await self._store.get_replies(wanted):
            actor_id = self._ask_actor.get(reply.msg_id, "?")
            if reply.ok:
                try:
                    spec = await self._spec_of(actor_id)
                    value = self._decoder(spec).decode(reply.payload)
                except msgspec.DecodeError as exc:
                    # A reply that does not fit the handler's declared return type (or a
                    # damaged row): the asker gets a TetherError naming it, not msgspec's.
                    self.resolve(
                        reply.msg_id,
                        error=CorruptRecordError(
                            f"the reply of {actor_id!r} to message {reply.msg_id} does not "
                            f"decode as {spec.cls.__qualname__}.handle's return type: {exc}"
                        ),
                    )
                    continue
                except TetherError as exc:
                    self.resolve(reply.msg_id, error=exc)
                    continue
                self.resolve(reply.msg_id, value)
            else:
                try:
                    errors = msgspec.msgpack.decode(reply.payload, type=list[str])
                except msgspec.DecodeError:
                    errors = ["(the stored error history cannot be decoded)"]
                self.resolve(
                    reply.msg_id, error=MessageDeadLettered(actor_id, reply.msg_id, errors)
                )

    def wake(self) -> None:
        """Poll now (``keep_polling``): another process wrote to the store."""
        self._wake.set()

    async def keep_polling(self, interval: float) -> None:
        """Poll every ``interval`` seconds, or when woken: the asks of a runtime that does
        not serve are answered by the runtimes that do, and found here."""
        while True:
            self._wake.clear()
            await self.poll()
            with anyio.move_on_after(interval):
                await self._wake.wait()

    def close(self) -> None:
        """The runtime closed: every ask still waiting fails with ``RuntimeClosed``."""
        for futs in self._asks.values():
            for fut in futs:
                if not fut.done():
                    fut.set_exception(RuntimeClosed("the runtime closed before the reply arrived"))
        self._deadlines.clear()

    def _decoder(self, spec: ActorSpec) -> msgspec.msgpack.Decoder[Any]:
        dec = self._decoders.get(spec.reply_type)
        if dec is None:
            dec = self._decoders[spec.reply_type] = msgspec.msgpack.Decoder(spec.reply_type)
        return dec


def encode_reply(encode: Callable[[Any], bytes], spec: ActorSpec, value: Any) -> bytes:
    """A handler's return value as its stored reply; ``TypeError`` naming the handler if it
    cannot be stored."""
    try:
        return encode(value)
    except UNENCODABLE as exc:
        raise TypeError(
            f"{spec.cls.__qualname__}.handle returned a {type(value).__name__}, which cannot be "
            f"stored as a reply: {exc}"
        ) from exc


class _Deadlines:
    """Fails futures still waiting at their deadlines (with ``error(*args)``), on one loop timer.

    A ``loop.call_at`` per ask, its cancel and the loop's clean-up of cancelled timers cost
    more than the rest of an in-memory ask; here an ask costs a push on a heap of tuples.
    Futures that finished stay in the heap until their deadline passes, or until the heap is
    compacted (when most of it has finished), so it never holds many more entries than there
    are waiting futures. The timer fires at the earliest deadline in the heap, as a timer per
    future would.
    """

    def __init__(self, error: type[BaseException]) -> None:
        self._error = error
        self._heap: list[tuple[float, int, asyncio.Future[Any], tuple[Any, ...]]] = []
        self._order = itertools.count()  # ties on the deadline never compare futures
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # where the futures and timer are
        self._armed_for = float("inf")
        self._compact_at = 64

    def add(
        self,
        loop: asyncio.AbstractEventLoop,
        deadline: float,
        fut: asyncio.Future[Any],
        args: tuple[Any, ...],
    ) -> None:
        if loop is not self._loop:  # the first ask, or a runtime opened again on a new loop
            self.clear()
            self._loop = loop
        heap = self._heap
        heapq.heappush(heap, (deadline, next(self._order), fut, args))
        if len(heap) >= self._compact_at:
            self._compact()
        if deadline < self._armed_for:
            self._arm(loop, deadline)

    def clear(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._armed_for = None, float("inf")
        self._heap.clear()

    def _compact(self) -> None:
        """Drop the entries of finished futures; O(n) once per n/2 pushes or more."""
        live = [e for e in self._heap if not e[2].done()]
        heapq.heapify(live)
        self._heap = live
        self._compact_at = max(64, 2 * len(live))

    def _arm(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(deadline, self._fire, loop)
        self._armed_for = deadline

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer, self._armed_for = None, float("inf")
        heap, now = self._heap, loop.time()
        while heap and heap[0][0] <= now:
            _, _, fut, args = heapq.heappop(heap)
            if not fut.done():
                fut.set_exception(self._error(*args))
        if heap:
            self._arm(loop, heap[0][0])
