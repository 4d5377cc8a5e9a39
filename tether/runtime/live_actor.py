"""The live actor: what a cell holds of its actor, and every write it makes of it.

A ``LiveActor`` is the part of a cell (``cell.py``) that its actor instance sees
(``tether.actors.actor.ActorCell``) and that the runtime's services touch (``ActiveCell``):

* the live instance and its state, which is the fold of the committed journal (I3): rebuilt
  from the latest snapshot by ``recover``, re-folded by ``restart``; a handler's ``persist``
  folds an event at once and stages its journal row in the running ``Step``;
* what a handler does in its step besides: replies, a stop, an escalation, a watch, effects
  (``effects.perform``);
* a guard's journal appends, decided on other actors' effect paths (``stage_events``);
* the head of its mailbox in memory (``buffer``, ``known``, the attempts ``claimed``), kept by
  the delivery loop and dropped when the lease is lost;
* every write of the actor, committed under its lease's fence (I8): ``commit``; an effect's
  ledger row, ``commit_effect``; a receipt that rides with the next commit, ``defer``. A stale
  fence on any of them drops what the cell held and deactivates it (``Deactivate``).

Invariant: ``state`` and ``seq`` equal the fold of the committed journal, except while a
handler runs, when they also hold that handler's persisted events.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import anyio
import msgspec

from tether import telemetry
from tether.actors.actor import Actor, ActorSpec
from tether.actors.messages import UNENCODABLE, Event
from tether.actors.ref import ActorRef
from tether.errors import ConfigError, StaleLeaseError
from tether.runtime import effects, tracing
from tether.runtime.approval_desk import Approvals
from tether.runtime.committer import all_settled
from tether.runtime.guards import Guards
from tether.runtime.journal import fold
from tether.runtime.kernel import Kernel, Staged
from tether.runtime.reads import Reader
from tether.runtime.step import Deactivate, Step
from tether.runtime.supervision import Supervision
from tether.runtime.wake import Wake
from tether.store.records import (
    BatchResult,
    EffectWrite,
    JournalRow,
    NewMessage,
    Snapshot,
    StepCommit,
    StoredMessage,
)


class CellHost(Kernel, Protocol):
    """What a cell may touch of its runtime (``Runtime``, by its shape): the kernel, the
    settings of delivery, the services a step reaches, and the hooks that tell the runtime
    what became of a message or of the cell (each bound to the service that does it)."""

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
    def actor_stopped_itself(self, cell: LiveActor, reason: str) -> None: ...
    def detach_if_idle(self, cell: LiveActor) -> bool: ...
    def cell_exited(self, cell: LiveActor) -> None: ...
    def step_committed(
        self,
        cell: LiveActor,
        msg: StoredMessage,
        reply: Any,
        commit: StepCommit,
        result: BatchResult,
        step: Step,
    ) -> None: ...


class LiveActor:
    """One actor live in this process, as its instance and the runtime's services see it."""

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
        self.spec = spec
        self._actor_id = actor_id
        self.parent_id = parent_id
        self.init = init
        self.fence = fence
        self.seq = 0
        self._state: Any = None
        self.instance: Actor[Any] | None = None
        self.start_error: Exception | None = None  # why recovery or on_start failed, if it did
        # rt.spawn waits for this start and raises ChildStartFailed to its caller itself
        self.start_awaited = False
        self.current: StoredMessage | None = None  # the message being delivered
        self.step: Step | None = None
        self.stop_reason: str | None = None  # set: it stops for good after this message
        # The head of the mailbox: in mailbox order, filled by local sends after their commit
        # and by rescans of the store (``rescan_requested``); ``wake`` wakes the loop for it.
        self.buffer: deque[StoredMessage] = deque()
        self.known: set[str] = set()  # msg ids in the buffer or being processed
        # msg ids whose next attempt is already counted in the store: the runtime's, so that
        # a new instance after a restart does not count it again
        self.claimed = runtime.claimed
        self.rescan_requested = True
        self.wake = Wake()
        # receipts that ride with the next commit of this actor (see effects._Effect.receipt)
        self.deferred: list[EffectWrite | Staged] = []
        self.unsubmitted = 0  # staged guard appends not yet submitted (see stage_events)
        self.loop_watch: Any = None  # this actor's loop guard, once found (tether.runtime.guards)
        # tool name -> calls that failed in a row here (in memory: the gate's "repeated
        # failures" trigger; a restart starts the count again)
        self.tool_failures: dict[str, int] = {}
        # Message types whose arrival interrupts the running step's tool call (CancelTask),
        # why the current step was interrupted, and the scope of its call in flight.
        self.interrupting = frozenset(t.__name__ for t in spec.message_types if t.interrupts)
        self.interrupt: str | None = None
        self.call_scope: anyio.CancelScope | None = None
        # The delivery loop's life (``cell.py``): started (``on_start`` ran, or failed), and
        # ended; what ends it from outside (``cancel``, ``leave``).
        self.ready = asyncio.Event()
        self.exited = asyncio.Event()
        self.scope = anyio.CancelScope()
        self.leaving = False
        self.local_seq = 0  # of the in-memory system messages offered (``offer_local``)

    # -- what the actor instance sees (tether.actors.actor.ActorCell) --------------------------

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

    def self_ref(self) -> ActorRef:
        return self.runtime.ref(self._actor_id)

    @property
    def last_effect_key(self) -> str | None:
        return self.step.last_key if self.step is not None else None

    @property
    def last_effect_modified_args(self) -> dict[str, Any] | None:
        blob = self.step.modified_args if self.step is not None else None
        return None if blob is None else msgspec.msgpack.decode(blob, type=dict[str, Any])

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

    # -- a guard's journal appends -------------------------------------------------------------

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

    # -- what the runtime's services do to it (ActiveCell) -------------------------------------

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

    def cancel(self) -> None:
        """Cancel whatever the actor is doing (shutdown timeout or ``brutal``)."""
        self.scope.cancel()

    def leave(self) -> None:
        """Finish the current message, then release the lease and leave (runtime shutdown)."""
        self.leaving = True
        self.wake.set()

    # -- its instance and state ----------------------------------------------------------------

    async def recover(self) -> Actor[Any]:
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
                await self.safe_on_stop()
        await (await self.recover()).on_start()

    async def safe_on_stop(self) -> None:
        if self.instance is None:  # never started: nothing to stop
            return
        if self.start_error is not None:
            return  # its on_start failed: it never started, there is nothing to stop
        try:
            await self.instance.on_stop()
        except Exception as exc:  # noqa: BLE001 - never lets a failure kill the runtime
            telemetry.log.warning("on_stop_failed", actor_id=self._actor_id, error=repr(exc))

    def snapshot(self, seq: int) -> Snapshot | None:
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

    # -- its writes, under the lease's fence (I8) ----------------------------------------------

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
        try:
            # Nothing to share a batch with: a store that never waits applies it now, without
            # a future (``commit`` does the same).
            committer = self.runtime.committer
            if not with_ and not self.deferred and committer.apply_now(write) is not None:
                return
            deferred = self._submit_deferred()
            fut = committer.submit(write)  # no await before: one batch with `with_`
            await all_settled((*with_, *deferred, fut))
        except StaleLeaseError as exc:
            telemetry.stale_commits.add(1)
            self.state_lost()
            raise Deactivate(str(exc)) from exc

    async def commit(self, write: Any) -> Any:
        """Commit ``write`` under the lease's fence, with the writes deferred until now."""
        deferred = self._submit_deferred() if self.deferred else ()  # usually none: no call
        try:
            if not deferred:
                # Nothing to share a batch with: a store that never waits applies it now.
                result = self.runtime.committer.apply_now(write)
                if result is not None:
                    return result
            fut = self.runtime.committer.submit(write)  # same batch as the deferred receipts
            if deferred:
                await all_settled(deferred)
            return await fut
        except StaleLeaseError as exc:
            telemetry.stale_commits.add(1)
            self.state_lost()
            raise Deactivate(str(exc)) from exc

    def state_lost(self) -> None:
        """The lease is lost, or the state unknown: what the cell held of its mailbox is no
        longer its own."""
        # Another owner may count attempts now: what we knew is no longer ours to skip.
        self.claimed.difference_update(self.known)
        self.buffer.clear()
        self.known.clear()
