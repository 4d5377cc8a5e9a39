"""``Supervisor``: an actor whose job is starting, watching and restarting its children.

A supervisor is a journaled actor like any other: the children added at run time and the
restart history inside the intensity window are events in its journal, so after a crash the
tree comes back with its strategy, its dynamic children and the restarts that still count.

Failures reach a supervisor as in-memory ``ChildFailed`` messages. They need not be durable:
the child's failed message stays in its mailbox with its attempt counted (I7), so if the
process dies before the supervisor decides, the recovered child simply fails (or succeeds)
again. What must survive — restarts, resets, children — is persisted by the supervisor's step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Protocol, cast

import msgspec

from tether.actors.actor import Actor, check_items
from tether.actors.messages import Event, Message
from tether.errors import (
    ActorIdTaken,
    AlreadyStarted,
    ChildStartFailed,
    ConfigError,
    JournalWriteError,
)
from tether.supervisor.spec import (
    ChildSpec,
    Decider,
    OneForOne,
    Strategy,
    check_decider,
    decide,
)


class ChildFailed(Message):
    """A child's handler (or start) failed. In-memory only; built by the runtime."""

    child_id: str
    failure_id: str
    reason: str


class ChildExited(Message):
    """A child stopped itself (a normal exit). In-memory only; built by the runtime."""

    child_id: str
    reason: str


class AddChild(Message):
    """Start a dynamic child (sent by ``Runtime.add_child``)."""

    child_id: str
    class_path: str
    restart: str
    shutdown: float | str
    init: bytes


class RemoveChild(Message):
    """Stop a child for good and forget it (sent by ``Runtime.remove_child``)."""

    child_id: str
    reason: str = "removed"


class ChildEntry(msgspec.Struct, frozen=True):
    child_id: str
    class_path: str
    restart: str
    shutdown: float | str
    init: bytes


class ChildAdded(Event):
    entry: ChildEntry


class ChildRemoved(Event):
    child_id: str


class Restarted(Event):
    at: float
    child_id: str
    reason: str


class Reset(Event):
    """The supervisor failed: its restart window starts over when it is restarted."""

    at: float
    reason: str


class SupervisorState(msgspec.Struct):
    dynamic: list[ChildEntry] = msgspec.field(default_factory=list)
    restarts: list[float] = msgspec.field(default_factory=list)  # the intensity window
    counts: dict[str, int] = msgspec.field(default_factory=dict)  # restarts per child, ever
    streak: dict[str, int] = msgspec.field(default_factory=dict)  # consecutive, for backoff
    last_restart: dict[str, float] = msgspec.field(default_factory=dict)
    last_failure: dict[str, str] = msgspec.field(default_factory=dict)


class Failure(Protocol):
    """What the runtime knows of one failure while the supervisor decides."""

    exc: BaseException

    def resolve(self, kind: str, *, delay: float = 0.0, reason: str = "") -> None: ...


class SupervisionContext(Protocol):
    """What a supervisor needs from the runtime (implemented by ``tether.runtime.supervision``)."""

    def clock(self) -> float: ...

    def failure(self, failure_id: str) -> Failure | None: ...

    def hold(self, actor_id: str, status: str) -> None: ...

    def restarting(self, actor_id: str) -> bool: ...

    async def start_child(
        self, parent_id: str, entry: ChildEntry, *, revive: bool = False, initial: bool = False
    ) -> str | None: ...

    async def actor_status(self, actor_id: str) -> str | None: ...

    async def make_room(self, parent_id: str, entry: ChildEntry) -> None: ...

    async def shutdown_actor(self, actor_id: str, shutdown: float | str, status: str) -> None: ...

    def restart_later(
        self, parent_id: str, entries: Sequence[ChildEntry], delay: float
    ) -> None: ...

    async def stop_actor_for_good(self, actor_id: str, reason: str) -> None: ...


