"""The runtime's side of supervision: failure reports, holds, shutdowns and restarts.

A failing actor reports to its supervisor (its parent, active in the same runtime) with an
in-memory ``ChildFailed`` and waits for a ``Decision``. While it waits, backs off or restarts,
it is *held*: the scheduler does not activate it, and its messages wait in the durable mailbox.

An actor without a parent is supervised by the runtime itself: it is restarted in place, its
state re-folded from the journal, with no intensity limit (its messages still end in dead
letters after ``max_attempts``). A supervisor without a parent that gives up has its whole
subtree stopped for good, recorded as ``failed``; the runtime keeps serving everything else.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from tether.actors.actor import import_class
from tether.errors import ActorStopped
from tether.runtime import telemetry
from tether.runtime.store import Revive

if TYPE_CHECKING:
    from tether.runtime.cell import Cell
    from tether.runtime.runtime import Runtime
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

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.held: dict[str, str] = {}  # actor id -> "restarting" | "backing off" | "stopped"
        self.failures: dict[str, PendingFailure] = {}
        self.root_restarts: dict[str, int] = {}
        self.root_last_failure: dict[str, str] = {}
        self._ids = itertools.count(1)

    def clock(self) -> float:
        return self.rt.clock()

    def failure(self, failure_id: str) -> PendingFailure | None:
        return self.failures.get(failure_id)

    def hold(self, actor_id: str, status: str) -> None:
        """Keep the actor from being activated until its supervisor starts it again."""
        self.held[actor_id] = status

    def supervisor_left(self, supervisor_id: str, children: set[str]) -> None:
        """A supervisor left memory: its children's pending failures will not be decided by it.
        They leave memory too (held), and come back when the supervisor restarts them."""
        for pending in list(self.failures.values()):
            if pending.child_id in children:
                self.held[pending.child_id] = "restarting"
                pending.resolve("exit", reason=f"supervisor {supervisor_id} left")

    # -- reports from failing actors ----------------------------------------------------------

    async def report(self, cell: Cell, exc: BaseException, *, starting: bool = False) -> Decision:
        """Tell ``cell``'s supervisor that it failed and wait for the decision."""
        from tether.supervisor.supervisor import ChildFailed

        reason = f"{type(exc).__name__}: {exc}"
        actor_id = cell.actor_id
        parent = self.rt.cells.get(cell.parent_id) if cell.parent_id is not None else None
        if parent is None or parent.instance is None:
            return await self._root_decision(cell, exc, reason, starting=starting)
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
        self, cell: Cell, exc: BaseException, reason: str, *, starting: bool
    ) -> Decision:
        from tether.runtime.cell import SupervisorFailed

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
        self.held.pop(actor_id, None)
        _event("actor_failed", actor_id, reason=reason)

    # -- what supervisors ask for -------------------------------------------------------------

    async def start_child(self, parent_id: str, entry: ChildEntry, *, revive: bool = False) -> None:
        """Create (or resume) the child and activate it here; wait until it has started."""
        cls = import_class(entry.class_path)
        init = msgspec.msgpack.decode(entry.init)
        if revive:
            await self.rt.committer.submit(Revive(entry.child_id))
            self.rt.forget_status(entry.child_id, "active")
        self.held.pop(entry.child_id, None)
        try:
            await self.rt.spawn_child(cls, entry.child_id, parent_id, init)
        except ActorStopped:
            return  # stopped for good earlier (temporary, transient exit, removed): stays so
        cell = self.rt.cells.get(entry.child_id)
        if cell is not None:
            await cell.ready.wait()
        _event("child_started", entry.child_id, supervisor=parent_id)

    async def shutdown_actor(self, actor_id: str, shutdown: float | str, status: str) -> None:
        """Stop the actor's instance (not its durable existence) within its shutdown budget:
        let it finish its message, cancel it when the time is up, abandon it if it ignores
        the cancellation."""
        self.held[actor_id] = status
        cell = self.rt.cells.get(actor_id)
        if cell is None:
            return
        cell.leave()
        if shutdown == "brutal":
            cell.cancel()
        if shutdown == "infinity":
            await cell.exited.wait()
        else:
            budget = 0.0 if shutdown == "brutal" else float(shutdown)
            with anyio.move_on_after(budget):
                await cell.exited.wait()
            if not cell.exited.is_set():
                cell.cancel()
                with anyio.move_on_after(1.0):
                    await cell.exited.wait()
        if not cell.exited.is_set():
            # It ignores cancellation. Abandon it: the next activation takes a new fencing
            # token, so whatever it still tries to commit is rejected (I8).
            if self.rt.cells.get(actor_id) is cell:
                del self.rt.cells[actor_id]
            _event("child_abandoned", actor_id, shutdown=str(shutdown))
        _event("child_shut_down", actor_id, status=status)

    async def wait_exited(self, actor_id: str) -> None:
        cell = self.rt.cells.get(actor_id)
        if cell is not None:
            await cell.exited.wait()

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
        for e in entries:
            self.held[e.child_id] = "backing off" if delay > 0 else "restarting"
        if retry is not None:
            self.held[retry[0]] = "backing off" if retry[1] > 0 else "restarting"
        self.rt.start_soon(self._restart, parent_id, list(entries), delay, retry)

    async def _restart(
        self,
        parent_id: str,
        entries: list[ChildEntry],
        delay: float,
        retry: tuple[str, float] | None,
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
            try:
                await self.start_child(parent_id, e, revive=True)
            except Exception as exc:  # noqa: BLE001 - logged; the other children still start
                telemetry.log.error("child_restart_failed", actor_id=e.child_id, error=repr(exc))

    async def stop_actor_for_good(self, actor_id: str, reason: str) -> None:
        await self.rt.stop(actor_id, reason)

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
