"""``SqliteStore.reuse_id``: a stopped actor's id given to a new actor, in one transaction
(the contract is ``Store.reuse_id``'s)."""

from __future__ import annotations

from collections.abc import Sequence

from tether.store.records import ActorRecord
from tether.store.reuse import PREDECESSOR_ROWS, UNSETTLED, left_in_mailbox, reuse_blockers
from tether.store.sqlite import writes
from tether.store.sqlite.conn import Tx

_UNSETTLED_SQL = ", ".join(f"'{s}'" for s in UNSETTLED)


async def reuse_id(db: Tx, record: ActorRecord, dependents: Sequence[str]) -> list[str]:
    """What stands in the way of giving ``record.actor_id`` to ``record``, or ``[]`` once done."""
    actor_id = record.actor_id
    rows = await db.execute_fetchall("SELECT status FROM actors WHERE actor_id = ?", (actor_id,))
    status = rows[0][0] if rows else None
    unsettled = (
        []
        if status in (None, "active")
        else await db.execute_fetchall(
            f"SELECT key, tool, status FROM effects WHERE actor_id = ? AND status IN "
            f"({_UNSETTLED_SQL}) ORDER BY created_at, msg_id, idx",
            (actor_id,),
        )
    )
    blockers = reuse_blockers(actor_id, status, unsettled)
    if blockers:
        return blockers
    for table, column in PREDECESSOR_ROWS:
        await db.executemany(
            f"DELETE FROM {table} WHERE {column} = ?", [(a,) for a in (actor_id, *dependents)]
        )
    await db.executemany(
        "UPDATE actors SET fence = fence + 1, lease_owner = NULL, lease_expires = 0, "
        "head_seq = 0 WHERE actor_id = ?",
        [(a,) for a in dependents],
    )
    left = await db.execute_fetchall("SELECT msg_id FROM mailbox WHERE actor_id = ?", (actor_id,))
    if left:
        why = left_in_mailbox(actor_id)
        await writes.dead_letter(db, [(m, why, record.created_at) for (m,) in left])
    await db.execute(
        "UPDATE actors SET class_path = ?, init = ?, parent_id = ?, status = 'active', "
        "stop_reason = NULL, lease_owner = NULL, lease_expires = 0, created_at = ?, head_seq = 0 "
        "WHERE actor_id = ?",
        (record.class_path, record.init, record.parent_id, record.created_at, actor_id),
    )
    return []
