"""``rt.tree()``: the live supervision tree, for people and for tests."""

from __future__ import annotations

import msgspec

from tether.actors.status import ActorStatus


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
