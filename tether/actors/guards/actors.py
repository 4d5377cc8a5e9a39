"""The guards as journaled actors in the supervision tree (DESIGN §6, I10).

* ``Breaker`` (id ``breaker:<tool>``): one per tool, shared by every session of the runtime,
  a child of the ``tether.guards`` supervisor.
* ``LoopGuard`` (id ``<session>/loops``): one per session that has a loop policy, also a
  child of ``tether.guards``.
* ``Notifier`` (id ``notify:<hash of the URL>``, ``notifier.py``): one per webhook URL of an
  approval policy, a dynamic child of ``tether.guards`` like the breakers.

Their supervisor (``GuardSupervisor``) and the table of the ids tether reserves for them
(``reserved_id``) are in ``tether.supervisor.guards``: a layer above the actors.

Their decisions are made on the effect path itself, synchronously on the live instance's state
(``tether.runtime.guards``), because a message round trip per call would cost more than the
call's own ledger writes. The events those decisions return are appended to the guard's journal
in the same group commit as the effect's intent or receipt. So a guard's state is always the
fold of its journal: after a crash an open breaker is still open until the same moment, and a
session's recent calls are still remembered.

Invariant: a guard's events are only ever appended through ``Cell.append_events`` — never with
``persist`` inside a handler — so that the order its state in memory applied them in is the
order of its journal. Appends are numbered when submitted, and a step of the guard's own
handler (the messages below, for people and tools: reset, inspect) advances the journal's
number when its commit is submitted, so the two never take the same number.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import msgspec

from tether.actors.actor import Actor
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
from tether.actors.messages import Event, Message
from tether.errors import ConfigError

GUARDS_SUPERVISOR = "tether.guards"
BREAKER_PREFIX = "breaker:"
LOOPS_SUFFIX = "/loops"
GATE_SUFFIX = "/gate"


def breaker_id(tool: str) -> str:
    return f"{BREAKER_PREFIX}{tool}"


def loops_id(actor_id: str) -> str:
    return f"{actor_id}{LOOPS_SUFFIX}"


def gate_id(actor_id: str) -> str:
    return f"{actor_id}{GATE_SUFFIX}"


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
    starts_where_used = True  # with its session, whichever runtime runs the guards' supervisor
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
    starts_where_used = True  # with its session, whichever runtime runs the guards' supervisor

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
