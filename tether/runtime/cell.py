"""The cell: one active actor's delivery loop, recovery and atomic steps.

A cell exists while its actor is active in this process and holds the actor's lease (I8). It

* rebuilds the state from the latest snapshot plus the journal after it (I3);
* takes messages one at a time, in mailbox order, from an in-memory buffer that local sends fill
  directly after their commit and that a store scan refills for sends from other processes;
* counts each delivery attempt durably *before* the handler runs, so that a message that kills
  the whole process is still counted and ends in dead letters after ``max_attempts`` (I7);
* commits each processed message as one step — events, outbox, reply, ack — through the group
  committer (I2), and only then answers the asker and forwards the outbox.

Invariant: ``self.state`` and ``self.seq`` always equal the fold of the committed journal, except
while a handler runs, when they also hold that handler's persisted events. A failed handler, a
rejected commit or an unknown commit outcome restores them (from memory, or from the store).
"""

from __future__ import annotations

import asyncio
import contextlib
import traceback
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

import anyio
import msgspec
import structlog
from opentelemetry import trace

from tether import telemetry
from tether.actors.actor import Actor, ActorSpec
from tether.actors.messages import UNENCODABLE, DeadLettered, Event
from tether.actors.ref import ActorRef
from tether.errors import (
    ChildStartFailed,
    ConfigError,
    CorruptRecordError,
    JournalWriteError,
    MessageRejected,
    StaleLeaseError,
    StepSuspended,
    ToolUnavailable,
)
from tether.runtime import effects, notices, tracing
from tether.runtime.approval_desk import Approvals
from tether.runtime.guards import Guards
from tether.runtime.journal import decoders, fold
from tether.runtime.kernel import Kernel, Staged
from tether.runtime.reads import Reader
from tether.runtime.replies import encode_reply
from tether.runtime.step import Deactivate, Exit, Step, SupervisorFailed, current_step
from tether.runtime.supervision import Decision, Supervision
from tether.store.records import (
    PARKED,
    AttemptFailed,
    BatchResult,
    Claim,
    EffectWrite,
    JournalRow,
    LateReply,
    LeaseRelease,
    NewMessage,
    Park,
    Snapshot,
    StepCommit,
    StoredMessage,
)


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


class CellHost(Kernel, Protocol):
    """What a cell may touch of its runtime (``Runtime``, by its shape): the kernel, the
    settings of delivery, the services a step reaches, and the hooks that tell the runtime
    what became of a message or of the cell."""

    @property
    def approvals(self) -> Approvals: ...
    @property
    def guards(self) -> Guards: ...
    @property
    def supervision(self) -> Supervision: ...
    @property
    def reads(self) -> Reader: ...
    @property
    def claimed(self) -> set[str]: ...
    # msg id -> attempt -> why it did not finish (its commit failed), for its error history
    @property
    def unfinished(self) -> dict[str, dict[int, str]]: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def snapshot_every(self) -> int: ...
    @property
    def passivate_after(self) -> float | None: ...
    @property
    def encode(self) -> Callable[[Any], bytes]: ...

    def ref(self, actor_id: str) -> ActorRef: ...
    async def watch(self, watcher: str, watched: str) -> None: ...
    def route(self, new: NewMessage) -> None: ...
    def wake_at(self, when: float) -> None: ...
    def reply_failed(self, msg_id: str, actor_id: str, errors: list[str]) -> None: ...
    def activation_failed(self, actor_id: str, exc: Exception) -> None: ...
    def actor_stopped_itself(self, cell: Cell, reason: str) -> None: ...
    def detach_if_idle(self, cell: Cell) -> bool: ...
    def cell_exited(self, cell: Cell) -> None: ...
    def step_committed(
        self,
        cell: Cell,
        msg: StoredMessage,
        reply: Any,
        commit: StepCommit,
        result: BatchResult,
        step: Step,
    ) -> None: ...


