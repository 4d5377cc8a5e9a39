"""``rt.guards``: finds (or creates) the guard actors an effect passes through, and lets the
effect path use their live state directly.

Every new call goes loop detector → circuit breaker → escalation gate → ledger (DESIGN §6).
The gate lives in ``tether.runtime.approvals``; this module serves the two guards whose state
changes with every call. Their decisions are synchronous on the guard actor's live instance
(no message round trip); the events are appended to the guard's journal with
``Cell.append_events`` and committed in the same group commit as the effect's own write.

Where the guards live, with several runtimes on one store (docs/guards.md, "Several runtimes"):

* a session's loop guard and gate start where the session runs, on first use
  (``Actor.starts_where_used``), whichever runtime runs their supervisor; when the session
  leaves a runtime they leave with it (``session_left``), so that its next runtime takes them;
* a tool's breaker is shared: it lives with the guards' supervisor, in one runtime;
* a guard another live runtime holds is known as such at once: the store refuses its lease
  here (``Kernel.leased_elsewhere``), and that answer is kept until the lease could have
  changed (its owner's next renewal), with no poll and no store read meanwhile. The effect
  path then goes on without it: an in-memory breaker of this runtime's own for that tool
  (said once in the log), no loop detection for that session, and a gate that journals
  nothing here. The approval itself never depends on the gate actor: a held call's request
  is stored with its step's park, and only a person's decision (or the policy's deadline)
  in the store lets it run (I9).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from tether import telemetry
from tether.actors.actor import class_path, current_path
from tether.actors.guards.actors import (
    GUARDS_SUPERVISOR,
    Breaker,
    Gate,
    LoopGuard,
    breaker_id,
    gate_id,
    loops_id,
)
from tether.actors.guards.breaker import Admission, BreakerCore, BreakerPolicy, CallToken
from tether.actors.guards.loops import (
    Detection,
    LoopCallObserved,
    LoopPolicy,
    LoopResultObserved,
)
from tether.actors.guards.notifier import Notifier, notifier_id
from tether.actors.tool import Tool, classify
from tether.errors import ActorNotFound, AlreadyStarted, ConfigError, CorruptRecordError
from tether.supervisor.guards import GuardSupervisor, wrong_guard
from tether.supervisor.spec import ChildSpec

if TYPE_CHECKING:
    from tether.runtime.kernel import ActiveCell, Kernel, Staged

G = TypeVar("G")


def guard_instance(cell: ActiveCell, cls: type[G]) -> G:
    """The live instance of a guard's cell, checked to be a ``cls``. Another class there (an
    actor a user spawned at the guard's id before such ids were reserved) fails the call that
    needs the guard, by name: it is never made unguarded, and never fails on an assertion."""
    instance = cell.instance
    if not isinstance(instance, cls):
        held_by = type(instance).__qualname__ if instance is not None else "cell not started"
        raise wrong_guard(cell.actor_id, held_by, cls)
    return instance


class BreakerGuard:
    """One tool's breaker as the effect path sees it."""

    def __init__(
        self,
        tool: Tool,
        policy: BreakerPolicy,
        taxonomy: bool,
        cell: ActiveCell | None,
        until: float = 0.0,
    ) -> None:
        self.tool = tool
        self.policy = policy
        self.taxonomy = taxonomy  # classify by tether's error taxonomy, not the policy's types
        self.cell = cell
        self._local = BreakerCore(policy) if cell is None else None
        # In memory (no cell): used until then, when the breaker actor may be free to take.
        self.until = until

    def _core(self) -> BreakerCore:
        if self._local is not None:
            return self._local
        if self.cell is None:  # __init__ makes one or the other
            raise ConfigError(f"the breaker of tool {self.tool.name!r} has no state")
        return guard_instance(self.cell, Breaker).core()

    def admit(self, now: float) -> tuple[Admission, list[Any]]:
        return self._core().admit(now)

    def outcome(self, exc: BaseException | None) -> str:
        if exc is None or not isinstance(exc, Exception):
            return self.policy.classify(exc)
        if self.taxonomy:
            return "failure" if classify(exc) != "failed" else "success"
        return self.policy.classify(exc)

    def record(
        self, token: CallToken, exc: BaseException | None, duration: float, now: float
    ) -> list[Any]:
        return self._core().record(token, self.outcome(exc), duration=duration, now=now)  # type: ignore[arg-type]

    def journal(self, events: list[Any]) -> Staged | None:
        """Stage ``events`` for the breaker's journal (None if there is nothing to write)."""
        for event in events:
            _transition(self.tool.name, event)
        if not events or self.cell is None:
            return None
        return self.cell.stage_events(events)


