"""The guards as journaled actors in the supervision tree (DESIGN §6, I10).

* ``Breaker`` (id ``breaker:<tool>``): one per tool, shared by every session of the runtime,
  a child of the ``tether.guards`` supervisor.
* ``LoopGuard`` (id ``<session>/loops``): one per session that has a loop policy, also a
  child of ``tether.guards``.
* ``Notifier`` (id ``notify:<hash of the URL>``, ``notifier.py``): one per webhook URL of an
  approval policy, a dynamic child of ``tether.guards`` like the breakers.

Their decisions are made on the effect path itself, synchronously on the live instance's state
(``tether.runtime.guards``), because a message round trip per call would cost more than the
call's own ledger writes. The events those decisions return are appended to the guard's journal
in the same group commit as the effect's intent or receipt. So a guard's state is always the
fold of its journal: after a crash an open breaker is still open until the same moment, and a
session's recent calls are still remembered.

Invariant: a guard's events are only ever appended through ``Cell.append_events`` — never with
``persist`` inside a handler — so that direct appends and messages never race for a sequence
number. The messages below are for people and tools (reset, inspect).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import msgspec

from tether.actors.actor import Actor, class_path
from tether.actors.guards.breaker import (
    BreakerCore,
    BreakerEvent,
    BreakerPolicy,
    BreakerState,
)
from tether.actors.guards.loops import (
    Detection,
    LoopCallObserved,
    LoopDetector,
    LoopEvent,
    LoopPolicy,
    LoopResultObserved,
    LoopState,
)
from tether.actors.guards.notifier import NOTIFY_PREFIX, Notifier
from tether.actors.messages import Event, Message
from tether.errors import ConfigError
from tether.supervisor.spec import OneForOne
from tether.supervisor.supervisor import ChildEntry, Supervisor

GUARDS_SUPERVISOR = "tether.guards"
#: Ids starting so are the runtime's own (``tether.guards`` today; others may come).
RUNTIME_PREFIX = "tether."
_BREAKER_PREFIX = "breaker:"
_LOOPS_SUFFIX = "/loops"
_GATE_SUFFIX = "/gate"


def breaker_id(tool: str) -> str:
    return f"{_BREAKER_PREFIX}{tool}"


def loops_id(actor_id: str) -> str:
    return f"{actor_id}{_LOOPS_SUFFIX}"


def gate_id(actor_id: str) -> str:
    return f"{actor_id}{_GATE_SUFFIX}"


class ReservedId(msgspec.Struct, frozen=True):
    """What the runtime keeps an actor id for: the only class and parent it may hold."""

    cls: type[Actor[Any]] | None  # None: no actor at all (a name kept for later)
    parent_id: str | None
    what: str  # "the circuit breaker of tool 'send'"
    why: str  # what another actor there would break


def reserved_id(actor_id: str) -> ReservedId | None:
    """What the runtime derives ``actor_id`` for, or None if it is free for users' actors.

    The guards' ids are derived, never registered: the effect path finds a tool's breaker at
    ``breaker:<tool>`` and a session's loop guard and gate at ``<session>/loops`` and
    ``<session>/gate``. An actor of another class at one of them would take the guard's place
    for every call that needs it."""
    if actor_id == GUARDS_SUPERVISOR:
        return ReservedId(
            GuardSupervisor, None, "the supervisor of the guards", "every guard starts under it"
        )
    if actor_id.startswith(RUNTIME_PREFIX):
        return ReservedId(
            None, None, "its own actors", f"ids starting with {RUNTIME_PREFIX!r} are the runtime's"
        )
    if actor_id.startswith(NOTIFY_PREFIX):
        return ReservedId(
            Notifier,
            GUARDS_SUPERVISOR,
            "the notifier of an approval policy's webhook",
            "the approval notices for that URL are delivered through it",
        )
    if actor_id.startswith(_BREAKER_PREFIX):
        tool = actor_id.removeprefix(_BREAKER_PREFIX)
        return ReservedId(
            Breaker,
            GUARDS_SUPERVISOR,
            f"the circuit breaker of tool {tool!r}",
            f"every session's calls of {tool!r} pass through it",
        )
    for suffix, cls, what, why in (
        (_LOOPS_SUFFIX, LoopGuard, "the loop detector", "every call of the session passes it"),
        (_GATE_SUFFIX, Gate, "the escalation gate", "the session's approvals are journaled there"),
    ):
        session = actor_id.removesuffix(suffix)
        if session != actor_id:
            return ReservedId(cls, GUARDS_SUPERVISOR, f"{what} of session {session!r}", why)
    return None


def check_id_use(actor_id: str, cls: type[Any], parent_id: str | None) -> None:
    """Raise ``ConfigError`` if ``actor_id`` is reserved (``reserved_id``) for anything but
    ``cls`` under ``parent_id``: the runtime's own guards pass, a user's actor does not."""
    reserved = reserved_id(actor_id)
    if reserved is None or (reserved.cls is cls and reserved.parent_id == parent_id):
        return
    raise ConfigError(
        f"actor id {actor_id!r} is reserved: tether uses it for {reserved.what}, and "
        f"{reserved.why}; give {cls.__qualname__} another id"
    )


def wrong_guard(actor_id: str, held_by: str, cls: type[Any]) -> ConfigError:
    """The error of a call whose guard's id is held by an actor of another class: one a user
    spawned there before the runtime reserved such ids (``reserved_id``)."""
    reserved = reserved_id(actor_id)
    what = reserved.what if reserved is not None else f"a {cls.__qualname__}"
    return ConfigError(
        f"actor id {actor_id!r} is held by a {held_by}, not a {cls.__qualname__}: tether uses "
        f"that id for {what}, so the call that needs it cannot be made. The actor was "
        "spawned there before tether reserved the id; remove it from the store"
    )


class GuardSupervisor(Supervisor):
    """Supervises the guards: every tool's breaker and every session's loop guard and gate.
    A guard that fails is restarted and re-folds its journal; the sessions using it are not
    disturbed. Guards start on first use, not with the supervisor: a runtime with 10,000 idle
    sessions does not bring 10,000 loop guards into memory when it starts.

    Breakers are dynamic children (few, one per tool). A session's guards are children by
    their records alone (``parent_id``), not entries in this supervisor's state: their child
    entry follows from their id, so 10,000 sessions cost this supervisor nothing to remember.
    """

    strategy = OneForOne(max_restarts=100, within=60.0)
    children: ClassVar[list[Any]] = []
    start_dynamic_children = False

    def _entry(self, child_id: str) -> ChildEntry | None:
        entry = super()._entry(child_id)
        if entry is not None:
            return entry
        reserved = reserved_id(child_id)
        cls = reserved.cls if reserved is not None else None
        session = child_id.rpartition("/")[0]
        if cls is None or cls not in (LoopGuard, Gate) or not session:
            return None
        return ChildEntry(
            child_id=child_id,
            class_path=class_path(cls),
            restart="permanent",
            shutdown=5.0,
            init=msgspec.msgpack.encode({"session_id": session}),
        )


class ResetBreaker(Message):
    """Reset the breaker now (an operator knows the tool is back, or wants its count to start
    again): closed, its window and trip count forgotten, whatever its state, as resilience4j's
    ``reset()``. Journaled with ``by``."""

    by: str = "operator"


class GetBreakerState(Message):
    pass


class Breaker(Actor[BreakerState]):
    """A tool's circuit breaker. ``kind`` picks the defaults of the seeds' table; a tool's
    own ``BreakerPolicy`` replaces it while the tool is in use in this process."""

    initial_state = BreakerState()

    def __init__(self, tool: str, kind: str = "external_api") -> None:
        self.tool = tool
        self.kind = kind
        self.policy = BreakerPolicy.for_kind(kind)

    def core(self) -> BreakerCore:
        return BreakerCore(self.policy, self.state)

    def apply(self, state: BreakerState, event: BreakerEvent) -> BreakerState:
        return BreakerCore(self.policy, state).apply(state, event)

    async def handle(self, msg: ResetBreaker | GetBreakerState) -> dict[str, Any]:
        now = self._tether_cell.runtime.clock()
        if isinstance(msg, ResetBreaker):
            await self._tether_cell.append_events(self.core().reset(now, by=msg.by))
        return self.describe(now)

    def describe(self, now: float) -> dict[str, Any]:
        """The breaker's state for a person: its status, why and until when it is open, the
        window's counts as of ``now`` (closed), and its probes (half-open)."""
        state = self.state
        counts = self.core().counts(now)
        return {
            "tool": self.tool,
            "status": state.status_at(now),
            "trips": state.trips,
            "reason": state.reason,
            "until": state.until if state.status != "closed" else None,
            "window": msgspec.to_builtins(counts),
            "probes": {
                "allowed": self.policy.half_open_probes,
                "admitted": state.probes_admitted,
                "passed": state.probes_passed,
            },
        }

    def summary(self) -> str:
        """One line for ``rt.tree()``, as of the runtime's clock: an open breaker whose open
        time is over shows as half-open (``BreakerState.status_at``), never "open until" a
        time that has passed."""
        state = self.state
        now = self._tether_cell.runtime.clock()
        status = state.status_at(now)
        if status == "closed":
            return "closed"
        trips = f"trips={state.trips}"
        if state.probes_passed:
            trips += f"; trial calls passed={state.probes_passed}"
        if status == "open":
            until = time.strftime("%H:%M:%S", time.localtime(state.until))
            return f"open until {until} ({state.reason}); {trips}"
        if state.status == "open":  # its open time is over; no caller has come since
            return f"half-open: the next call is a trial (opened: {state.reason}); {trips}"
        return f"half-open: trial call(s) under way (opened: {state.reason}); {trips}"


