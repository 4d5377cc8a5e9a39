"""The PostgreSQL store's writes outside the group committer: a person's decisions (dead
letters retried or discarded, quarantined effects resolved, approvals decided, ids reused),
the audit log and retention. Each is one write transaction of the writer (``writer.py``),
applied exactly once, like a batch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from tether.store.postgres import rows, writes
from tether.store.postgres.writer import Cursor
from tether.store.records import (
    ActorRecord,
    ApprovalRecord,
    AuditRecord,
    BatchResult,
    DeadLetter,
    EffectRecord,
    NewMessage,
)
from tether.store.reuse import PREDECESSOR_ROWS, UNSETTLED, left_in_mailbox, reuse_blockers

T = TypeVar("T")


class AdminWrites:
    """The writes of ``PostgresStore`` outside its batches; it provides ``_commit``, ``_write``
    and ``dead_letter``."""

    if TYPE_CHECKING:

        async def _commit(self, fn: Callable[[Cursor], T], result_type: type[T]) -> T: ...

        async def _write(self, sql_params: list[tuple[str, Sequence[Any]]]) -> list[int]: ...

        async def dead_letter(self, msg_id: str) -> DeadLetter | None: ...

    # -- dead letters and retention -----------------------------------------------------------

    async def reuse_id(self, record: ActorRecord, *, dependents: Sequence[str] = ()) -> list[str]:
        return await self._commit(lambda cur: _reuse_id(cur, record, list(dependents)), list[str])

    async def retry_dead_letter(
        self, msg_id: str, now: float, *, audit: AuditRecord | None = None
    ) -> DeadLetter | None:
        letter = await self.dead_letter(msg_id)
        if letter is None:
            return None

        def move(cur: Cursor) -> bool:
            # parks = 1: its past in the ledger is read again; a new seq and transaction id:
            # ready again for every runtime's scan.
            cur.execute(
                "INSERT INTO mailbox (msg_id, actor_id, type, payload, deliver_at, attempts, "
                "errors, wants_reply, created_at, parks) SELECT msg_id, actor_id, type, "
                "payload, %s, 0, NULL, FALSE, %s, 1 FROM dead_letters WHERE msg_id = %s",
                (now, now, msg_id),
            )
            if cur.rowcount != 1:
                return False
            cur.execute("DELETE FROM dead_letters WHERE msg_id = %s", (msg_id,))
            cur.execute("DELETE FROM replies WHERE msg_id = %s", (msg_id,))
            _append_audit(cur, audit)
            return True

        return letter if await self._commit(move, bool) else None

    async def discard_dead_letter(self, msg_id: str, *, audit: AuditRecord | None = None) -> bool:
        def delete(cur: Cursor) -> bool:
            cur.execute("DELETE FROM dead_letters WHERE msg_id = %s", (msg_id,))
            if cur.rowcount != 1:
                return False
            _append_audit(cur, audit)
            return True

        return await self._commit(delete, bool)

    async def purge(self, before: float) -> int:
        counts = await self._write(
            [
                ("DELETE FROM dedup WHERE created_at < %s", (before,)),
                ("DELETE FROM replies WHERE created_at < %s", (before,)),
            ]
        )
        return sum(counts)

    # -- the effects ledger (I4), approvals (I9) and the audit log ------------------------------

    async def resolve_effect(
        self, key: str, record: EffectRecord, now: float, *, audit: AuditRecord | None = None
    ) -> EffectRecord | None:
        def resolve(cur: Cursor) -> bool:
            cur.execute(
                "SELECT msg_id FROM effects WHERE key = %s AND status = 'quarantined' FOR UPDATE",
                (key,),
            )
            found = cur.fetchall()
            if not found:
                return False
            cur.execute(writes.UPSERT_EFFECT, rows.effect_row(record))
            writes.unpark(cur, found[0][0], now)
            _append_audit(cur, audit)
            return True

        return record if await self._commit(resolve, bool) else None

    async def unpark(self, msg_id: str, now: float) -> bool:
        return await self._commit(lambda cur: writes.unpark(cur, msg_id, now), bool)

    async def update_approval(
        self,
        record: ApprovalRecord,
        expected_version: int,
        *,
        audit: AuditRecord | None = None,
        notices: Sequence[NewMessage] = (),
    ) -> bool:
        def swap(cur: Cursor) -> bool:
            cur.execute(
                "UPDATE approvals SET status = %s, version = %s, record = %s "
                "WHERE request_id = %s AND version = %s",
                (
                    record.status,
                    record.version,
                    msgspec.msgpack.encode(record),
                    record.request_id,
                    expected_version,
                ),
            )
            if cur.rowcount != 1:
                return False
            if record.status != "pending":
                writes.unpark(cur, record.msg_id, record.decided_at or 0.0)
            if notices:
                writes.insert_messages(cur, list(notices), BatchResult())
            _append_audit(cur, audit)
            return True

        return await self._commit(swap, bool)

    async def append_audit(self, record: AuditRecord) -> int:
        return await self._commit(lambda cur: _append_audit(cur, record), int)

    async def purge_receipts(self, before: float) -> int:
        [count] = await self._write(
            [
                (
                    "DELETE FROM effects WHERE status IN ('done', 'failed', 'aborted') "
                    "AND updated_at < %s AND NOT EXISTS "
                    "(SELECT 1 FROM mailbox WHERE mailbox.msg_id = effects.msg_id)",
                    (before,),
                )
            ]
        )
        return count


def _append_audit(cur: Cursor, record: AuditRecord | None) -> int:
    """Append ``record`` (if any) in the transaction of ``cur``; its seq (0 for none)."""
    if record is None:
        return 0
    cur.execute(
        f"INSERT INTO audit ({rows.AUDIT_FIELDS}) VALUES ({', '.join(['%s'] * 13)}) RETURNING seq",
        rows.audit_row(record),
    )
    row = cur.fetchone()
    return int(row[0]) if row is not None else 0


def _reuse_id(cur: Cursor, record: ActorRecord, dependents: list[str]) -> list[str]:
    """``Store.reuse_id`` in the transaction of ``cur``: what stands in the way, or ``[]``."""
    actor_id = record.actor_id
    cur.execute("SELECT status FROM actors WHERE actor_id = %s FOR UPDATE", (actor_id,))
    found = cur.fetchall()
    status = found[0][0] if found else None
    unsettled: list[Any] = []
    if status not in (None, "active"):
        cur.execute(
            "SELECT key, tool, status FROM effects WHERE actor_id = %s AND status = ANY(%s) "
            "ORDER BY created_at, msg_id, idx",
            (actor_id, list(UNSETTLED)),
        )
        unsettled = cur.fetchall()
    blockers = reuse_blockers(actor_id, status, unsettled)
    if blockers:
        return blockers
    ids = [actor_id, *dependents]
    for table, column in PREDECESSOR_ROWS:
        cur.execute(f"DELETE FROM {table} WHERE {column} = ANY(%s)", (ids,))
    if dependents:
        cur.execute(
            "UPDATE actors SET fence = fence + 1, lease_owner = NULL, lease_expires = 0, "
            "head_seq = 0 WHERE actor_id = ANY(%s)",
            (dependents,),
        )
    cur.execute("SELECT msg_id FROM mailbox WHERE actor_id = %s ORDER BY seq", (actor_id,))
    left = cur.fetchall()
    if left:
        why = left_in_mailbox(actor_id)
        writes.dead_letter(cur, [(m, why, record.created_at) for (m,) in left])
    cur.execute(
        "UPDATE actors SET class_path = %s, init = %s, parent_id = %s, status = 'active', "
        "stop_reason = NULL, lease_owner = NULL, lease_expires = 0, created_at = %s, "
        "head_seq = 0 WHERE actor_id = %s",
        (record.class_path, record.init, record.parent_id, record.created_at, actor_id),
    )
    return []
