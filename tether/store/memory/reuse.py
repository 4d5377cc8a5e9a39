"""``MemoryStore.reuse_id``: a stopped actor's id given to a new actor (the contract is
``Store.reuse_id``'s; ``SqliteStore``'s is ``tether.store.sqlite.reuse``)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from tether.store.memory import writes
from tether.store.memory.tables import Tables
from tether.store.records import ActorRecord
from tether.store.reuse import UNSETTLED, left_in_mailbox, reuse_blockers


def reuse_id(t: Tables, record: ActorRecord, dependents: Sequence[str]) -> list[str]:
    """What stands in the way of giving ``record.actor_id`` to ``record``, or ``[]`` once done.
    Nothing here waits, so nothing else runs between the check and the changes."""
    actor_id = record.actor_id
    old = t.actors.get(actor_id)
    mine = sorted(
        (e for e in t.effects.values() if e.actor_id == actor_id),
        key=lambda e: (e.created_at, e.msg_id, e.idx),
    )
    unsettled = [(e.key, e.tool, e.status) for e in mine if e.status in UNSETTLED]
    blockers = reuse_blockers(actor_id, None if old is None else old.status, unsettled)
    if blockers or old is None:
        return blockers
    gone = {actor_id, *dependents}
    # What PREDECESSOR_ROWS names, table by table.
    for a in gone:
        t.journal.pop(a, None)
        t.snapshots.pop(a, None)
    for slot in [s for s, e in t.effects.items() if e.actor_id in gone]:
        del t.effects[slot]
    for rid in [r for r, a in t.approvals.items() if a.actor_id in gone]:
        del t.approvals[rid]
    for k in [k for k in t.dedup if k[0] in gone]:
        del t.dedup[k]
    for watchers in t.watches.values():
        watchers.difference_update(gone)
    for a in dependents:
        dep = t.actors.get(a)
        if dep is not None:
            t.actors[a] = msgspec.structs.replace(
                dep, fence=dep.fence + 1, lease_owner=None, lease_expires=0.0
            )
    why = left_in_mailbox(actor_id)
    for msg_id in [m for m, r in t.mailbox.items() if r.msg.actor_id == actor_id]:
        writes.dead_letter(t, msg_id, why, record.created_at)
    t.actors[actor_id] = msgspec.structs.replace(
        record,
        status="active",
        stop_reason=None,
        fence=old.fence,
        lease_owner=None,
        lease_expires=0.0,
    )
    return []