class ResetLoops(Message):
    """Forget the session's recent calls (after a context reset or a person's go-ahead)."""

    reason: str = "reset by an operator"


class GetLoopState(Message):
    pass


class LoopGuard(Actor[LoopState]):
    """One session's loop detector: its recent calls and detections, journaled."""

    initial_state = LoopState()
    #: Its state also holds the calls ``on_start`` rebuilds from the session's ledger (never
    #: journaled here), so a snapshot is more than its journal's fold: ``tether check`` does
    #: not compare the two.
    state_outside_journal: ClassVar[bool] = True

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.policy = LoopPolicy()
        # A no-progress detection made on a result, to be told before the next call. In
        # memory only: if it is lost in a crash, the next repeat detects it again.
        self.held: Detection | None = None
        # Where the recent calls were made (message id # effect index): a replayed step asks
        # again at the same place, and that is not a new call. Rebuilt from the ledger.
        self.seen_slots: dict[str, None] = {}

    def remember(self, slot: str) -> None:
        self.seen_slots[slot] = None
        if len(self.seen_slots) > 4 * self.policy.history:  # bounded: drop the oldest half
            for old in list(self.seen_slots)[: len(self.seen_slots) // 2]:
                del self.seen_slots[old]

    def detector(self) -> LoopDetector:
        return LoopDetector(self.policy, self.state)

    async def on_start(self) -> None:
        """Rebuild the recent calls from the session's effects ledger (they are not
        journaled here: the ledger has them), after the last reset."""
        import hashlib

        cell = self._tether_cell
        session_cls = await _session_class(cell.runtime, self.session_id)
        # The runtime sets the session's policy only once this has run; the rebuild needs its
        # history bound now (the default's would keep too many calls, or too few).
        policy = getattr(session_cls, "loop_policy", None)
        if isinstance(policy, LoopPolicy):
            self.policy = policy
        # Only the rows the detector can keep are read: the newest `history` watched calls
        # after the last reset (oldest first), however long the session's ledger has grown.
        rows = await cell.runtime.store.recent_effects(
            self.session_id,
            self.policy.history,
            after=self.state.reset_at,
            exclude_tools=_unwatched_tools(session_cls),
        )
        events: list[LoopEvent] = []
        for r in rows:
            # The same hashes the effect path gives the detector (tether.runtime.effects).
            args_hash = r.input_hash[:16]
            self.remember(f"{r.msg_id}#{r.idx}")
            events.append(LoopCallObserved(at=r.created_at, tool=r.tool, args_hash=args_hash))
            if r.status == "done" and r.result is not None:
                events.append(
                    LoopResultObserved(
                        at=r.updated_at,
                        tool=r.tool,
                        args_hash=args_hash,
                        result_hash=hashlib.sha256(r.result).hexdigest()[:16],
                    )
                )
        cell.apply_in_memory(events)

    def apply(self, state: LoopState, event: LoopEvent) -> LoopState:
        return LoopDetector(self.policy, state).apply(state, event)

    async def handle(self, msg: ResetLoops | GetLoopState) -> dict[str, Any]:
        if isinstance(msg, ResetLoops):
            events = self.detector().reset(now=self._tether_cell.runtime.clock(), reason=msg.reason)
            await self._tether_cell.append_events(events)
        return {"session": self.session_id, **msgspec.to_builtins(self.state)}

    def summary(self) -> str:
        return f"{len(self.state.history)} recent call(s)"


class ApprovalRequested(Event):
    request_id: str
    tool: str
    reason: str
    fingerprint: str
    deadline: float
    at: float


class ApprovalSettled(Event):
    request_id: str
    status: str  # "approved" | "rejected"
    by: str
    reason: str
    at: float


GateEvent = ApprovalRequested | ApprovalSettled


class GateState(msgspec.Struct, frozen=True, kw_only=True):
    pending: tuple[str, ...] = ()
    requested: int = 0
    approved: int = 0
    rejected: int = 0


class GetGateState(Message):
    pass


class Gate(Actor[GateState]):
    """One session's escalation gate (I9, I10): the journal of every call it held for a
    person and how each was settled. The requests themselves, their deadlines and the
    decisions from any process live in the store's approvals table (``rt.approvals``); the
    gate's events are written with the session's own commits (the park of the held step, and
    the step that applies the decision)."""

    initial_state = GateState()

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id

    def apply(self, state: GateState, event: GateEvent) -> GateState:
        if isinstance(event, ApprovalRequested):
            return msgspec.structs.replace(
                state,
                pending=(*state.pending, event.request_id),
                requested=state.requested + 1,
            )
        approved = event.status == "approved"
        return msgspec.structs.replace(
            state,
            pending=tuple(r for r in state.pending if r != event.request_id),
            approved=state.approved + approved,
            rejected=state.rejected + (not approved),
        )

    async def handle(self, msg: GetGateState) -> dict[str, Any]:
        return {"session": self.session_id, **msgspec.to_builtins(self.state)}

    def summary(self) -> str:
        s = self.state
        return f"{len(s.pending)} pending; {s.approved} approved, {s.rejected} rejected"


async def _session_class(rt: Any, session_id: str) -> type[Any] | None:
    """The class of the session a guard watches; None if it has no record or its class cannot
    be imported here (the guard then keeps its defaults)."""
    from tether.actors.actor import import_class

    rec = await rt.store.get_actor(session_id)
    if rec is None:
        return None
    try:
        return import_class(rec.class_path)
    except ConfigError:
        return None


def _unwatched_tools(cls: type[Any] | None) -> frozenset[str]:
    """The tools of a session whose calls the live effect path never shows its loop guard
    (``loop_guard=False``: the session's model)."""
    tools = [*getattr(cls, "tools", ()), getattr(cls, "_model_tool", None)]
    return frozenset(t.name for t in tools if t is not None and not t.loop_guard)