# The state a breaker event moves to, as the metric's ``tether.breaker_state`` names it.
_STATES = {"Opened": "open", "HalfOpened": "half_open", "Closed": "closed"}


def _transition(tool: str, event: Any) -> None:
    name = type(event).__name__
    if name in ("BreakerOpened", "BreakerHalfOpened", "BreakerClosed"):
        to = name.removeprefix("Breaker")
        state = _STATES[to]
        telemetry.breaker_transitions.add(1, {"tether.tool": tool, "tether.breaker_state": state})
        fields = {k: getattr(event, k) for k in event.__struct_fields__}
        telemetry.guard_event(f"breaker_{to.lower()}", tool=tool, **fields)


class LoopWatch:
    """One session's loop detector as the effect path sees it.

    Only detections and resets are journaled. The calls and results it watches are already in
    the session's effects ledger, so the detector rebuilds its recent history from there when
    it starts (``LoopGuard.on_start``): no extra row per call.
    """

    def __init__(self, cell: ActiveCell) -> None:
        self.cell = cell

    def hold(self, detection: Detection) -> None:
        """A detection made on a result: the session is told before its next call."""
        self._guard().held = detection

    def take_pending(self) -> Detection | None:
        guard = self._guard()
        held, guard.held = guard.held, None
        return held

    def _guard(self) -> LoopGuard:
        return guard_instance(self.cell, LoopGuard)

    def call(
        self, tool: str, args_hash: str, now: float, slot: str
    ) -> tuple[Detection | None, Staged | None]:
        """Observe a call about to be made at ``slot`` (a replay of a slot is not a new call)."""
        guard = self._guard()
        if slot in guard.seen_slots:
            return None, None
        guard.remember(slot)
        detector = guard.detector()
        detection, events = detector.observe_call(tool, args_hash, now=now)
        return detection, self._settle(detector.state, events)

    def result(
        self, tool: str, args_hash: str, result_hash: str, now: float
    ) -> tuple[Detection | None, Staged | None]:
        detector = self._guard().detector()
        detection, events = detector.observe_result(tool, args_hash, result_hash, now=now)
        return detection, self._settle(detector.state, events)

    def _settle(self, state: Any, events: list[Any]) -> Staged | None:
        """The detector already folded ``events`` into ``state``: keep it; journal only the
        detections and resets (the observations are in the effects ledger)."""
        self.cell.replace_state(state)
        kept = [e for e in events if not isinstance(e, LoopCallObserved | LoopResultObserved)]
        return self.cell.stage_events(kept, applied=True)


_RETRY_UNAVAILABLE = 30.0  # seconds before a guard that could not start is tried again
_START_WAIT = 5.0  # seconds a guard being (re)started here by its supervisor is waited for
# Start failures that the next attempt would meet again: a record that does not decode, a
# class or arguments that do not fit. A store error may pass, and is raised as before.
_PERMANENT = (ConfigError, CorruptRecordError)


