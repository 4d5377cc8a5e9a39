"""Giving a stopped actor's id to a new one (``Store.reuse_id``): what stands in the way, and
what the predecessor leaves behind, in the terms every backend uses."""

from __future__ import annotations

from collections.abc import Sequence

#: What ``reuse_id`` erases of a predecessor, as (table, column holding its id): every row a new
#: actor under the same id would otherwise read as its own. Its stored replies stay (found only
#: by the predecessor's message ids, and purged with age), and so do its dead letters (I7).
PREDECESSOR_ROWS = (
    ("journal", "actor_id"),
    ("snapshots", "actor_id"),
    ("effects", "actor_id"),
    ("approvals", "actor_id"),
    ("dedup", "actor_id"),
    ("watches", "watcher"),
)

#: Ledger statuses with no recorded outcome: a call that may have happened.
UNSETTLED = ("pending", "retry", "quarantined")


def left_in_mailbox(actor_id: str) -> str:
    """The dead-letter reason of a message still in a predecessor's mailbox."""
    return f"sent to {actor_id!r} after it stopped; its id went to a new actor"


def reuse_blockers(
    actor_id: str, status: str | None, unsettled: Sequence[Sequence[str]]
) -> list[str]:
    """Why ``Store.reuse_id`` cannot give ``actor_id`` to a new actor, in the words every store
    uses: from the actor's ``status`` (None: no such actor) and its ledger rows without a
    recorded outcome, as ``(key, tool, status)``."""
    if status is None:
        return [f"there is no actor {actor_id!r} to replace"]
    if status == "active":
        return [f"{actor_id!r} is active"]
    blockers = []
    for key, tool, effect_status in unsettled:
        if effect_status == "quarantined":
            blockers.append(
                f"its effect {key} ({tool}) is quarantined, waiting for a person: resolve it "
                f"first (rt.quarantine, or `tether quarantine resolve {key}`)"
            )
        else:
            blockers.append(
                f"its effect {key} ({tool}) has an intent and no receipt ({effect_status}): the "
                f"call may have happened, and with {actor_id!r} stopped nothing can settle it "
                "any more; a new actor under this id would take that question over, so the id "
                "cannot be used again: choose another"
            )
    return blockers