class Cell:
    """One active actor. Implements ``tether.actors.actor.ActorCell`` for its instance."""

    def __init__(
        self,
        runtime: CellHost,
        spec: ActorSpec,
        actor_id: str,
        init: dict[str, Any],
        fence: int,
        parent_id: str | None,
    ) -> None:
        self.runtime = runtime
        self.parent_id = parent_id
        self.ready = asyncio.Event()
        # Set the first time its mailbox is empty (or it exits): an activation's place in the
        # runtime's ActivationQueue is held until then, at most a while.
        self.caught_up = asyncio.Event()
        self.scope = anyio.CancelScope()
        self.local_seq = 0
        self.current: StoredMessage | None = None  # the message being delivered
        self.spec = spec
        self._actor_id = actor_id
        self.init = init
        self.fence = fence
        self.buffer: deque[StoredMessage] = deque()
        # receipts that ride with the next commit of this actor (see effects._receipt)
        self.deferred: list[EffectWrite | Staged] = []
        self.unsubmitted = 0  # staged guard appends not yet submitted (see stage_events)
        self.loop_watch: Any = None  # this actor's loop guard, once found (tether.runtime.guards)
        # tool name -> calls that failed in a row here (in memory: the gate's "repeated
        # failures" trigger; a restart starts the count again)
        self.tool_failures: dict[str, int] = {}
        self.known: set[str] = set()  # msg ids in the buffer or being processed
        # msg ids whose next attempt is already counted in the store: the runtime's, so that
        # a new instance after a restart does not count it again
        self.claimed = runtime.claimed
        self.seq = 0
        self._state: Any = None
        self.instance: Actor[Any] | None = None
        self.step: Step | None = None
        self.stop_reason: str | None = None
        self.leaving = False
        self.wake = Wake()
        self._idle_deadline: float | None = None  # set while waiting for work
        self._idle_timer: asyncio.TimerHandle | None = None
        self._idle_expired = False
        self.exited = asyncio.Event()
        self.rescan_requested = True
        self.processed = 0
        self.start_error: Exception | None = None  # why recovery or on_start failed, if it did
        # rt.spawn waits for this start and raises ChildStartFailed to its caller itself
        self.start_awaited = False
        self._msg_decoder = decoders(spec)[0]
        # Message types whose arrival interrupts the running step's tool call (CancelTask),
        # why the current step was interrupted, and the scope of its call in flight.
        self.interrupting = frozenset(t.__name__ for t in spec.message_types if t.interrupts)
        self.interrupt: str | None = None
        self.call_scope: anyio.CancelScope | None = None
        self._log_context: dict[str, str] = {"actor_id": actor_id}
        if getattr(spec.cls, "is_session", False):
            self._log_context["session_id"] = actor_id  # a session id is its actor id

    # -- ActorCell protocol (what the actor instance sees) -------------------------------------

    @property
    def actor_id(self) -> str:
        return self._actor_id

    @property
    def state(self) -> Any:
        return self._state

    def persist(self, event: Event) -> None:
        step = self.step
        if step is None or step.closed:
            raise ConfigError(f"{self._actor_id}: persist() is only allowed inside handle()")
        if not isinstance(event, Event):
            raise ConfigError(
                f"{self._actor_id}: persist() takes a tether.Event, not {type(event).__name__}"
            )
        if type(event) not in self.spec.event_types:
            accepted = ", ".join(t.__name__ for t in self.spec.event_types) or "none"
            raise ConfigError(
                f"{self._actor_id}: {type(event).__name__} is not an event type of "
                f"{self.spec.cls.__qualname__}.apply (it folds: {accepted})"
            )
        payload = self.runtime.encode(event)
        state = self._started().apply(self._state, event)
        if state is None and self.spec.cls.initial_state is not None:
            # An apply that forgot its `return` would make the state None from here on (and in
            # every recovery): the handler fails now, naming it, and nothing is journaled.
            raise ConfigError(
                f"{self._actor_id}: {self.spec.cls.__qualname__}.apply returned None for "
                f"{type(event).__name__}; it must return the new state"
            )
        self._state = state
        step.add_event(JournalRow(self.seq + len(step.events) + 1, payload))

    def ref(self, actor_id: str) -> ActorRef:
        return self.runtime.ref(actor_id)

    @property
    def last_effect_key(self) -> str | None:
        return self.step.last_key if self.step is not None else None

    def self_ref(self) -> ActorRef:
        return self.runtime.ref(self._actor_id)

    def escalate(self, reason: str) -> None:
        if self.step is None or self.step.closed:
            raise ConfigError(f"{self._actor_id}: escalate() is only allowed inside handle()")
        self.step.escalate = reason

    async def watch(self, actor_id: str) -> None:
        await self.runtime.watch(self._actor_id, actor_id)

    async def effect(self, tool: Any, args: dict[str, Any]) -> Any:
        step = self.step
        if step is None or step.closed:
            raise ConfigError(f"{self._actor_id}: effect() is only allowed inside handle()")
        return await effects.perform(self, step, tool, args)

    def append_events(self, events: Sequence[Event]) -> asyncio.Future[Any]:
        """Apply ``events`` to the state now and commit them to the journal; the returned
        future resolves when they are committed. For guards (see ``stage_events``)."""
        staged = self.stage_events(events)
        if staged is not None:
            return staged.submit()
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def stage_events(self, events: Sequence[Event], *, applied: bool = False) -> Staged | None:
        """Apply ``events`` to the state now; their journal append is submitted later, with
        the write of whoever decided them (``Staged.submit``), so both land in one group
        commit. For guards, whose decisions are made on other actors' effect paths rather
        than in a handler of their own.

        Sequence numbers are assigned at submission, so the journal stays in order whatever
        order the stagers submit in. If an append is not committed, the state in memory is
        ahead of the journal: the instance is re-folded from the store.
        """
        if not events:
            return None
        if not applied:
            instance = self._started()
            for event in events:
                self._state = instance.apply(self._state, event)
        self.unsubmitted += 1
        return Staged(self, list(events))

    def replace_state(self, state: Any) -> None:
        """A guard whose decision already folded its events: take the folded state."""
        self._state = state

    def apply_in_memory(self, events: Sequence[Event]) -> None:
        """Apply events that are never journaled because the state can be rebuilt from
        elsewhere on start (a loop guard's observations: the session's effects ledger)."""
        instance = self._started()
        for event in events:
            self._state = instance.apply(self._state, event)

    def _started(self) -> Actor[Any]:
        """The live instance; an error naming the actor before recovery made one."""
        if self.instance is None:
            raise ConfigError(
                f"{self._actor_id}: the actor has not started (its state is not folded)"
            )
        return self.instance

    def submit_staged(self, staged: Staged) -> asyncio.Future[Any]:
        rows = [
            JournalRow(self.seq + i + 1, self.runtime.encode(e))
            for i, e in enumerate(staged.events)
        ]
        self.unsubmitted -= 1
        every = self.runtime.snapshot_every
        new_seq = self.seq + len(rows)
        # The state may hold staged events not yet in the journal: snapshot only when none are.
        snapshot = (
            Snapshot(new_seq, self.runtime.encode(self._state))
            if self.unsubmitted == 0 and new_seq // every > self.seq // every
            else None
        )
        self.seq = new_seq
        # A step with no mailbox message is a pure journal append.
        write = StepCommit(
            actor_id=self._actor_id,
            fence=self.fence,
            msg_id=f"append:{self._actor_id}:{new_seq}",
            events=rows,
            outbox=[],
            snapshot=snapshot,
        )
        fut = self.runtime.committer.submit(write)
        fut.add_done_callback(self._append_settled)
        return fut

    def _append_settled(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or fut.exception() is None:
            return
        telemetry.log.error(
            "guard_append_failed", actor_id=self._actor_id, error=repr(fut.exception())
        )
        self.runtime.start_soon(self._refold)

    async def _refold(self) -> None:
        try:
            await self.restart()
        except Exception as exc:  # noqa: BLE001 - logged; the next use finds the old state
            telemetry.log.error("guard_refold_failed", actor_id=self._actor_id, error=repr(exc))

    def defer(self, write: EffectWrite | Staged) -> None:
        """Commit ``write`` (a receipt, a guard's events) with this actor's next commit
        instead of on its own."""
        self.deferred.append(write)

    def _submit_deferred(self) -> list[asyncio.Future[Any]]:
        if not self.deferred:
            return []
        writes, self.deferred = self.deferred, []
        submit = self.runtime.committer.submit
        # A loop, not a comprehension: that would make ``self`` a closure cell on every call.
        futures = []
        for w in writes:
            futures.append(w.submit() if isinstance(w, Staged) else submit(w))  # noqa: PERF401
        return futures

    async def commit_effect(self, write: EffectWrite, *with_: asyncio.Future[Any]) -> None:
        """Commit one ledger row now (an intent must be durable before its call), in the same
        group commit as the already submitted writes ``with_`` (guard journal appends)."""
        deferred = self._submit_deferred()
        fut = self.runtime.committer.submit(write)  # no await before: one batch with `with_`
        try:
            await _all_settled((*with_, *deferred, fut))
        except StaleLeaseError as exc:
            telemetry.stale_commits.add(1)
            self._state_lost()
            raise Deactivate(str(exc)) from exc

    def defer_reply(self) -> str:
        step = self.step
        if step is None or step.closed or self.current is None or self.current.local is not None:
            raise ConfigError(f"{self._actor_id}: reply_later() is only allowed inside handle()")
        step.reply_deferred = True
        return self.current.msg_id

    def reply_to(self, msg_id: str, value: Any) -> None:
        step = self.step
        if step is None or step.closed:
            raise ConfigError(f"{self._actor_id}: reply() is only allowed inside handle()")
        step.add_late_reply(msg_id, value)

    def stop_self(self, reason: str) -> None:
        if self.step is None or self.step.closed:
            raise ConfigError(f"{self._actor_id}: stop() is only allowed inside handle()")
        if not isinstance(reason, str):
            # None here meant "do not stop" (silently), and another value was stored as the
            # reason: refused, by name.
            raise ConfigError(f"{self._actor_id}: stop() takes a reason string, not {reason!r}")
        self.step.stop_reason = reason

    # -- lifecycle ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Recover, then deliver until stopped, passivated or deactivated. Never raises
        anything but cancellation of the whole runtime."""
        log = telemetry.log.bind(actor_id=self._actor_id)
        structlog.contextvars.bind_contextvars(**self._log_context)  # this task's own context
        try:
            with self.scope:
                try:
                    await (await self._recover()).on_start()
                except Exception as exc:  # noqa: BLE001 - any start failure goes to supervision
                    self.start_error = exc
                    self.ready.set()  # whoever waits for the start must not wait for the verdict
                    await self._start_failed(exc)
                    return
                self.ready.set()
                await self._loop()
        except Exit as exc:
            log.info("actor_left", reason=str(exc))
            await self._safe_on_stop()
        except Deactivate as exc:
            log.info("actor_deactivated", reason=str(exc))
        except Exception as exc:
            # A restart failed mid-way: the messages stay in the mailbox; the runtime records the
            # failure and backs off before it activates the actor again.
            log.error("actor_failed", error=repr(exc), exc_info=exc)
            self.runtime.activation_failed(self._actor_id, exc)
        finally:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
                self._idle_timer = None
            self.ready.set()
            self.caught_up.set()
            self.runtime.cell_exited(self)
            self.exited.set()

    async def _loop(self) -> None:
        buffer = self.buffer
        while True:
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
                    await self._deliver(msg)
                finally:
                    telemetry.in_flight.add(-1)
                    self.current = msg = None  # not kept alive while the actor waits
                    self.interrupt = None
                continue
            if self.stop_reason is not None:
                await self._safe_on_stop()  # stopped for good: the stop's commit ends the lease
                return
            if self.leaving or self.runtime.detach_if_idle(self):
                await self._safe_on_stop()
                await self._release()
                return

    async def _start_failed(self, exc: Exception) -> None:
        """Recovery or on_start failed: a failed (re)start, reported like any failure."""
        telemetry.log.error("actor_start_failed", actor_id=self._actor_id, error=repr(exc))
        if self.parent_id is None:
            if not (self.start_awaited and isinstance(exc, ChildStartFailed)):
                self.runtime.activation_failed(self._actor_id, exc)  # tried again later
            return
        decision = await self.runtime.supervision.report(self, exc, starting=True)
        if decision.kind == "stop":
            await self._commit(self.runtime.stop_record(self._actor_id, decision.reason))
            self.runtime.forget_status(self._actor_id, "stopped")
            self.runtime.stopped_for_good(self._actor_id, decision.reason)
        elif decision.kind in ("restart", "resume"):
            self.runtime.supervision.restart_later(
                self.parent_id, [], 0.0, retry=(self._actor_id, decision.delay)
            )

    def cancel(self) -> None:
        """Cancel whatever the actor is doing (shutdown timeout or ``brutal``)."""
        self.scope.cancel()

    def leave(self) -> None:
        """Finish the current message, then release the lease and leave (runtime shutdown)."""
        self.leaving = True
        self.wake.set()

    async def _recover(self) -> Actor[Any]:
        """Fold the committed journal (after the latest snapshot) into a fresh instance (I3);
        the instance, now the live one."""
        instance = self._new_instance()
        state, seq = await fold(
            self.runtime.reads, self.runtime.encode, self.spec, self._actor_id, instance
        )
        self._state, self.seq, self.instance = state, seq, instance
        return instance

    def _new_instance(self) -> Actor[Any]:
        try:
            instance = self.spec.cls(**self.init)
        except TypeError as exc:
            raise ConfigError(
                f"cannot construct {self.spec.cls.__qualname__}(**{self.init!r}): {exc}"
            ) from exc
        instance._tether_cell = self
        return instance

    async def restart(self) -> None:
        """Replace the instance and re-fold the state from the store (never resumes in place)."""
        if self.instance is not None:
            with anyio.CancelScope(shield=True):
                await self._safe_on_stop()
        await (await self._recover()).on_start()

    async def _safe_on_stop(self) -> None:
        if self.instance is None:  # never started: nothing to stop
            return
        if self.start_error is not None:
            return  # its on_start failed: it never started, there is nothing to stop
        try:
            await self.instance.on_stop()
        except Exception as exc:  # noqa: BLE001 - never lets a failure kill the runtime
            telemetry.log.warning("on_stop_failed", actor_id=self._actor_id, error=repr(exc))

    async def _next(self) -> StoredMessage | None:
        """The next message to deliver; None when stopping, leaving, or idle long enough."""
        idle = self.runtime.passivate_after
        expired = False
        while True:
            if self.stop_reason is not None or self.leaving:
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
            if idle is None:
                await self.wake.wait()
                continue
            expired = await self._wait_idle(idle)

    async def _wait_idle(self, idle: float) -> bool:
        """Wait for ``wake``; True if ``idle`` seconds passed first. One timer per cell, re-armed
        only when it fires early, serves every wait: cheaper than a cancel scope per wait."""
        loop = asyncio.get_running_loop()
        self._idle_deadline = loop.time() + idle
        if self._idle_timer is None:
            self._idle_timer = loop.call_at(self._idle_deadline, self._idle_check, loop)
        try:
            await self.wake.wait()
        finally:
            self._idle_deadline = None
        expired, self._idle_expired = self._idle_expired, False
        return expired

    def _idle_check(self, loop: asyncio.AbstractEventLoop) -> None:
        self._idle_timer = None
        deadline = self._idle_deadline
        if deadline is None:  # not waiting: the next wait arms a new timer
            return
        if loop.time() >= deadline:
            self._idle_expired = True
            self.wake.set()
        else:
            self._idle_timer = loop.call_at(deadline, self._idle_check, loop)

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

    def offer_local(self, msg: Any) -> None:
        """Deliver an in-memory system message next (it has no mailbox row)."""
        self.local_seq += 1
        local = StoredMessage(
            msg_id=f"local:{self._actor_id}:{self.local_seq}",
            actor_id=self._actor_id,
            type=type(msg).__name__,
            payload=b"",
            deliver_at=0.0,
            attempts=0,
            wants_reply=False,
            local=msg,
            traceparent=tracing.current(),  # e.g. the failed child's step: its trace
        )
        self.known.add(local.msg_id)
        # After the message being processed (if any), before the rest: OTP's exit signals jump
        # the queue too.
        busy = self.current is not None and self.buffer and self.buffer[0] is self.current
        self.buffer.insert(1 if busy else 0, local)
        self.wake.set()

    def offer(self, msg: StoredMessage) -> None:
        """Hand the cell a message that was just committed to its mailbox."""
        if msg.msg_id not in self.known:
            self.known.add(msg.msg_id)
            self.buffer.append(msg)
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

    async def _release(self) -> None:
        """Give the lease back so that any runtime can activate the actor on its next message."""
        # A newer activation (here or elsewhere) may hold it already: then nothing to release.
        with contextlib.suppress(StaleLeaseError):
            await self.runtime.committer.submit(LeaseRelease(self._actor_id, self.fence))
        if not self.leaving:
            telemetry.passivations.add(1)

    # -- delivery -----------------------------------------------------------------------------

    def _deliver(self, m: StoredMessage) -> Coroutine[Any, Any, None]:
        """Deliver ``m``: the coroutine that does, itself (one coroutine per message, not two),
        or wrapped in its span when tracing is on."""
        if telemetry.tracing_enabled():
            return self._deliver_traced(m)
        return self._deliver_current(m)

    async def _deliver_traced(self, m: StoredMessage) -> None:
        attributes = {
            "tether.actor_id": self._actor_id,
            "tether.msg_id": m.msg_id,
            "tether.message_type": m.type,
        }
        # A child of the context the message was sent in, whatever process sent it and however
        # often it was delivered before: every attempt at a task's steps is in its one trace.
        with telemetry.tracer.start_as_current_span(
            "tether.handle",
            context=tracing.parent_context(m.traceparent),
            kind=trace.SpanKind.CONSUMER,
            attributes=attributes,
        ) as span:
            trace_id = span.get_span_context().trace_id
            structlog.contextvars.bind_contextvars(trace_id=f"{trace_id:032x}")
            try:
                await self._deliver_current(m)
            finally:
                structlog.contextvars.unbind_contextvars("trace_id")
                # Which delivery of the message this was (counted once claimed): a step run
                # again after a failure or a crash is another span of the same trace.
                span.set_attribute("tether.delivery", m.attempts)

    async def _deliver_current(self, m: StoredMessage) -> None:
        rt = self.runtime
        max_attempts = rt.max_attempts
        transient = m.local is not None  # an in-memory system message: no mailbox row
        if transient:
            msg = m.local
        else:
            if m.msg_id not in self.claimed:
                if m.attempts >= max_attempts:
                    # Every counted attempt began and none finished: the process died each time.
                    await self._fail(
                        m,
                        _unfinished(m, m.attempts, self.runtime.unfinished.get(m.msg_id)),
                        f"delivered {m.attempts} times without finishing",
                    )
                    return
                await self._commit(Claim(self._actor_id, self.fence, m.msg_id))
                m.attempts += 1
                self.claimed.add(m.msg_id)
                if m.attempts > 1:
                    telemetry.redeliveries.add(1)
            try:
                msg = m.decoded
                if msg is None:
                    msg = self._msg_decoder.decode(m.payload)
                else:
                    m.decoded = None  # a redelivery decodes afresh: the handler may mutate it
            except msgspec.DecodeError as exc:
                errors = [
                    *_unfinished(m, m.attempts - 1, self.runtime.unfinished.get(m.msg_id)),
                    f"attempt {m.attempts}: undecodable payload for {self._actor_id!r}: {exc}",
                ]
                await self._fail(m, errors, "undecodable message")
                return

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
        if isinstance(failure, ToolUnavailable) and m.local is None:
            # The call was not made and cannot be before retry_at: redelivering at once would
            # burn the message's attempts in milliseconds. It waits, uncounted, instead.
            step.suspend(str(failure), until=failure.retry_at)
            failure = None
        if step.suspended is not None:
            # Waiting for a person wins over whatever the handler did after the wait began.
            self._state = state_before
            await self._park(m, step)
            return
        if failure is not None:
            self._state = state_before
            await self._handler_failed(m, failure)
            return

        events = step.events
        new_seq = self.seq + len(events)
        snapshot = None
        every = rt.snapshot_every
        if events and new_seq // every > self.seq // every:
            snapshot = self._snapshot(new_seq)
        nxt = self.buffer[1] if len(self.buffer) > 1 else None
        claim_next = (
            nxt.msg_id
            if nxt is not None
            and nxt.local is None
            and nxt.msg_id not in self.claimed
            and nxt.attempts < max_attempts
            else None
        )
        stop = (
            rt.stop_record(self._actor_id, step.stop_reason)
            if step.stop_reason is not None
            else None
        )
        commit = StepCommit(
            actor_id=self._actor_id,
            fence=self.fence,
            msg_id=m.msg_id,
            events=events,
            outbox=step.outbox,
            reply=reply_bytes,
            snapshot=snapshot,
            claim_next=claim_next,
            stop=stop,
            late_replies=late,
        )
        try:
            result = await self._commit(commit)
        except JournalWriteError as exc:
            # The outcome is unknown: the step may or may not be in the store. Never resume on
            # top of a guess: rebuild from what is committed and look at the mailbox again.
            self._state = state_before
            telemetry.log.error(
                "step_commit_failed", actor_id=self._actor_id, msg_id=m.msg_id, error=repr(exc)
            )
            # Say why this attempt did not finish, should the message end in dead letters.
            rt.unfinished.setdefault(m.msg_id, {})[m.attempts] = (
                f"attempt {m.attempts}: its step could not be committed: {exc}"
            )
            await self._reload()
            return
        self.seq = new_seq
        self.buffer.popleft()
        if rt.unfinished:  # an earlier attempt's commit failed (rare)
            rt.unfinished.pop(m.msg_id, None)
        self.known.discard(m.msg_id)
        self.claimed.discard(m.msg_id)
        self.processed += 1
        if claim_next is not None and nxt is not None:
            nxt.attempts += 1
            self.claimed.add(claim_next)
        telemetry.messages_handled.add(1)
        rt.step_committed(self, m, reply, commit, result, step)
        if step.stop_reason is not None:
            self.stop_reason = step.stop_reason
            rt.actor_stopped_itself(self, step.stop_reason)
        elif step.escalate is not None:
            await self._act_on(await rt.supervision.report(self, SupervisorFailed(step.escalate)))

    def _snapshot(self, seq: int) -> Snapshot | None:
        """The state at ``seq`` as a snapshot, or None if it cannot be encoded (an int beyond 64
        bits, an object msgspec does not know): a snapshot only saves folding, so the step
        commits without one and recovery folds the journal, instead of the actor failing."""
        try:
            return Snapshot(seq, self.runtime.encode(self._state))
        except UNENCODABLE as exc:
            telemetry.log.warning(
                "snapshot_skipped", actor_id=self._actor_id, seq=seq, error=repr(exc)
            )
            return None

    def _late_replies(self, step: Step) -> list[LateReply]:
        # Not a comprehension inside _deliver_current: the names it used would become closure
        # cells, allocated on every delivery.
        rt = self.runtime
        return [
            LateReply(msg_id, encode_reply(rt.encode, self.spec, value), rt.clock())
            for msg_id, value in step.late_replies
        ]

    async def _park(self, m: StoredMessage, step: Step) -> None:
        """Set the message aside until its wait is resolved; the actor goes on with the next."""
        if m.local is not None:
            raise ConfigError(f"{self._actor_id}: a system message cannot wait for a person")
        await self._commit(
            Park(
                self._actor_id,
                self.fence,
                m.msg_id,
                step.park_until,
                step.park_effect,
                step.park_approval,
                step.park_notices,
            )
        )
        self.buffer.popleft()
        self.known.discard(m.msg_id)
        self.claimed.discard(m.msg_id)
        if step.park_until < PARKED:
            self.runtime.wake_at(step.park_until)
        if step.park_approval is not None:
            self.runtime.approvals.requested(step.park_approval)
            notices.wake(self.runtime, list(step.park_notices))
        telemetry.log.info(
            "step_parked", actor_id=self._actor_id, msg_id=m.msg_id, why=step.suspended
        )

    async def _handler_failed(self, m: StoredMessage, exc: Exception) -> None:
        """Record the attempt's error (dead-lettering at max_attempts), then let supervision decide."""
        telemetry.log.warning(
            "handler_failed",
            actor_id=self._actor_id,
            msg_id=m.msg_id,
            attempt=m.attempts,
            error=repr(exc),
            traceback="".join(traceback.format_exception(exc)[-3:]),
        )
        if m.local is not None:
            self.buffer.popleft()  # a system message is not redelivered; supervision decides
            self.known.discard(m.msg_id)
        else:
            errors = [
                *_unfinished(m, m.attempts - 1, self.runtime.unfinished.get(m.msg_id)),
                f"attempt {m.attempts}: {type(exc).__name__}: {exc}",
            ]
            if m.attempts >= self.runtime.max_attempts:
                await self._fail(m, errors, f"failed {m.attempts} times")
            else:
                m.errors = errors
                # The same write counts the redelivery's attempt: one commit per failure, not two.
                await self._commit(
                    AttemptFailed(self._actor_id, self.fence, m.msg_id, errors, claim_again=True)
                )
                m.attempts += 1
        await self._act_on(await self.runtime.supervision.report(self, exc))

    async def _act_on(self, decision: Decision) -> None:
        """Carry out a supervisor's decision about this actor (DESIGN §5)."""
        sup = self.runtime.supervision
        match decision.kind:
            case "resume":
                pass  # same instance; the state was already rolled back to before the message
            case "restart":
                if decision.delay > 0:
                    sup.held[self._actor_id] = "backing off"
                    telemetry.supervision_event(
                        "actor_backing_off", self._actor_id, delay=decision.delay
                    )
                    await self.runtime.time.sleep(decision.delay)
                sup.held[self._actor_id] = "restarting"
                failed: Exception | None = None
                try:
                    async with sup.fresh_start(self):
                        await self.restart()
                except Exception as exc:  # noqa: BLE001 - a failed restart, reported as one
                    failed = exc
                finally:
                    sup.held.pop(self._actor_id, None)
                if failed is not None:
                    await self._restart_failed(failed)
            case "exit":
                raise Exit(decision.reason)
            case "stop":
                await self._commit(self.runtime.stop_record(self._actor_id, decision.reason))
                sup.held.pop(self._actor_id, None)
                self.runtime.forget_status(self._actor_id, "stopped")  # its supervisor's decision
                self.runtime.stopped_for_good(self._actor_id, decision.reason)
                raise Exit(decision.reason)
            case "stopped":
                raise Exit(decision.reason)  # already stopped for good by supervision

    async def _restart_failed(self, exc: Exception) -> None:
        """A restart in place failed (recovery or ``on_start``): it is reported as the failed
        start it is, which counts toward the supervisor's intensity, and this instance leaves."""
        self.start_error = exc
        await self._start_failed(exc)
        raise Exit(f"its restart failed: {type(exc).__name__}: {exc}")

    async def _fail(self, m: StoredMessage, errors: list[str], why: str) -> None:
        """Move ``m`` to dead letters with its error history; the actor goes on (I7). An actor
        that accepts ``tether.DeadLettered`` is told, in the same transaction."""
        reason = f"{why}; max_attempts={self.runtime.max_attempts}"
        notice = self._dead_letter_notice(m, errors, reason)
        result = await self._commit(
            AttemptFailed(
                self._actor_id,
                self.fence,
                m.msg_id,
                errors,
                dead_letter_reason=reason,
                now=self.runtime.clock(),
                notice=notice,
            )
        )
        if notice is not None and notice.msg_id not in result.duplicates:
            self.runtime.route(notice)
        if self.buffer and self.buffer[0] is m:
            self.buffer.popleft()
        self.runtime.unfinished.pop(m.msg_id, None)
        self.known.discard(m.msg_id)
        self.claimed.discard(m.msg_id)
        telemetry.dead_letters.add(1)
        telemetry.log.error(
            "message_dead_lettered",
            actor_id=self._actor_id,
            msg_id=m.msg_id,
            reason=reason,
            errors=errors,
        )
        self.runtime.reply_failed(m.msg_id, self._actor_id, [*errors, reason])

    def _dead_letter_notice(
        self, m: StoredMessage, errors: list[str], reason: str
    ) -> NewMessage | None:
        """The ``DeadLettered`` to store with ``m``'s move to the dead letters, if the actor
        accepts one (never for a notice itself: a failing notice does not beget another)."""
        if DeadLettered not in self.spec.message_types or m.type == DeadLettered.__name__:
            return None
        notice = DeadLettered(
            msg_id=m.msg_id, msg_type=m.type, payload=m.payload, reason=reason, errors=errors
        )
        prepare = self.runtime.prepare_message
        key = f"dead-letter:{m.msg_id}"  # one notice per dead letter, whoever moves it
        try:
            return prepare(self._actor_id, self.spec, notice, key)
        except MessageRejected:  # over max_message_bytes with the payload: told without it
            return prepare(
                self._actor_id, self.spec, msgspec.structs.replace(notice, payload=b""), key
            )

    async def _commit(self, write: Any) -> Any:
        deferred = self._submit_deferred() if self.deferred else ()  # usually none: no call
        try:
            if not deferred:
                # Nothing to share a batch with: a store that never waits applies it now.
                result = self.runtime.committer.apply_now(write)
                if result is not None:
                    return result
            fut = self.runtime.committer.submit(write)  # same batch as the deferred receipts
            if deferred:
                await _all_settled(deferred)
            return await fut
        except StaleLeaseError as exc:
            telemetry.stale_commits.add(1)
            self._state_lost()
            raise Deactivate(str(exc)) from exc

    def _state_lost(self) -> None:
        # Another owner may count attempts now: what we knew is no longer ours to skip.
        self.claimed.difference_update(self.known)
        self.buffer.clear()
        self.known.clear()

    async def _reload(self) -> None:
        self._state_lost()
        self.rescan_requested = True
        await self.restart()


async def _all_settled(futures: Sequence[asyncio.Future[Any]]) -> None:
    """Wait for every one of ``futures``; raise the first failure, in the order given.

    What ``asyncio.gather`` does for writes submitted together, without its extra hop through
    the event loop per write (its outer future wakes the caller a turn after the writes
    settle): the writes of one batch settle together, in submission order, so awaiting them
    in that order raises the same error gather would. Every failure is retrieved (no "never
    retrieved" warnings), and a cancelled caller cancels the futures it no longer waits for.
    """
    first: BaseException | None = None
    for i, fut in enumerate(futures):
        try:
            await fut
        except asyncio.CancelledError:
            # The committer never cancels a write: the caller is cancelled. Stop waiting for
            # the rest, as gather would.
            for rest in futures[i + 1 :]:
                rest.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - raised below, once every write settled
            first = first or exc
    if first is not None:
        raise first


def _unfinished(m: StoredMessage, upto: int, known: dict[int, str] | None = None) -> list[str]:
    """The error history, plus an entry for each counted attempt up to ``upto`` that never
    reported back: the process stopped while it ran, or (``known``) its commit failed."""
    errors = list(m.errors)
    known = known or {}
    errors.extend(
        known.get(n, f"attempt {n}: did not finish (the process stopped during delivery)")
        for n in range(len(errors) + 1, upto + 1)
    )
    return errors
