"""Mail: a message from its sender to its cell.

Every send (``tell``, ``ask``, a handler's ``tell`` that joins its step's outbox, the
runtime's own notices) passes ``Mail.prepare`` before anything is stored: the receiver must
accept the type, the payload must encode, round-trip and fit ``max_message_bytes``, a delay
must be finite. The message gets its id (this runtime's random prefix and a counter: ids key
the effects ledger, so they never repeat across runtimes) and the trace it joins.

Then it is stored through the group committer (I1: ``tell`` and ``ask`` return after the
commit), its first delivery attempt counted in its own insert when the receiver is idle here
(I7, ``_claim_on_insert``), and, once stored, routed: handed to its cell here, or its actor
activated, or, delayed, the scheduler woken at its time (``route``). A step's outbox is routed
the same way once the step committed (``step_committed``), when its asker is answered too.

``Mail`` is the ``tether.actors.ref.Router`` of the refs a runtime makes: a ref's send is
``Mail.tell``'s own coroutine, with no hop through the facade.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import secrets
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import msgspec

from tether.actors.actor import ActorSpec
from tether.actors.messages import UNENCODABLE, Message, nesting_problem
from tether.errors import AskTimeout, ConfigError, MessageRejected
from tether.runtime import inline, tracing
from tether.runtime.activation import Activation
from tether.runtime.cell import Cell
from tether.runtime.journal import decoders
from tether.runtime.kernel import Kernel
from tether.runtime.lifecycle import Lifecycle
from tether.runtime.live_actor import LiveActor
from tether.runtime.registry import Registry, check_type
from tether.runtime.replies import Replies
from tether.runtime.scheduler import Scheduler
from tether.runtime.settings import positive
from tether.runtime.step import Step, current_step
from tether.store.records import BatchResult, Claim, NewMessage, StepCommit, StoredMessage, Write


def new_prefix() -> str:
    """The prefix of the ids of one runtime's messages: 64 random bits (msg ids key the
    effects ledger, so they never repeat across runtimes)."""
    return f"{secrets.token_hex(8)}-"


class Mail:
    """The messages one runtime (``kernel``) sends, from the sender to the cell. ``own_prefix``
    starts the id of each of them."""

    def __init__(
        self,
        kernel: Kernel,
        registry: Registry,
        replies: Replies,
        activation: Activation,
        scheduler: Scheduler,
        *,
        own_prefix: str,
        life: Lifecycle,
        encode: Callable[[Any], bytes],
        claimed: set[str],
    ) -> None:
        self._owner = kernel  # a send in a step of one of its cells joins the step's outbox
        self.own_prefix = own_prefix
        self._encode = encode
        self._clock = kernel.clock
        self._max_bytes = kernel.max_message_bytes
        self._ids = itertools.count(1)
        self._life = life
        self._registry = registry
        self._cells = registry.cells
        self._committer = kernel.committer
        self._replies = replies
        self._claimed = claimed
        self._activate_soon = activation.activate_soon
        self._failures = activation.failures  # the activations' backoffs, ended by a step
        self._wake_scans = scheduler.wake
        self._wake_at = scheduler.wake_at
        self._stop = kernel.stop
        # The ask whose message, once stored, its asker delivers itself (``inline.deliver``):
        # ``route`` hands it to the cell without waking the cell's task.
        self._inline: NewMessage | None = None

    def prepare(
        self,
        actor_id: str,
        spec: ActorSpec,
        msg: Message,
        dedup_key: str | None,
        delay: float | None,
        *,
        wants_reply: bool,
    ) -> NewMessage:
        """The message to store, once every check a send makes has passed (``spec``: the
        receiver's, active)."""
        check_type(actor_id, spec, msg)
        if delay is not None and not (type(delay) in (float, int) and 0 <= delay < math.inf):
            _check_delay(delay)  # the usual case is checked above, cheaply
        if dedup_key is not None and not (isinstance(dedup_key, str) and dedup_key):
            raise ConfigError(f"dedup_key must be a non-empty string, not {dedup_key!r}")
        try:
            payload = self._encode(msg)
            too_deep = nesting_problem(msg, payload)
        except UNENCODABLE as exc:
            too_deep = nesting_problem(msg)
            if too_deep is None:
                raise MessageRejected(
                    actor_id,
                    f"{type(msg).__name__} that cannot be encoded ({exc})",
                    spec.accepted_names,
                ) from exc
        if too_deep is not None:
            # Refused by one limit, not where the stack of the moment runs out: a payload that
            # encodes here could fail to decode at delivery, deeper in another stack.
            raise MessageRejected(
                actor_id,
                f"{type(msg).__name__} that cannot be stored: {too_deep}",
                spec.accepted_names,
            )
        if len(payload) > self._max_bytes:
            raise MessageRejected(
                actor_id,
                f"{type(msg).__name__} of {len(payload)} bytes (limit {self._max_bytes})",
                spec.accepted_names,
            )
        try:
            # A Struct does not check its fields when it is built: decoding the payload as the
            # receiver will finds a field of the wrong type now, before anything is stored,
            # instead of at delivery. The receiver's cell here gets the decoded message.
            decoded = decoders(spec)[0].decode(payload)
        except msgspec.DecodeError as exc:  # ValidationError, or a type that does not round-trip
            raise MessageRejected(
                actor_id, f"{type(msg).__name__} with an invalid field ({exc})", spec.accepted_names
            ) from exc
        now = self._clock()
        type_name = type(msg).__name__
        # The trace the message joins (tether.runtime.tracing): a step's sends pass on its own.
        step = current_step.get()
        if step is not None and not step.closed:
            inbound = step.cell.current
            traceparent = tracing.outgoing(
                inbound.traceparent if inbound is not None else None, True, actor_id, type_name
            )
        else:
            traceparent = tracing.outgoing(None, False, actor_id, type_name)
        return NewMessage(
            msg_id=f"{self.own_prefix}{next(self._ids)}",
            actor_id=actor_id,
            type=type_name,
            payload=payload,
            deliver_at=now + delay if delay else now,
            created_at=now,
            dedup_key=dedup_key,
            wants_reply=wants_reply,
            traceparent=traceparent,
            decoded=decoded,
        )

    def prepare_message(
        self, actor_id: str, spec: ActorSpec, msg: Message, dedup_key: str | None
    ) -> NewMessage:
        """A message the runtime itself sends ``actor_id`` (whose spec is ``spec``), checked as
        every send is; stored by the caller's own write, then handed to ``route``."""
        return self.prepare(actor_id, spec, msg, dedup_key, None, wants_reply=False)

    # -- sending ------------------------------------------------------------------------------

    async def tell(
        self, actor_id: str, msg: Message, *, dedup_key: str | None, delay: float | None
    ) -> None:
        if not self._life.open:
            self._life.check_open()  # raises
        spec = self._registry.active_spec(actor_id) or await self._registry.spec_for_send(
            actor_id, msg
        )
        new = self.prepare(actor_id, spec, msg, dedup_key, delay, wants_reply=False)
        step = current_step.get()
        if step is not None and not step.closed and step.cell.runtime is self._owner:
            step.add_outbox(new)  # committed with the sender's step (I2)
            return
        self._claim_on_insert(new)
        if self._committer.apply_now(new) is None:  # routed by message_stored once stored
            await self._committer.submit(new)

    async def ask(
        self, actor_id: str, msg: Message, *, timeout: float, dedup_key: str | None
    ) -> Any:
        if not self._life.open:
            self._life.check_open()  # raises
        if not (type(timeout) in (float, int) and timeout > 0):  # the usual case, checked cheaply
            positive("ask timeout", timeout)
        spec = self._registry.active_spec(actor_id) or await self._registry.spec_for_send(
            actor_id, msg
        )
        new = self.prepare(actor_id, spec, msg, dedup_key, None, wants_reply=True)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        fut: asyncio.Future[Any] = loop.create_future()
        waiting_on = new.msg_id
        replies = self._replies
        replies.wait(waiting_on, actor_id, fut)
        try:
            cell = self._claim_on_insert(new)
            if cell is not None and inline.ready(cell):
                # The receiver waits for work here, idle: if the store takes the message now,
                # this task runs its step (``tether.runtime.inline``), not the cell's.
                self._inline = new
                try:
                    result = self._committer.apply_now(new)  # a store that never waits
                finally:
                    self._inline = None
                if result is not None and new.msg_id not in result.duplicates:
                    inline.deliver(cell, new.msg_id)
                    if fut.done():  # answered by the step, committed: no wait, no deadline
                        return fut.result()
            else:
                result = self._committer.apply_now(new)  # a store that never waits (MemoryStore)
            if result is None:
                submitted = self._committer.submit(new)
                if submitted.done():
                    result = submitted.result()
                else:
                    try:
                        with anyio.fail_at(deadline):
                            result = await submitted
                    except TimeoutError:
                        raise AskTimeout(actor_id, type(msg).__name__, timeout) from None
            original = result.duplicates.get(new.msg_id)  # else routed by message_stored
            if original is not None:
                # Asked before with this dedup key: wait for (or fetch) the first reply.
                replies.unwait(waiting_on, fut)
                waiting_on = original
                replies.wait(waiting_on, actor_id, fut)
                self._wake_scans()
            # A deadline fails the reply future: cheaper than a cancel scope around the wait.
            replies.deadline(loop, deadline, fut, (actor_id, type(msg).__name__, timeout))
            return await fut
        finally:
            if waiting_on in replies:  # else answered (resolve removed it) or never waited
                replies.unwait(waiting_on, fut)

    def stop(self, actor_id: str, reason: str) -> Coroutine[Any, Any, None]:
        """A ref's ``stop``: the runtime's (``Runtime.stop``)."""
        return self._stop(actor_id, reason)

    def _claim_on_insert(self, new: NewMessage) -> Cell | None:
        """Count the first delivery attempt in the insert itself when the receiver is idle and
        active here, so it will run this message next: one commit fewer per message. If the
        process dies first, the message has one attempt too many, never one too few (I7).

        The claim is registered before the commit: a rescan may hand the cell the stored row
        before the message is routed, and that copy's attempt is counted already too.

        The receiver's cell if it was so claimed for, else None."""
        cell = self._cells.get(new.actor_id)
        if (
            cell is not None
            and cell.instance is not None
            and cell.current is None
            and not cell.buffer
            and due_now(new, self._clock)
        ):
            new.attempts = 1
            self._claimed.add(new.msg_id)
            return cell
        return None

    def local(self, write: Write) -> bool:
        """Whether ``write`` concerns no other runtime (``Batch.local``): a message for an actor
        active here, or a step whose outbox goes to actors active here and whose reply (if
        any) answers an ask waiting here, with no stop, late reply or ledger row. Another
        runtime's scan leaves those actors' mail out (another live runtime holds them), so a
        notice would wake it for nothing; a write this misjudges costs the others one poll
        interval, never a message."""
        cells = self._cells
        if type(write) is NewMessage:
            return write.actor_id in cells
        if type(write) is StepCommit:
            if write.stop is not None or write.late_replies or write.effects:
                return False
            if write.reply is not None and write.msg_id not in self._replies:
                return False
            return all(m.actor_id in cells for m in write.outbox)
        return type(write) is Claim

    # -- routing ------------------------------------------------------------------------------

    def message_stored(self, new: NewMessage, result: BatchResult | None) -> None:
        """The committer's report on a sent message (``result`` None: not stored, or not known
        to be), whether or not its sender still waits: cancelled, or its ask timed out, the
        message was stored all the same and must reach its cell."""
        if result is None or new.msg_id in result.duplicates:
            if new.attempts:
                self._claimed.discard(new.msg_id)  # no row of ours carries that attempt
            return
        self.route(new)

    def route(self, new: NewMessage) -> None:
        """After ``new`` committed (on its own, or with the write of a step or of a dead
        letter): hand it to its cell here, or wake whoever must run it."""
        if not due_now(new, self._clock):
            self._wake_at(new.deliver_at)
            return
        cell = self._cells.get(new.actor_id)
        if cell is not None:
            cell.offer(
                StoredMessage(
                    msg_id=new.msg_id,
                    actor_id=new.actor_id,
                    type=new.type,
                    payload=new.payload,
                    deliver_at=new.deliver_at,
                    attempts=new.attempts,
                    wants_reply=new.wants_reply,
                    decoded=new.decoded,
                    traceparent=new.traceparent,
                ),
                wake=new is not self._inline,
            )
        else:
            self._activate_soon(new.actor_id)

    def step_committed(
        self,
        cell: LiveActor,
        msg: StoredMessage,
        reply: Any,
        commit: StepCommit,
        result: BatchResult,
        step: Step,
    ) -> None:
        """``cell``'s step for ``msg`` committed: its asker is answered, its late replies
        delivered, its outbox routed."""
        if self._failures:
            self._failures.pop(cell.actor_id, None)
        replies = self._replies
        if msg.wants_reply and msg.msg_id in replies and not step.reply_deferred:
            replies.resolve(msg.msg_id, reply)
        for msg_id, value in step.late_replies:
            if msg_id in replies:
                replies.resolve(msg_id, value)
        for new in commit.outbox:
            if new.msg_id not in result.duplicates:
                self.route(new)


def _check_delay(delay: object) -> None:
    """Raise ``ConfigError`` unless ``delay`` is a finite number of seconds >= 0 (infinity
    would store a message that is never delivered)."""
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not (0 <= delay < math.inf):
        raise ConfigError(f"delay must be a finite number of seconds >= 0, not {delay!r}")


def due_now(new: NewMessage, clock: Callable[[], float]) -> bool:
    """Whether ``new`` may be delivered now. One sent without a delay is due at once whatever
    the clock says (as every store reads it, see ``Store.pending``): no clock read for it."""
    return new.deliver_at == new.created_at or new.deliver_at <= clock()
