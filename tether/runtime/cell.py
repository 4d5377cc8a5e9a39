"""The cell: one active actor's delivery loop.

A cell exists while its actor is active in this process and holds the actor's lease (I8). It
extends ``LiveActor`` (``live_actor.py``: the instance, its state, its mail in memory and its
writes) with the loop that

* rebuilds the state from the latest snapshot plus the journal after it (I3), then runs
  ``on_start``;
* takes messages one at a time, in mailbox order, from an in-memory buffer that local sends fill
  directly after their commit and that a store scan refills for sends from other processes;
* counts each delivery attempt durably *before* the handler runs, so that a message that kills
  the whole process is still counted and ends in dead letters after ``max_attempts`` (I7,
  ``attempts.py``);
* commits each processed message as one step — events, outbox, reply, ack — through the group
  committer (I2), and only then answers the asker and forwards the outbox; or parks the step
  (``parking.py``), or records its failure and carries out its supervisor's decision
  (``decisions.py``);
* leaves memory when idle long enough (``passivation.py``), stopped, or the runtime closes.

Invariant: ``self.state`` and ``self.seq`` always equal the fold of the committed journal, except
while a handler runs, when they also hold that handler's persisted events. A failed handler, a
rejected commit or an unknown commit outcome restores them (from memory, or from the store).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine, Generator
from typing import Any, Protocol

import msgspec
import structlog

from tether import telemetry
from tether.actors.actor import ActorSpec
from tether.errors import (
    ConfigError,
    CorruptRecordError,
    JournalWriteError,
    StepSuspended,
    ToolUnavailable,
)
from tether.runtime import attempts, decisions, parking, passivation, tracing
from tether.runtime.journal import decoders
from tether.runtime.live_actor import CellHost, LiveActor
from tether.runtime.replies import encode_reply
from tether.runtime.step import Deactivate, Exit, Step, SupervisorFailed, current_step
from tether.store.records import JournalRow, LateReply, Snapshot, StepCommit, StoredMessage


class Handover(Protocol):
    """The rest of a step an asker began for the cell (``inline.Rest``, ``inline.Raised``)."""

    def __await__(self) -> Generator[Any, Any, None]: ...
    def close(self) -> None: ...


class Cell(LiveActor):
    """One active actor: its delivery loop. Implements ``tether.actors.actor.ActorCell`` for
    its instance (through ``LiveActor``)."""

    def __init__(
        self,
        runtime: CellHost,
        spec: ActorSpec,
        actor_id: str,
        init: dict[str, Any],
        fence: int,
        parent_id: str | None,
    ) -> None:
        super().__init__(runtime, spec, actor_id, init, fence, parent_id)
        # Set the first time its mailbox is empty (or it exits): an activation's place in the
        # runtime's ActivationQueue is held until then, at most a while.
        self.caught_up = asyncio.Event()
        self.processed = 0
        self._idle = passivation.IdleTimer(self.wake)
        self._msg_decoder = decoders(spec)[0]
        self._log_context: dict[str, str] = {"actor_id": actor_id}
        if getattr(spec.cls, "is_session", False):
            self._log_context["session_id"] = actor_id  # a session id is its actor id
        # Inline dispatch (``inline.py``): whether the task waits for work in ``_next`` (the
        # only moment an asker may run a step for it), the rest of a step an asker began, and
        # the task and the context such steps run as (set when the task starts).
        self.idle_waiting = False
        self.inline_rest: Handover | None = None
        self.inline_task: asyncio.Task[Any] | None = None
        self.inline_ctx: contextvars.Context | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Recover, then deliver until stopped, passivated or deactivated. Never raises
        anything but cancellation of the whole runtime."""
        log = telemetry.log.bind(actor_id=self._actor_id)
        structlog.contextvars.bind_contextvars(**self._log_context)  # this task's own context
        # Steps run inline run in one copy of it, taken now: the log bindings of the actor;
        # what such steps set there is seen by the next of them (not by the task's own steps).
        self.inline_task, self.inline_ctx = asyncio.current_task(), contextvars.copy_context()
        try:
            with self.scope:
                try:
                    await (await self.recover()).on_start()
                except Exception as exc:  # noqa: BLE001 - any start failure goes to supervision
                    self.start_error = exc
                    self.ready.set()  # whoever waits for the start must not wait for the verdict
                    await decisions.start_failed(self, exc)
                    return
                self.ready.set()
                await self._loop()
        except Exit as exc:
            log.info("actor_left", reason=str(exc))
            await self.safe_on_stop()
        except Deactivate as exc:
            log.info("actor_deactivated", reason=str(exc))
        except Exception as exc:
            # A restart failed mid-way: the messages stay in the mailbox; the runtime records the
            # failure and backs off before it activates the actor again.
            log.error("actor_failed", error=repr(exc), exc_info=exc)
            self.runtime.activation_failed(self._actor_id, exc)
        finally:
            rest, self.inline_rest = self.inline_rest, None
            if rest is not None:  # cancelled before it took over a step begun inline
                try:
                    rest.close()
                except Exception as exc:  # noqa: BLE001 - the cell ends either way; logged
                    log.warning("inline_step_not_closed", error=repr(exc))
            self._idle.cancel()
            self.ready.set()
            self.caught_up.set()
            self.runtime.cell_exited(self)
            self.exited.set()

    async def _loop(self) -> None:
        buffer = self.buffer
        while True:
            rest = self.inline_rest
            if rest is not None:
                # A step an asker began for this cell (``inline.deliver``), first: its message
                # is buffer[0] until it commits.
                self.inline_rest = None
                try:
                    await rest
                finally:
                    self.delivered()
                continue
            if buffer and not (
                self.stop_reason is not None or self.leaving or self.rescan_requested
            ):
                msg: StoredMessage | None = buffer[0]  # what _next returns, without a coroutine
            else:
                msg = await self._next()
            if msg is not None:
                self.current = msg
                if msg.local is None:
                    telemetry.queue_age.record(max(0.0, self.runtime.clock() - msg.deliver_at))
                telemetry.in_flight.add(1)
                # Every log line of the handler (the user's own structlog calls included)
                # carries the actor and the session (bound once: the cell runs in a task of its
                # own) and the message; with tracing on, the trace too.
                telemetry.bind_msg_id(msg.msg_id)
                try:
                    await self.delivery(msg)
                finally:
                    msg = None
                    self.delivered()
                continue
            if self.inline_rest is not None:
                continue
            if self.stop_reason is not None:
                await self.safe_on_stop()  # stopped for good: the stop's commit ends the lease
                return
            if self.leaving or self.runtime.detach_if_idle(self):
                await self.safe_on_stop()
                await passivation.release(self)
                return

    # -- the mailbox in memory ----------------------------------------------------------------

    async def _next(self) -> StoredMessage | None:
        """The next message to deliver; None when stopping, leaving, or idle long enough."""
        idle = self.runtime.passivate_after
        expired = False
        while True:
            if self.stop_reason is not None or self.leaving or self.inline_rest is not None:
                return None
            if self.rescan_requested:
                self.rescan_requested = False
                await self._rescan()
            if self.buffer:
                return self.buffer[0]
            if expired:
                return None
            if not self.caught_up.is_set():
                self.caught_up.set()
            self.wake.clear()
            # Re-check after clearing: a leave() or stop during the rescan set wake already.
            if self.stop_reason is not None or self.leaving or self.rescan_requested:
                continue
            self.idle_waiting = True
            try:
                if idle is None:
                    await self.wake.wait()
                    continue
                expired = await self._idle.wait(idle)
            finally:
                self.idle_waiting = False

    def _corrupt_message(self, msg_id: str, exc: CorruptRecordError) -> None:
        """A mailbox row damaged in the store: not delivered, left in the mailbox (nothing is
        lost), logged once; the actor's other messages go on."""
        telemetry.report_corrupt(
            "mailbox_row_corrupt", msg_id, exc, actor_id=self._actor_id, msg_id=msg_id
        )

    async def _rescan(self) -> None:
        """Pick up messages stored by other processes (or before this activation)."""
        rows = await self.runtime.reads.pending(
            self._actor_id, self.runtime.clock(), 1000, on_corrupt=self._corrupt_message
        )
        fresh = [m for m in rows if m.msg_id not in self.known]
        if fresh:
            self.known.update(m.msg_id for m in fresh)
            # A message offered while the scan read the store may be newer than the rows it
            # found, or older (then it is among them): keep mailbox order either way. Messages
            # the read did not see are newer than all of it and stay behind, in their order.
            order = {m.msg_id: i for i, m in enumerate(rows)}
            head = []
            while self.buffer and self.buffer[0].local is not None:
                head.append(self.buffer.popleft())  # system messages jump the queue
            merged = sorted([*self.buffer, *fresh], key=lambda m: order.get(m.msg_id, len(rows)))
            self.buffer.clear()
            self.buffer.extend([*head, *merged])
        if len(rows) == 1000:
            self.rescan_requested = True

    def offer(self, msg: StoredMessage, *, wake: bool = True) -> None:
        """Hand the cell a message that was just committed to its mailbox. ``wake`` False:
        its asker runs it now instead (``inline.deliver``), or wakes the cell."""
        if msg.msg_id not in self.known:
            self.known.add(msg.msg_id)
            self.buffer.append(msg)
            if wake:
                self.wake.set()
            if msg.type in self.interrupting:
                self.interrupted_by(msg.type, msg.msg_id)

    def interrupted_by(self, msg_type: str, msg_id: str) -> None:
        """A message that interrupts arrived: cut short the tool call the running step waits
        on, and any it would make next (``tether.runtime.interrupts``)."""
        current = self.current
        if current is None or current.msg_id == msg_id or self.interrupt is not None:
            return  # no step runs (it is delivered next), or it is the step, or said already
        self.interrupt = f"interrupted by {msg_type}"
        if self.call_scope is not None:
            self.call_scope.cancel()

    async def look_for_interrupts(self) -> None:
        """Messages were stored for this actor by another process while a step runs: an
        interrupting one among them interrupts it (the step does not rescan until it ends)."""
        if not self.interrupting or self.current is None or self.interrupt is not None:
            return
        rows = await self.runtime.store.pending(
            self._actor_id, self.runtime.clock(), 1000, on_corrupt=self._corrupt_message
        )
        for m in rows:
            if m.type in self.interrupting and m.msg_id not in self.known:
                self.interrupted_by(m.type, m.msg_id)
                return

    # -- inline dispatch (inline.py) -----------------------------------------------------------

    def delivered(self) -> None:
        """A delivery ended (``_loop``'s, or one begun inline)."""
        telemetry.in_flight.add(-1)
        self.current = None  # not kept alive while the actor waits
        self.interrupt = None

    # -- delivery -----------------------------------------------------------------------------

    def delivery(self, m: StoredMessage) -> Coroutine[Any, Any, None]:
        """Deliver ``m``: the coroutine that does, itself (one coroutine per message, not two),
        or wrapped in its span when tracing is on."""
        if telemetry.tracing_enabled():
            return self._deliver_traced(m)
        return self._deliver_current(m)

    async def _deliver_traced(self, m: StoredMessage) -> None:
        with tracing.handling(self._actor_id, m):
            await self._deliver_current(m)

    async def _deliver_current(self, m: StoredMessage) -> None:
        """Run ``m``'s handler in a step, and commit the step (I2); or park it, or record its
        failure. Its attempt is counted first, if it is not yet (I7)."""
        if m.local is not None:
            msg = m.local  # an in-memory system message: no mailbox row, no attempts
        else:
            if m.msg_id not in self.claimed and not await attempts.claim(self, m):
                return  # dead-lettered instead
            try:
                msg = m.decoded
                if msg is None:
                    msg = self._msg_decoder.decode(m.payload)
                else:
                    m.decoded = None  # a redelivery decodes afresh: the handler may mutate it
            except msgspec.DecodeError as exc:
                await attempts.undecodable(self, m, exc)
                return
        rt = self.runtime
        step = Step(self)
        self.step = step
        token = current_step.set(step)
        state_before = self._state
        failure: Exception | None = None
        try:
            reply = await self.instance.handle(msg)  # type: ignore[union-attr]
            reply_bytes = (
                encode_reply(rt.encode, self.spec, reply)
                if m.wants_reply and not step.reply_deferred
                else None
            )
            late = self._late_replies(step) if step.late_replies else ()
        except StepSuspended as exc:
            if step.suspended is None:  # raised by hand, not by a wait the runtime knows of
                failure = ConfigError(f"StepSuspended raised outside a wait: {exc.why}")
        except Exception as exc:  # noqa: BLE001 - a handler failure is supervision's business
            failure = exc
        finally:
            step.closed = True
            self.step = None
            current_step.reset(token)
        if failure is not None or step.suspended is not None:
            self._state = state_before
            await self._not_committed(m, step, failure)
            return
        events = step.events
        if events and events[0].seq != self.seq + 1:
            # A guard's appends (``submit_staged``) were numbered while its handler ran.
            step.events = renumbered(events, self.seq)
        new_seq = self.seq + len(step.events)
        nxt = self.buffer[1] if len(self.buffer) > 1 else None
        commit = self._step_commit(m, step, new_seq, reply_bytes, late, nxt)
        # Advanced at submission, as ``submit_staged`` does: a guard's appends submitted while
        # this commits are numbered after it (set after the await, ``seq`` moved back over
        # them and the next append reused a number). A failed commit re-folds from the store.
        self.seq = new_seq
        try:
            result = await self.commit(commit)
        except JournalWriteError as exc:
            self._state = state_before
            await self._commit_failed(m, exc)
            return
        self.buffer.popleft()
        if rt.unfinished:  # an earlier attempt's commit failed (rare)
            rt.unfinished.pop(m.msg_id, None)
        self.known.discard(m.msg_id)
        self.claimed.discard(m.msg_id)
        self.processed += 1
        if commit.claim_next is not None and nxt is not None:
            nxt.attempts += 1
            self.claimed.add(commit.claim_next)
        telemetry.messages_handled.add(1)
        rt.step_committed(self, m, reply, commit, result, step)
        if step.stop_reason is not None:
            self.stop_reason = step.stop_reason
            rt.actor_stopped_itself(self, step.stop_reason)
        elif step.escalate is not None:
            await decisions.act_on(
                self, await rt.supervision.report(self, SupervisorFailed(step.escalate))
            )

    def _step_commit(
        self,
        m: StoredMessage,
        step: Step,
        new_seq: int,
        reply: bytes | None,
        late: list[LateReply] | tuple[()],
        nxt: StoredMessage | None,
    ) -> StepCommit:
        """The write of ``m``'s step: its events (with a snapshot every ``snapshot_every``), its
        outbox, its reply and late replies, its ack, its stop, the claim of ``nxt``'s attempt
        (I7 without a commit of its own), and the retries the breaker refused that the step
        went on without, settled."""
        rt = self.runtime
        every = rt.snapshot_every
        snapshot: Snapshot | None = None
        if step.events and new_seq // every > self.seq // every:
            snapshot = self.snapshot(new_seq)
        claim_next = (
            nxt.msg_id
            if nxt is not None
            and nxt.local is None
            and nxt.msg_id not in self.claimed
            and nxt.attempts < rt.max_attempts
            else None
        )
        stop = (
            rt.stop_record(self._actor_id, step.stop_reason)
            if step.stop_reason is not None
            else None
        )
        return StepCommit(
            actor_id=self._actor_id,
            fence=self.fence,
            msg_id=m.msg_id,
            events=step.events,
            outbox=step.outbox,
            reply=reply,
            snapshot=snapshot,
            claim_next=claim_next,
            stop=stop,
            late_replies=late,
            effects=step.refused_retries,
        )

    def _late_replies(self, step: Step) -> list[LateReply]:
        # Not a comprehension inside _deliver_current: the names it used would become closure
        # cells, allocated on every delivery.
        rt = self.runtime
        return [
            LateReply(msg_id, encode_reply(rt.encode, self.spec, value), rt.clock())
            for msg_id, value in step.late_replies
        ]

    async def _not_committed(self, m: StoredMessage, step: Step, failure: Exception | None) -> None:
        """``m``'s handler raised, or its step must wait (its state is rolled back already)."""
        if isinstance(failure, ToolUnavailable) and m.local is None:
            # The call was not made and cannot be before retry_at: redelivering at once would
            # burn the message's attempts in milliseconds. It waits, uncounted, instead.
            step.suspend(str(failure), until=failure.retry_at)
            failure = None
        if step.suspended is not None:
            # Waiting for a person wins over whatever the handler did after the wait began.
            await parking.park(self, m, step)
        elif failure is not None:
            await attempts.failed(self, m, failure)
            await decisions.act_on(self, await self.runtime.supervision.report(self, failure))

    async def _commit_failed(self, m: StoredMessage, exc: JournalWriteError) -> None:
        """The outcome of ``m``'s step commit is unknown: the step may or may not be in the
        store. Never resume on top of a guess: rebuild from what is committed and look at the
        mailbox again."""
        telemetry.log.error(
            "step_commit_failed", actor_id=self._actor_id, msg_id=m.msg_id, error=repr(exc)
        )
        attempts.commit_failed(self, m, exc)
        self.state_lost()
        self.rescan_requested = True
        await self.restart()


def renumbered(rows: list[JournalRow] | tuple[()], after: int) -> list[JournalRow]:
    """A step's journal rows numbered from ``after + 1``: a guard's handler persisted them
    while appends decided on other actors' effect paths took the numbers they had."""
    return [JournalRow(after + i, row.payload) for i, row in enumerate(rows, 1)]