class Guards:
    """The runtime's guard registry (``rt.guards``)."""

    def __init__(self, runtime: Kernel) -> None:
        self._rt = runtime
        self._locks: dict[str, list[Any]] = {}  # actor id -> [lock, users]
        self._fallback: dict[str, BreakerGuard] = {}
        # guard id -> (until, why): a guard that cannot start here (a corrupt record, a class
        # that does not import), or that another live runtime holds, is not tried again before
        # `until`; meanwhile the effect path goes on without it, instead of failing (or
        # waiting on) every call.
        self._unavailable: dict[str, tuple[float, str]] = {}
        self._guards: dict[str, BreakerGuard] = {}  # by tool name, while its cell lives

    def of_session(self, actor_id: str) -> tuple[str, ...]:
        """The ids of the guards that keep state about the session ``actor_id`` (its loop guard
        and its gate): an actor that takes over a stopped session's id must not inherit them."""
        return (loops_id(actor_id), gate_id(actor_id))

    async def breaker(self, tool: Tool) -> BreakerGuard | None:
        """The breaker of ``tool`` (None if the tool has ``breaker=None``)."""
        spec = tool.breaker
        if spec is None:
            return None
        known = self._guards.get(tool.name)
        if known is not None and known.tool is tool:
            cell = known.cell
            if cell is None:
                if self._rt.clock() < known.until:
                    return known  # in memory, until the breaker actor may be ours to take
            elif self._rt.cells.get(cell.actor_id) is cell and cell.instance:
                return known  # the common case: no lookup, no allocation
        if isinstance(spec, BreakerPolicy):
            policy, kind, taxonomy = spec, "external_api", False
        elif isinstance(spec, str):
            policy, kind, taxonomy = BreakerPolicy.for_kind(spec), spec, True
        else:
            raise ConfigError(
                f"tool {tool.name!r}: breaker must be a kind name, a tether.BreakerPolicy or "
                f"None, not {spec!r}"
            )
        guard_id = breaker_id(tool.name)
        cell = await self._cell(guard_id, Breaker, {"tool": tool.name, "kind": kind})
        if cell is None:
            until, why = self._unavailable.get(
                guard_id, (self._rt.clock() + _RETRY_UNAVAILABLE, "it did not start in time")
            )
            guard = self._fallback.get(tool.name)
            if guard is None or guard.tool is not tool:
                telemetry.log.warning(
                    "breaker_not_owned_here",
                    tool=tool.name,
                    detail=f"{why}; using an in-memory one",
                )
                guard = self._fallback[tool.name] = BreakerGuard(tool, policy, taxonomy, None)
            guard.until = until
            self._guards[tool.name] = guard
            return guard
        self._fallback.pop(tool.name, None)  # the breaker actor is ours again
        guard_instance(cell, Breaker).policy = policy
        guard = self._guards[tool.name] = BreakerGuard(tool, policy, taxonomy, cell)
        return guard

    async def loops(self, actor: ActiveCell) -> LoopWatch | None:
        """The loop detector of the actor behind ``actor`` (None without a loop policy)."""
        cached: LoopWatch | None = actor.loop_watch
        if cached is not None and self._rt.cells.get(cached.cell.actor_id) is cached.cell:
            return cached  # the common case: the guard is alive here
        policy = getattr(actor.instance, "loop_policy", None)
        if policy is None:
            return None
        if not isinstance(policy, LoopPolicy):
            raise ConfigError(
                f"{actor.actor_id}: loop_policy must be a tether.LoopPolicy, not {policy!r}"
            )
        cell = await self._cell(
            loops_id(actor.actor_id), LoopGuard, {"session_id": actor.actor_id}, dynamic=False
        )
        if cell is None:
            return None
        guard_instance(cell, LoopGuard).policy = policy
        watch = actor.loop_watch = LoopWatch(cell)
        return watch

    async def notifier(self, url: str) -> None:
        """Make sure the notifier of webhook ``url`` exists (created, as a dynamic child of
        ``tether.guards``, on first use; it may be active in another runtime)."""
        await self._cell(notifier_id(url), Notifier, {"url": url})

    async def gate(self, actor: ActiveCell) -> ActiveCell | None:
        """The escalation gate of the actor behind ``actor`` (its journal of held calls)."""
        return await self._cell(
            gate_id(actor.actor_id), Gate, {"session_id": actor.actor_id}, dynamic=False
        )

    async def child(
        self, actor_id: str, cls: type[Any], init: dict[str, Any], *, parent: str | None = None
    ) -> ActiveCell | None:
        """An actor that serves the effect path (``tether.mcp``'s server connections), started
        on first use as a dynamic child of ``tether.guards``, or of ``parent``: a supervisor
        that is itself such a child, started first. Its live cell here; None if another
        runtime owns it, or it is not ready within a few seconds (ask again)."""
        return await self._cell(actor_id, cls, init, parent=parent)

    async def _cell(
        self,
        actor_id: str,
        cls: type[Any],
        init: dict[str, Any],
        *,
        dynamic: bool = True,
        parent: str | None = None,
    ) -> ActiveCell | None:
        """The guard's live cell here, created and started on first use; None if another
        runtime owns it. ``dynamic``: recorded as a dynamic child of ``parent`` (by default
        ``tether.guards``: the breakers); otherwise a child by its record alone (a session's
        guards)."""
        rt = self._rt
        cell = rt.cells.get(actor_id)
        if cell is not None and cell.ready.is_set() and cell.instance is not None:
            guard_instance(cell, cls)  # an actor of another class at a guard's id: refused
            return cell
        unavailable = self._unavailable.get(actor_id)
        if unavailable is not None:
            if rt.clock() < unavailable[0]:
                return None
            del self._unavailable[actor_id]
        # One creator per id; the lock goes away with its last user (no entry per actor kept).
        entry = self._locks.get(actor_id)
        if entry is None:
            entry = self._locks[actor_id] = [anyio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                return await self._start(actor_id, cls, init, dynamic, parent or GUARDS_SUPERVISOR)
        finally:
            entry[1] -= 1
            if not entry[1]:
                del self._locks[actor_id]

    async def _start(
        self, actor_id: str, cls: type[Any], init: dict[str, Any], dynamic: bool, parent: str
    ) -> ActiveCell | None:
        """Create the guard if it does not exist, and activate it here: its live cell; None at
        once if another live runtime holds it (remembered until its lease could have changed),
        or if it cannot start here. Only a guard that its supervisor is starting here (a
        restart under way) is waited for, a few seconds at most."""
        rt = self._rt
        rec = await rt.store.get_actor(actor_id)
        if rec is not None and current_path(rec.class_path) != class_path(cls):
            # Not started through the guard path: it is not a guard, whatever it does.
            raise wrong_guard(actor_id, rec.class_path, cls)
        if rec is None:
            await self._ensure_supervisor()
            if dynamic:
                # Another runtime may have created it first: then it is there to use.
                with contextlib.suppress(AlreadyStarted):
                    await rt.add_child(parent, ChildSpec(cls, actor_id, **init))
            else:
                await rt.spawn_child(cls, actor_id, GUARDS_SUPERVISOR, init)
        with anyio.move_on_after(_START_WAIT):
            while rt.is_open:
                cell = rt.cells.get(actor_id)
                if cell is None:
                    try:
                        cell = await rt.activate(actor_id)
                    except _PERMANENT as exc:  # its record cannot be read or imported here
                        self._cannot_start(actor_id, exc)
                        return None
                    if cell is None:
                        until = rt.leased_elsewhere(actor_id)
                        if until is not None:
                            self._elsewhere(actor_id, until, rec.lease_owner if rec else None)
                            return None
                if cell is not None:
                    await cell.ready.wait()
                    if cell.instance is not None and rt.cells.get(actor_id) is cell:
                        return cell
                    if isinstance(cell.start_error, _PERMANENT):  # it would fail again
                        self._cannot_start(actor_id, cell.start_error)
                        return None
                await anyio.sleep(0.005)
        return None

    def _elsewhere(self, actor_id: str, until: float, owner: str | None) -> None:
        """Another live runtime holds the guard ``actor_id`` (the store refused its lease, or
        its supervisor's, here; ``owner``: who held it when last read): go on without it
        until ``until``, when that lease could have changed."""
        held_by = f"runtime {owner}" if owner else "another runtime"
        self._go_without(actor_id, until, f"{held_by} holds it")
        telemetry.log.info("guard_held_elsewhere", guard=actor_id, owner=owner, until=until)

    def session_left(self, actor_id: str) -> None:
        """The actor ``actor_id`` (a session) left this runtime: its guards here leave with
        it, giving their leases back, so that the runtime that runs it next takes them."""
        cells = self._rt.cells
        for guard_id in self.of_session(actor_id):
            cell = cells.get(guard_id)
            if cell is not None:
                cell.leave()

    def _cannot_start(self, actor_id: str, exc: Exception) -> None:
        """Go on without the guard ``actor_id`` for a while, and say why, once per while."""
        why = f"{type(exc).__name__}: {exc}"
        self._go_without(actor_id, self._rt.clock() + _RETRY_UNAVAILABLE, why)
        telemetry.log.error(
            "guard_unavailable", guard=actor_id, error=why, retry_in=_RETRY_UNAVAILABLE
        )

    def _go_without(self, actor_id: str, until: float, why: str) -> None:
        """The effect path goes on without the guard ``actor_id`` until ``until``, because
        ``why``: it is not looked for meanwhile (``_cell``)."""
        self._unavailable[actor_id] = (until, why)

    async def _ensure_supervisor(self) -> None:
        try:
            await self._rt.lookup(GUARDS_SUPERVISOR)
        except ActorNotFound:
            await self._rt.spawn(GuardSupervisor, GUARDS_SUPERVISOR)
