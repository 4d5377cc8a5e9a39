"""``rt.tree()``: the live supervision tree, for people and for tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import msgspec

from tether.actors.actor import Actor, import_class
from tether.actors.status import ActorStatus, actor_status
from tether.errors import ConfigError, CorruptRecordError
from tether.runtime.journal import folded
from tether.runtime.kernel import Kernel
from tether.runtime.supervision import Supervision
from tether.store.records import ActorRecord


class TreeNode(msgspec.Struct, frozen=True):
    """One actor in the tree.

    ``status`` is an ``ActorStatus`` (``tether/actors/status.py``): ``running`` (active here,
    passivated, or owned by another runtime), ``restarting``, ``backing off``, ``stopped`` or
    ``failed``; ``active`` says whether its
    instance is in this process's memory right now. ``detail`` is what the actor says of its
    own state when it has a ``summary()`` (a breaker: open until when, why): from its live
    state when it is active here, else from its committed journal (unless it builds state in
    ``on_start`` that the journal does not hold).
    """

    id: str
    actor_class: str
    status: ActorStatus
    active: bool
    restart_count: int
    last_failure: str | None
    children: list[TreeNode]
    detail: str | None = None

    def find(self, actor_id: str) -> TreeNode | None:
        """The node for ``actor_id`` in this subtree, if any."""
        if self.id == actor_id:
            return self
        for child in self.children:
            hit = child.find(actor_id)
            if hit is not None:
                return hit
        return None

    def render(self, indent: str = "") -> str:
        """An indented text view, one line per actor."""
        extra = f", {self.restart_count} restart(s)" if self.restart_count else ""
        last = f", last failure: {self.last_failure}" if self.last_failure else ""
        detail = f" [{self.detail}]" if self.detail else ""
        line = (
            f"{indent}{self.id} ({self.actor_class.rsplit(':', 1)[-1]}) {self.status}{extra}{last}"
            f"{detail}"
        )
        return "\n".join([line, *(c.render(indent + "  ") for c in self.children)])


class TreeHost(Kernel, Protocol):
    """What the tree reads of the runtime: the kernel, and supervision's restart counts."""

    @property
    def supervision(self) -> Supervision: ...


async def supervision_tree(
    rt: TreeHost, on_corrupt: Callable[[str, CorruptRecordError], None]
) -> list[TreeNode]:
    """``rt.tree()``: every actor in the store under its supervisor; a damaged row is left out
    (its children become roots) and reported to ``on_corrupt``."""
    records = await rt.store.list_actors(on_corrupt=on_corrupt)
    children: dict[str | None, list[ActorRecord]] = {}
    for rec in records:
        children.setdefault(rec.parent_id, []).append(rec)
    ids = {r.actor_id for r in records}
    offline = {
        rec.actor_id: text
        for rec in records
        if rec.actor_id not in rt.cells and rec.status == "active"
        if (text := await _offline_summary(rt, rec)) is not None
    }

    def node(rec: ActorRecord) -> TreeNode:
        status = actor_status(rec.status, rt.supervision.held.get(rec.actor_id))
        count, last = rt.supervision.counts(rec.actor_id, rec.parent_id)
        cell = rt.cells.get(rec.actor_id)
        summary = getattr(cell.instance, "summary", None) if cell is not None else None
        return TreeNode(
            id=rec.actor_id,
            actor_class=rec.class_path,
            status=status,
            active=cell is not None,
            restart_count=count,
            last_failure=last,
            children=[node(c) for c in children.get(rec.actor_id, [])],
            detail=summary() if callable(summary) else offline.get(rec.actor_id),
        )

    return [node(r) for r in records if r.parent_id is None or r.parent_id not in ids]


async def _offline_summary(rt: TreeHost, rec: ActorRecord) -> str | None:
    """What an actor that is not active here says of its state (a guard: a breaker open
    until when, and why), from its committed journal: ``rt.tree()`` in an administration
    process shows it too. None for a class without ``summary()``, not importable here, or
    whose ``on_start`` builds state the journal does not hold (a loop guard rebuilds its
    recent calls from the ledger): its summary would describe a state it never has."""
    try:
        cls = import_class(rec.class_path)
    except ConfigError:
        return None
    if not callable(getattr(cls, "summary", None)) or cls.on_start is not Actor.on_start:
        return None
    try:
        return str((await folded(rt, rec, cls)).summary())
    except Exception as exc:  # noqa: BLE001 - a view of one actor; the tree goes on
        return f"state unreadable: {exc}"
