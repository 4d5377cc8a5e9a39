"""The runtime's side of supervision: failure reports, holds, shutdowns and restarts.

A failing actor reports to its supervisor (its parent, active in the same runtime) with an
in-memory ``ChildFailed`` and waits for a ``Decision``. While it waits, backs off or restarts,
it is *held*: the scheduler does not activate it, and its messages wait in the durable mailbox.

An actor without a parent is supervised by the runtime itself: it is restarted in place, its
state re-folded from the journal, with no intensity limit (its messages still end in dead
letters after ``max_attempts``). A supervisor without a parent that gives up has its whole
subtree stopped for good, recorded as ``failed``; the runtime keeps serving everything else.

A supervisor's instance never outlives its children's: shut down (for a restart, a failure or
a stop), it takes its whole subtree down with it, in reverse start order (``shutdown.py``);
restarted by its own supervisor, it starts them again (OTP: a new supervisor process starts
new children).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import msgspec

from tether import telemetry
from tether.actors.actor import import_class
from tether.errors import ActorIdTaken, ActorStopped, AlreadyStarted
from tether.runtime.shutdown import Shutdowns
from tether.runtime.step import SupervisorFailed
from tether.store.records import ActorRecord, Revive

if TYPE_CHECKING:
    from tether.runtime.guards import Guards
    from tether.runtime.kernel import ActiveCell, Kernel
    from tether.supervisor.supervisor import ChildEntry


class Decision(msgspec.Struct, frozen=True):
    """What a failed actor does next: resume, restart (after ``delay``), exit memory (its
    supervisor restarts it), stop for good, or nothing more (already ``stopped``)."""

    kind: str
    delay: float = 0.0
    reason: str = ""


class PendingFailure:
    """One failure while its supervisor decides."""

    __slots__ = ("child_id", "exc", "future")

    def __init__(self, child_id: str, exc: BaseException, future: asyncio.Future[Decision]) -> None:
        self.child_id = child_id
        self.exc = exc
        self.future = future

    def resolve(self, kind: str, *, delay: float = 0.0, reason: str = "") -> None:
        if not self.future.done():
            self.future.set_result(Decision(kind, delay, reason))


class Supervision:
    """Owned by the Runtime; implements ``tether.supervisor.supervisor.SupervisionContext``."""

    def __init__(self, runtime: Kernel, guards: Guards) -> None:
        self.rt = runtime
        self.guards = guards
        self.held: dict[str, str] = {}  # actor id -> "restarting" | "backing off" | "stopped"
        self.failures: dict[str, PendingFailure] = {}
        self.root_restarts: dict[str, int] = {}
        self.root_last_failure: dict[str, str] = {}
        self._ids = itertools.count(1)
        # child id -> the restart task that is to start it. A hold, a shutdown or a stop of the
        # child takes it away, so a task that was overtaken (its supervisor restarted the group
        # again, went down, or the child was stopped) never starts it behind their back.
        self._starts: dict[str, int] = {}
        # children being started by whoever judges their failure itself (their supervisor's own
        # start, add_child): a failed start makes them leave at once, nothing restarts them
        self._starting: set[str] = set()
        # supervisors being started again by their own supervisor (not recovered): they start
        # their children afresh (see Supervisor.on_start)
        self._fresh: set[str] = set()
        self.shutdowns = Shutdowns(runtime, hold=self.hold, held=self.held, dismiss=self._dismiss)

    def clock(self) -> float:
        return self.rt.clock()

    def failure(self, failure_id: str) -> PendingFailure | None:
        return self.failures.get(failure_id)

    def hold(self, actor_id: str, status: str) -> None:
        """Keep the actor from being activated until its supervisor starts it again (a restart
        scheduled for it before is called off: whoever holds it now starts it)."""
        self.held[actor_id] = status
        self._starts.pop(actor_id, None)

    def cancel_restart(self, actor_id: str) -> None:
        """The actor is stopped for good: no restart scheduled for it may bring it back."""
        self._starts.pop(actor_id, None)

    def restarting(self, actor_id: str) -> bool:
        """Whether ``actor_id`` is being started by its own supervisor as a restart, rather than
        recovered (spawned again, brought back after a crash, or activated on demand)."""
        return actor_id in self._fresh

    def _dismiss(self, actor_id: str, reason: str) -> None:
        """A failure of ``actor_id`` waiting for its supervisor's decision is decided: it
        leaves (its supervisor is shutting it down)."""
        for pending in list(self.failures.values()):
            if pending.child_id == actor_id:
                pending.resolve("exit", reason=reason)

    def supervisor_left(self, supervisor_id: str, children: set[str]) -> None:
        """A supervisor left memory: its children's pending failures will not be decided by it.
        They leave memory too (held), and come back when the supervisor restarts them."""
        for pending in list(self.failures.values()):
            if pending.child_id in children:
                self.hold(pending.child_id, "restarting")
                pending.resolve("exit", reason=f"supervisor {supervisor_id} left")

    # -- reports from failing actors ----------------------------------------------------------

    async def report(
        self, cell: ActiveCell, exc: BaseException, *, starting: bool = False
    ) -> Decision:
        """Tell ``cell``'s supervisor that it failed and wait for the decision."""
        from tether.supervisor.supervisor import ChildFailed

        reason = f"{type(exc).__name__}: {exc}"
        actor_id = cell.actor_id
        if starting and actor_id in self._starting:
            return Decision("exit", reason=reason)  # its starter reports it (start_child)
        if cell.parent_id is None:
            return await self._root_decision(cell, exc, reason, starting=starting)
        parent = self.rt.cells.get(cell.parent_id)
        if parent is None and cell.spec.cls.starts_where_used:
            # Its supervisor runs in another runtime (or none), so it is decided here, as its
            # supervisor would (a guard's: restart): a failed handler restarts it in place (its
            # state re-folded from its journal); a failed start leaves memory, unheld, and its
            # next use starts it again.
            elsewhere = f"{reason} (supervisor {cell.parent_id} runs elsewhere)"
            return Decision("exit" if starting else "restart", reason=elsewhere)
        if parent is None or parent.instance is None:
            # Its supervisor left memory (stopped, restarting, failed to start): nobody here
            # decides for it, so it leaves too; its supervisor starts it again, if it does.
            self.hold(actor_id, "restarting")
            return Decision("exit", reason=f"supervisor {cell.parent_id} is not running")
        failure_id = f"{actor_id}#{next(self._ids)}"
        pending = PendingFailure(actor_id, exc, asyncio.get_running_loop().create_future())
        self.failures[failure_id] = pending
        self.held[actor_id] = "restarting"
        _event("child_failed", actor_id, reason=reason, supervisor=parent.actor_id)
        parent.offer_local(ChildFailed(child_id=actor_id, failure_id=failure_id, reason=reason))
        try:
            decision = await pending.future
        finally:
            self.failures.pop(failure_id, None)
        if decision.kind in ("resume", "restart") and self.held.get(actor_id) == "restarting":
            del self.held[actor_id]  # it carries on in place; "exit" stays held for its supervisor
        count, _ = self.counts(actor_id, cell.parent_id)
        _event(
            f"directive_{decision.kind}",
            actor_id,
            reason=decision.reason,
            delay=decision.delay,
            count=count,
        )
        return decision

    async def _root_decision(
        self, cell: ActiveCell, exc: BaseException, reason: str, *, starting: bool
    ) -> Decision:
        actor_id = cell.actor_id
        self.root_last_failure[actor_id] = reason
        if isinstance(exc, SupervisorFailed):
            # The top of a tree gave up: stop the subtree for good, record it, serve the rest.
            await self.fail_subtree(actor_id, str(exc))
            return Decision("stopped", reason=str(exc))
        if starting:
            return Decision("exit", reason=reason)
        self.root_restarts[actor_id] = self.root_restarts.get(actor_id, 0) + 1
        _event("actor_restarted", actor_id, reason=reason, count=self.root_restarts[actor_id])
        return Decision("restart", reason=reason)

    async def fail_subtree(self, actor_id: str, reason: str) -> None:
        """Stop ``actor_id`` and everything under it for good, recorded as failed."""
        children = await self.rt.store.list_actors(
            parent_id=actor_id, on_corrupt=self.rt.report_corrupt_actor
        )
        for child in reversed(children):
            if child.status == "active":
                await self.fail_subtree(child.actor_id, f"supervisor {actor_id} failed: {reason}")
        self.held[actor_id] = "stopped"
        cell = self.rt.cells.get(actor_id)
        if cell is not None and cell.current is None:
            cell.leave()
        await self.rt.committer.submit(self.rt.stop_record(actor_id, reason, status="failed"))
        self.rt.forget_status(actor_id, "failed")
        self.rt.stopped_for_good(actor_id, reason)
        self.held.pop(actor_id, None)
        _event("actor_failed", actor_id, reason=reason)

    # -- what supervisors ask for -------------------------------------------------------------

    async def start_child(
        self, parent_id: str, entry: ChildEntry, *, revive: bool = False, initial: bool = False
    ) -> str | None:
        """Create (or resume) the child and activate it here; wait until it has started.

        ``revive``: a child stopped for good is made active again first (a restart: its journal
        is kept), and a supervisor child starts its own children afresh. ``initial``: the start
        is its starter's to judge (its supervisor's own start, ``add_child``): a child that
        fails to start leaves memory at once, nothing restarts it, and why is returned.
        Otherwise a failed start goes to the supervisor like any failure (a failed restart
        counts toward its intensity) and None is returned. Raises ``ActorIdTaken`` when the id
        belongs to an actor of another class or another supervisor."""
        cell = await self._start(parent_id, entry, revive=revive, initial=initial)
        if cell is None or cell.start_error is None or not initial:
            return None
        return f"{type(cell.start_error).__name__}: {cell.start_error}"

    async def _start(
        self, parent_id: str, entry: ChildEntry, *, revive: bool, initial: bool
    ) -> ActiveCell | None:
        cls = import_class(entry.class_path)
        init = msgspec.msgpack.decode(entry.init)
        child_id = entry.child_id
        self.held.pop(child_id, None)
        if initial:
            self._starting.add(child_id)
        if revive:
            self._fresh.add(child_id)
        try:
            try:
                cell = await self.rt.spawn_cell(cls, child_id, parent_id, init)
            except ActorStopped:
                if not revive:
                    return None  # stopped for good earlier (transient exit, removed): stays so
                await self.rt.committer.submit(Revive(child_id))
                self.rt.forget_status(child_id, "active")
                cell = await self.rt.spawn_cell(cls, child_id, parent_id, init)
            if cell is not None:
                await cell.ready.wait()
                if initial and cell.start_error is not None:
                    await cell.exited.wait()  # it leaves at once (see report)
        finally:
            self._starting.discard(child_id)
            self._fresh.discard(child_id)
        if cell is not None and cell.start_error is None:
            _event("child_started", child_id, supervisor=parent_id)
        return cell

    async def actor_status(self, actor_id: str) -> str | None:
        """The actor's stored status ("active", "stopped", "failed"); None if there is none."""
        rec = await self.rt.store.get_actor(actor_id)
        return None if rec is None else rec.status

    async def make_room(self, parent_id: str, entry: ChildEntry) -> None:
        """Make ``entry.child_id`` free for a new child of ``parent_id`` (``add_child``).

        An id no actor has is free, and so is one of an active child of ``parent_id`` that is
        not among its entries (an add_child cut short). An id whose actor has stopped (or
        failed) is given to the new child, which starts clean: ``Store.reuse_id`` erases what
        the predecessor left
        (journal, snapshot, ledger, approvals, dedup keys, held watches; for a session, its
        guards' state too) in the same transaction that stores the new record, and keeps its
        dead letters, which can no longer be retried into the newcomer. Raises
        ``AlreadyStarted`` for a running actor and ``ActorIdTaken`` for an id that is not
        ``parent_id``'s to give or whose predecessor still has an unsettled effect."""
        child_id = entry.child_id
        rec = await self.rt.store.get_actor(child_id)
        if rec is None:
            return
        if rec.status == "active" and rec.parent_id == parent_id:
            # Its child by record, yet not one of its entries: an add_child that a crash cut
            # short after the record was stored. This one finishes it (the record is resumed).
            return
        if rec.status == "active":
            raise AlreadyStarted(child_id, rec.parent_id)
        if rec.parent_id not in (None, parent_id):
            raise ActorIdTaken(
                child_id,
                f"it was a child of {rec.parent_id!r}, and ids are unique in a store: add it "
                f"there again, or choose another id",
            )
        guards = self.guards.of_session(child_id)
        for guard_id in guards:  # their live instances hold the predecessor's state in memory
            await self.shutdown_actor(guard_id, 5.0, "restarting")
            self.held.pop(guard_id, None)
        successor = ActorRecord(
            actor_id=child_id,
            class_path=entry.class_path,
            init=entry.init,
            parent_id=parent_id,
            status="active",
            stop_reason=None,
            fence=rec.fence,
            lease_owner=None,
            lease_expires=0.0,
            created_at=self.rt.clock(),
        )
        blockers = await self.rt.store.reuse_id(successor, dependents=guards)
        if blockers:
            raise ActorIdTaken(child_id, "; ".join(blockers))
        for actor_id in (child_id, *guards):
            self.rt.forget_actor(actor_id)
        _event("actor_id_reused", child_id, supervisor=parent_id, previous=rec.stop_reason)

    async def shutdown_actor(self, actor_id: str, shutdown: float | str, status: str) -> None:
        """Stop the actor's instance (not its durable existence) within its shutdown budget;
        a supervisor's children go down after it (``shutdown.py``)."""
        await self.shutdowns.actor(actor_id, shutdown, status)

    async def shutdown_children(self, actor_id: str, cell: ActiveCell | None, status: str) -> None:
        """Take down the children of the supervisor whose instance ``cell`` was (or is), in
        reverse start order (``Runtime.stop``, a restart in place)."""
        await self.shutdowns.children(actor_id, cell, status)

    @asynccontextmanager
    async def fresh_start(self, cell: ActiveCell) -> AsyncIterator[None]:
        """Around a restart in place of ``cell``'s instance: a supervisor takes its children
        down first and then starts them afresh, as a restarted OTP supervisor does."""
        if not callable(getattr(cell.instance, "child_entries", None)):
            yield
            return
        await self.shutdown_children(cell.actor_id, cell, "restarting")
        self._fresh.add(cell.actor_id)
        try:
            yield
        finally:
            self._fresh.discard(cell.actor_id)

    def restart_later(
        self,
        parent_id: str,
        entries: Sequence[ChildEntry],
        delay: float,
        *,
        retry: tuple[str, float] | None = None,
    ) -> None:
        """Start ``entries`` (in order) after ``delay``, without blocking the supervisor.

        ``retry`` restarts one child whose start failed, by id, after its own delay.
        """
        token = next(self._ids)
        for e in entries:
            self.held[e.child_id] = "backing off" if delay > 0 else "restarting"
            self._starts[e.child_id] = token
        if retry is not None:
            self.held[retry[0]] = "backing off" if retry[1] > 0 else "restarting"
            self._starts[retry[0]] = token
        self.rt.start_soon(self._restart, parent_id, list(entries), delay, retry, token)

    async def _restart(
        self,
        parent_id: str,
        entries: list[ChildEntry],
        delay: float,
        retry: tuple[str, float] | None,
        token: int,
    ) -> None:
        if retry is not None:
            delay = retry[1]
        if delay > 0:
            await self.rt.time.sleep(delay)
        if retry is not None:
            sup = self.rt.cells.get(parent_id)
            if sup is None or sup.instance is None:
                return
            entries = [e for e in sup.instance.child_entries() if e.child_id == retry[0]]  # type: ignore[attr-defined]
        for e in entries:
            if self._starts.get(e.child_id) != token:
                continue  # overtaken: another restart, a shutdown or a stop has it now
            del self._starts[e.child_id]
            try:
                cell = await self._start(parent_id, e, revive=True, initial=False)
            except Exception as exc:  # noqa: BLE001 - logged; the other children still start
                telemetry.log.error("child_restart_failed", actor_id=e.child_id, error=repr(exc))
                continue
            if cell is not None and cell.start_error is not None:
                # Its supervisor decides about the failed start first; the children after it
                # wait for that (OTP starts none after a failed one): if it restarts the group
                # again, they are its restart's to start, no longer this one's.
                await cell.exited.wait()

    async def stop_actor_for_good(self, actor_id: str, reason: str) -> None:
        await self.rt.stop(actor_id, reason)
        self.held.pop(actor_id, None)

    # -- introspection ------------------------------------------------------------------------

    def counts(self, actor_id: str, parent_id: str | None) -> tuple[int, str | None]:
        """Restart count and last failure of an actor, from its supervisor's state."""
        if parent_id is None:
            return self.root_restarts.get(actor_id, 0), self.root_last_failure.get(actor_id)
        sup = self.rt.cells.get(parent_id)
        state: Any = sup.state if sup is not None else None
        if state is None or not hasattr(state, "counts"):
            return 0, None
        return state.counts.get(actor_id, 0), state.last_failure.get(actor_id)


_event = telemetry.supervision_event
