"""The guards' place in the supervision tree: their supervisor, and the ids tether keeps for them.

The guards themselves (``Breaker``, ``LoopGuard``, ``Gate``, ``Notifier``) are actors
(``tether.actors.guards``); what supervises them, and which actor ids belong to them, sits one
layer up, with the supervisor they are children of. The runtime consults ``check_id_use``
before every spawn, so that a user's actor never takes a guard's id.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from tether.actors.actor import Actor, class_path
from tether.actors.guards.actors import (
    BREAKER_PREFIX,
    GATE_SUFFIX,
    GUARDS_SUPERVISOR,
    LOOPS_SUFFIX,
    Breaker,
    Gate,
    LoopGuard,
)
from tether.actors.guards.notifier import NOTIFY_PREFIX, Notifier
from tether.errors import ConfigError
from tether.supervisor.spec import OneForOne
from tether.supervisor.supervisor import ChildEntry, Supervisor

#: Ids starting so are the runtime's own (``tether.guards`` today; others may come).
RUNTIME_PREFIX = "tether."


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
    if actor_id.startswith(BREAKER_PREFIX):
        tool = actor_id.removeprefix(BREAKER_PREFIX)
        return ReservedId(
            Breaker,
            GUARDS_SUPERVISOR,
            f"the circuit breaker of tool {tool!r}",
            f"every session's calls of {tool!r} pass through it",
        )
    for suffix, cls, what, why in (
        (LOOPS_SUFFIX, LoopGuard, "the loop detector", "every call of the session passes it"),
        (GATE_SUFFIX, Gate, "the escalation gate", "the session's approvals are journaled there"),
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
    They run where their session runs (``starts_where_used``): with several runtimes on one
    store, this supervisor decides their failures only in the runtime it runs in.
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
