"""The registry: the cells active in this runtime, and what it knows of every other actor.

``cells`` maps an actor id to its cell while the actor is active here (``activation.py`` puts
it in, and takes it out when it leaves). ``known`` remembers each actor's spec and status as
this runtime last saw them, so that a send to an active actor reads no store: every stop and
status change made here updates it; another process's stop is caught when the actor is
activated, which reads its record. ``stopping`` holds the actors being stopped for good here:
none of them is activated meanwhile.
"""

from __future__ import annotations

from typing import Any

from tether import telemetry
from tether.actors.actor import ActorSpec, actor_spec, import_class
from tether.actors.messages import Message
from tether.errors import (
    ActorNotFound,
    ActorStopped,
    ConfigError,
    CorruptRecordError,
    MessageRejected,
)
from tether.runtime.cell import Cell
from tether.runtime.kernel import ActiveCell
from tether.runtime.live_actor import LiveActor
from tether.store.protocol import Store

MAX_ID_LEN = 256


class Registry:
    """The actors of one runtime, active and known."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.cells: dict[str, Cell] = {}
        self.known: dict[str, tuple[ActorSpec, str]] = {}  # actor id -> (spec, status)
        self.stopping: set[str] = set()

    def active_spec(self, actor_id: str) -> ActorSpec | None:
        """The spec of an actor this runtime knows to be active, or None: the fast path of a
        send (no store read, no coroutine)."""
        known = self.known.get(actor_id)
        return known[0] if known is not None and known[1] == "active" else None

    async def spec_for_send(self, actor_id: str, msg: Message) -> ActorSpec:
        """The slow path of ``active_spec``, for a send: read the registry; refuse a send to an
        actor that is not active (after the type check: a wrong type is reported first)."""
        spec, status = await self.spec_of(actor_id)
        if status != "active":
            check_type(actor_id, spec, msg)
            rec = await self._store.get_actor(actor_id)
            raise ActorStopped(actor_id, rec.stop_reason if rec else None)
        return spec

    async def spec_only(self, actor_id: str) -> ActorSpec:
        return (await self.spec_of(actor_id))[0]

    async def spec_of(self, actor_id: str) -> tuple[ActorSpec, str]:
        """``actor_id``'s spec and status; ``ActorNotFound`` if the store has no such actor."""
        known = self.known.get(actor_id)
        if known is not None:
            return known
        rec = await self._store.get_actor(actor_id)
        if rec is None:
            raise ActorNotFound(actor_id)
        known = (actor_spec(import_class(rec.class_path)), rec.status)
        self.known[actor_id] = known
        return known

    def forget_status(self, actor_id: str, status: str) -> None:
        """``actor_id`` is ``status`` now (known to be so, if it is known at all)."""
        known = self.known.get(actor_id)
        if known is not None:
            self.known[actor_id] = (known[0], status)

    def remove(self, cell: ActiveCell) -> None:
        """Take ``cell`` out of the registry, unless a newer cell of its actor replaced it. (A
        cell that ignores its cancellation is abandoned so: the next activation takes a new
        fencing token, so whatever it still tries to commit is rejected, I8.)"""
        if self.cells.get(cell.actor_id) is cell:
            del self.cells[cell.actor_id]

    def detach_if_idle(self, cell: LiveActor) -> bool:
        """Remove an idle cell from the registry (passivation); False if work arrived."""
        if cell.buffer or cell.rescan_requested or not cell.spec.cls.passivates:
            return False
        self.remove(cell)
        known = self.known.get(cell.actor_id)
        if known is not None and known[1] == "active":  # the store has it: read it again later
            del self.known[cell.actor_id]
        return True


def report_corrupt_actor(actor_id: str, exc: CorruptRecordError) -> None:
    """An actor's row is damaged: logged once, and it is not served."""
    telemetry.report_corrupt("actor_record_corrupt", actor_id, exc, actor_id=actor_id)


def check_type(actor_id: str, spec: ActorSpec, msg: Message) -> None:
    """Raise ``MessageRejected`` unless ``actor_id`` (whose spec is ``spec``) accepts ``msg``."""
    if type(msg) not in spec.message_types:
        raise MessageRejected(actor_id, type(msg).__name__, spec.accepted_names)


def check_id(actor_id: Any) -> None:
    """Raise ``ConfigError`` unless ``actor_id`` is an id an actor may have."""
    if not isinstance(actor_id, str) or not actor_id or len(actor_id) > MAX_ID_LEN:
        raise ConfigError(
            f"actor id must be a non-empty string of at most {MAX_ID_LEN} characters, not {actor_id!r}"
        )