class Supervisor(Actor[SupervisorState]):
    """Subclass with ``strategy``, ``children`` and optionally ``decider``; spawn with ``rt.spawn``.

    ::

        class Payments(tether.Supervisor):
            strategy = tether.OneForOne(max_restarts=3, within=5.0, backoff=tether.Backoff())
            children = [tether.ChildSpec(Ledger, "ledger"), tether.ChildSpec(Notifier, "notifier")]
    """

    initial_state = SupervisorState()
    passivates: ClassVar[bool] = False  # a child's failure must always find its supervisor
    strategy: ClassVar[Strategy] = OneForOne()
    children: ClassVar[Sequence[ChildSpec]] = ()
    decider: ClassVar[Decider | None] = None
    #: Whether (re)starting the supervisor starts its dynamic children too. False for
    #: supervisors of many mostly idle children (sessions, their guards): each then starts
    #: on its first message, and passivates when idle, still supervised.
    start_dynamic_children: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not isinstance(cls.strategy, Strategy):
            raise ConfigError(
                f"{cls.__qualname__}.strategy must be OneForOne, OneForAll or RestForOne(...)"
            )
        check_items(
            cls.children,
            ChildSpec,
            f"{cls.__qualname__}.children",
            "a list of tether.ChildSpec",
            "wrap it in tether.ChildSpec",
        )
        check_decider(cls.decider, f"{cls.__qualname__}.decider")
        ids = [c.child_id for c in cls.children]
        if len(set(ids)) != len(ids):
            raise ConfigError(f"{cls.__qualname__}.children has duplicate ids: {ids}")

    # -- the fold -----------------------------------------------------------------------------

    def apply(
        self, state: SupervisorState, event: ChildAdded | ChildRemoved | Restarted | Reset
    ) -> SupervisorState:
        s = msgspec.structs.replace(
            state,
            dynamic=list(state.dynamic),
            restarts=list(state.restarts),
            counts=dict(state.counts),
            streak=dict(state.streak),
            last_restart=dict(state.last_restart),
            last_failure=dict(state.last_failure),
        )
        match event:
            case ChildAdded(entry=e):
                s.dynamic = [c for c in s.dynamic if c.child_id != e.child_id] + [e]
                for per_child in (s.counts, s.streak, s.last_restart, s.last_failure):
                    per_child.pop(e.child_id, None)  # a new child: its predecessor's count no more
            case ChildRemoved(child_id=cid):
                s.dynamic = [c for c in s.dynamic if c.child_id != cid]
            case Restarted(at=at, child_id=cid, reason=reason):
                # Keep only what can still count: the window is at most max_restarts + 1 long.
                s.restarts = [*s.restarts, at][-(self.strategy.max_restarts + 1) :]
                s.counts[cid] = s.counts.get(cid, 0) + 1
                quiet = self.strategy.backoff.reset_after if self.strategy.backoff else 0.0
                last = s.last_restart.get(cid)
                s.streak[cid] = 1 if last is None or at - last > quiet else s.streak.get(cid, 0) + 1
                s.last_restart[cid] = at
                s.last_failure[cid] = reason
            case Reset():
                s.restarts = []
                s.streak = {}
        return s

    # -- the handler --------------------------------------------------------------------------

    async def on_start(self) -> None:
        """Start every child in start order: the declared ones, then the dynamic ones if
        ``start_dynamic_children``.

        A declared child that fails to start fails this supervisor's start (OTP's
        ``failed_to_start_child``): the children after it are not started, those before it
        are stopped again in reverse order, and ``rt.spawn`` (or this supervisor's own
        supervisor) is told which child and why. A dynamic child that fails to start is
        restarted like any failed child: one bad session must not keep the others down.

        Started again by its own supervisor (a restart, not a recovery), a supervisor starts
        afresh, as a new OTP supervisor runs ``init/1``: every declared child starts again,
        also one stopped for good, and so does every dynamic child that is not temporary.
        Recovered (after a crash, or spawned again), it brings its children back as they
        were: one stopped for good stays stopped."""
        ctx = self._ctx()
        fresh = ctx.restarting(self.id)
        started: list[ChildEntry] = []
        for entry in (_entry_of(spec) for spec in type(self).children):
            try:
                failure = await ctx.start_child(self.id, entry, revive=fresh, initial=True)
            except ActorIdTaken as exc:
                failure = str(exc)
            except ConfigError as exc:
                # Refused before it could start (its arguments, an id kept for a guard): as
                # failed a start as any, and never better the next time this supervisor starts.
                failure = f"{type(exc).__name__}: {exc}"
            if failure is not None:
                for done in reversed(started):
                    await ctx.shutdown_actor(done.child_id, done.shutdown, "stopped")
                raise ChildStartFailed(self.id, entry.child_id, failure)
            started.append(entry)
        if self.start_dynamic_children:
            for entry in self.state.dynamic:
                await ctx.start_child(self.id, entry, revive=fresh and entry.restart != "temporary")

    async def handle(self, msg: ChildFailed | ChildExited | AddChild | RemoveChild) -> Any:
        match msg:
            case ChildFailed():
                await self._child_failed(msg)
            case ChildExited(child_id=cid, reason=reason):
                entry = self._entry(cid)
                if entry is not None and entry.restart == "permanent":
                    await self._restart(entry, f"permanent child exited: {reason}", failure=None)
                elif entry is not None and entry.restart == "temporary":
                    self._forget(entry)
            case AddChild():
                return await self._add_child(msg)
            case RemoveChild(child_id=cid, reason=reason):
                entry = self._entry(cid)
                if entry is None:
                    return False
                # OTP's terminate_child (within its shutdown budget), then delete_child.
                await self._ctx().shutdown_actor(cid, entry.shutdown, "stopped")
                await self._ctx().stop_actor_for_good(cid, reason)
                if any(e.child_id == cid for e in self.state.dynamic):
                    self.persist(ChildRemoved(child_id=cid))
                return True
        return None

    async def _add_child(self, msg: AddChild) -> list[str] | None:
        """Start a new dynamic child. None once it runs; else why not, as ``[error, detail]``
        for ``Runtime.add_child`` to raise (refused here, the supervisor itself must not fail)."""
        ctx = self._ctx()
        entry = ChildEntry(msg.child_id, msg.class_path, msg.restart, msg.shutdown, msg.init)
        existing = self._entry(entry.child_id)
        if existing is not None:
            if await ctx.actor_status(entry.child_id) == "active":
                return ["AlreadyStarted", self.id]
            if existing.restart != "temporary" or existing not in self.state.dynamic:
                # OTP's already_present: the spec stays until it is removed.
                declared = existing not in self.state.dynamic
                return [
                    "ActorIdTaken",
                    f"it is {'a declared' if declared else 'a'} child of {self.id!r} that is not "
                    "running (stopped for good, its spec kept)"
                    + ("" if declared else "; rt.remove_child() it first to add a new one"),
                ]
            self._forget(existing)  # a temporary child that ended: OTP forgot it then
        try:
            await ctx.make_room(self.id, entry)
            failure = await ctx.start_child(self.id, entry, initial=True)
        except AlreadyStarted as exc:
            return ["AlreadyStarted", exc.parent_id or ""]
        except ActorIdTaken as exc:
            return ["ActorIdTaken", exc.reason]
        if failure is not None:
            # Not added (OTP: start_child returns the error, the spec is not saved); stopped
            # for good, its id can be added again.
            await ctx.stop_actor_for_good(entry.child_id, f"failed to start: {failure}")
            return ["ChildStartFailed", failure]
        self.persist(ChildAdded(entry=entry))
        return None

    # -- decisions ----------------------------------------------------------------------------

    def child_entries(self) -> list[ChildEntry]:
        """Every child in start order: the declared ones, then the dynamic ones."""
        static = [_entry_of(spec) for spec in type(self).children]
        return static + list(self.state.dynamic)

    def _entry(self, child_id: str) -> ChildEntry | None:
        return next((e for e in self.child_entries() if e.child_id == child_id), None)

    def _decider_for(self, child_id: str) -> Decider | None:
        spec = next((c for c in type(self).children if c.child_id == child_id), None)
        if spec is not None and spec.decider is not None:
            return spec.decider
        return type(self).decider

    async def _child_failed(self, msg: ChildFailed) -> None:
        ctx = self._ctx()
        failure = ctx.failure(msg.failure_id)
        entry = self._entry(msg.child_id)
        if failure is None:
            return  # the failing child already left (runtime shutdown): nothing to decide
        if entry is None:
            failure.resolve("stop", reason=f"not a child of {self.id} any more")
            return
        directive = decide(self._decider_for(msg.child_id), failure.exc)
        if directive == "resume" and isinstance(failure.exc, JournalWriteError):
            directive = "restart"  # the outcome of the write is unknown: never resume on a guess
        match directive:
            case "resume":
                failure.resolve("resume")
            case "stop":
                failure.resolve("stop", reason=f"stopped by {self.id}: {msg.reason}")
                self._forget(entry)
            case "escalate":
                await self._fail(
                    f"escalated failure of {msg.child_id}: {msg.reason}", failed_child=failure
                )
            case "restart":
                if entry.restart == "temporary":
                    failure.resolve("stop", reason=f"temporary child failed: {msg.reason}")
                    self._forget(entry)
                else:
                    await self._restart(entry, msg.reason, failure=failure)

    async def _restart(self, entry: ChildEntry, reason: str, *, failure: Failure | None) -> None:
        ctx = self._ctx()
        strategy = self.strategy
        now = ctx.clock()
        recent = [t for t in self.state.restarts if now - t <= strategy.within]
        if len(recent) + 1 > strategy.max_restarts:
            await self._fail(
                f"restart intensity exceeded: {len(recent) + 1} restarts within {strategy.within} s "
                f"(max_restarts={strategy.max_restarts}); last: {entry.child_id}: {reason}",
                failed_child=failure,
            )
            return
        self.persist(Restarted(at=now, child_id=entry.child_id, reason=reason))
        delay = (
            strategy.backoff.delay(self.state.streak[entry.child_id] - 1)
            if strategy.backoff
            else 0.0
        )
        order = [e.child_id for e in self.child_entries()]
        affected_ids = strategy.affected(order, entry.child_id)
        if affected_ids == [entry.child_id] and failure is not None:
            failure.resolve("restart", delay=delay, reason=reason)
            return
        affected = [e for e in self.child_entries() if e.child_id in affected_ids]
        for e in affected:
            ctx.hold(e.child_id, "restarting")
        for e in reversed(affected):  # stop in reverse start order (a supervisor: its subtree)
            if failure is not None and e.child_id == entry.child_id:
                failure.resolve("exit", reason=reason)
            await ctx.shutdown_actor(e.child_id, e.shutdown, "restarting")
            if e.restart == "temporary":
                # OTP: a temporary bystander is terminated and forgotten, never restarted.
                await ctx.stop_actor_for_good(
                    e.child_id, f"{strategy.name} restart by {self.id}; temporary: {reason}"
                )
                self._forget(e)
        # then start the others in start order, after the backoff: a transient one too, even if
        # it had ended normally (OTP's restart_multiple_children starts every non-temporary one)
        ctx.restart_later(self.id, [e for e in affected if e.restart != "temporary"], delay)

    async def _fail(self, reason: str, *, failed_child: Failure | None) -> None:
        """Stop every child in reverse start order, forget the window, and fail upwards."""
        ctx = self._ctx()
        entries = self.child_entries()
        for e in entries:
            ctx.hold(e.child_id, "stopped")  # none may be re-activated while the tree comes down
        if failed_child is not None:
            failed_child.resolve("exit", reason=reason)
        for e in reversed(entries):
            await ctx.shutdown_actor(e.child_id, e.shutdown, "stopped")
        self.persist(Reset(at=ctx.clock(), reason=reason))
        self._tether_cell.escalate(reason)  # reported to our parent once this step commits

    def _forget(self, entry: ChildEntry) -> None:
        """A temporary dynamic child that ended is forgotten, as OTP forgets it: its id can be
        added again. (A declared one stays declared: it starts again if this supervisor is
        restarted, as OTP's ``init/1`` would start it.)"""
        if entry.restart == "temporary" and entry in self.state.dynamic:
            self.persist(ChildRemoved(child_id=entry.child_id))

    def _ctx(self) -> SupervisionContext:
        return cast(SupervisionContext, self._tether_cell.runtime.supervision)


def _entry_of(spec: ChildSpec) -> ChildEntry:
    from tether.actors.actor import actor_spec

    return ChildEntry(
        child_id=spec.child_id,
        class_path=actor_spec(spec.actor_class).class_path,
        restart=spec.restart,
        shutdown=spec.shutdown,
        init=msgspec.msgpack.encode(spec.init),
    )
