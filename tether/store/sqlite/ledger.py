"""The SQLite store's effects ledger (I4) and approval requests (I9): reads, and the small
writes a person's decision makes outside the group committer."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from tether.errors import CorruptRecordError
from tether.store.admin import OnCorrupt
from tether.store.records import ApprovalRecord, AuditRecord, BatchResult, EffectRecord, NewMessage
from tether.store.sqlite import audit as audit_log
from tether.store.sqlite import rows, writes
from tether.store.sqlite.conn import Database, Tx


class Ledger:
    """The ledger and approvals part of ``SqliteStore`` (which sets ``_db``)."""

    _db: Database

    async def _read(self, sql: str, params: Any = (), *, of: str = "") -> list[Any]:
        return await self._db.read(sql, params, of=of)

    async def effects_of(self, actor_id: str, msg_id: str) -> list[EffectRecord]:
        found = await self._read(
            f"SELECT {rows.EFFECT_COLUMNS} FROM effects WHERE actor_id = ? AND msg_id = ? ORDER BY idx",
            (actor_id, msg_id),
            of=f"the ledger of {actor_id!r}",
        )
        return [rows.effect(r) for r in found]

    async def find_effects(
        self,
        *,
        actor_id: str | None = None,
        status: str | None = None,
        key: str | None = None,
        on_corrupt: OnCorrupt | None = None,
    ) -> list[EffectRecord]:
        where, params = _where(actor_id=actor_id, status=status, key=key)
        found = await self._read(
            f"SELECT {rows.EFFECT_COLUMNS} FROM effects{where} "
            "ORDER BY created_at, actor_id, msg_id, idx",
            params,
        )
        if on_corrupt is None:
            return [rows.effect(r) for r in found]
        checked = rows.checked("effects", found, rows.EFFECT_TYPES, on_corrupt, rows.effect_key)
        return [rows.effect(r) for r in checked]

    async def recent_effects(
        self,
        actor_id: str,
        limit: int,
        *,
        after: float | None = None,
        exclude_tools: Collection[str] = (),
    ) -> list[EffectRecord]:
        if limit < 0:  # SQLite reads a negative LIMIT as none at all
            raise ValueError(f"recent_effects: limit must be >= 0, not {limit}")
        where: list[str] = ["actor_id = ?"]
        params: list[Any] = [actor_id]
        if after is not None:
            where.append("created_at > ?")
            params.append(after)
        excluded = sorted(set(exclude_tools))
        if excluded:  # before the LIMIT: an excluded row must not take a kept row's place
            where.append(f"tool NOT IN ({', '.join('?' * len(excluded))})")
            params.extend(excluded)
        # Newest first to apply the LIMIT, then reversed to oldest first. ``effects_by_actor``
        # holds (actor_id, created_at) and then the primary key (msg_id, idx): the ORDER BY
        # is its order, so SQLite walks it backwards and stops after ``limit`` kept rows.
        found = await self._read(
            f"SELECT {rows.EFFECT_COLUMNS} FROM effects WHERE {' AND '.join(where)}"
            " ORDER BY created_at DESC, msg_id DESC, idx DESC LIMIT ?",
            [*params, limit],
        )
        return [rows.effect(r) for r in reversed(found)]

    async def resolve_effect(
        self, key: str, record: EffectRecord, now: float, *, audit: AuditRecord | None = None
    ) -> EffectRecord | None:
        async def resolve(db: Tx) -> EffectRecord | None:
            found = await db.execute_fetchall(
                "SELECT msg_id FROM effects WHERE key = ? AND status = 'quarantined'", (key,)
            )
            if not found:
                return None
            await db.execute(writes.UPSERT_EFFECT, rows.effect_row(record))
            await writes.unpark(db, found[0][0], now)
            await audit_log.append(db, audit)
            return record

        return await self._db.transaction(resolve)

    async def unpark(self, msg_id: str, now: float) -> bool:
        async def move(db: Tx) -> bool:
            return await writes.unpark(db, msg_id, now)

        return await self._db.transaction(move)

    async def find_approvals(
        self,
        *,
        status: str | None = None,
        actor_id: str | None = None,
        request_id: str | None = None,
        on_corrupt: OnCorrupt | None = None,
    ) -> list[ApprovalRecord]:
        where, params = _where(status=status, actor_id=actor_id, request_id=request_id)
        found = await self._read(
            f"SELECT request_id, record FROM approvals{where} ORDER BY created_at, request_id",
            params,
        )
        if on_corrupt is None:
            return [rows.approval(rid, blob) for rid, blob in found]
        records = []
        for rid, blob in found:
            try:
                records.append(rows.approval(rid, blob))
            except CorruptRecordError as exc:
                on_corrupt(rid, exc)
        return records

    async def update_approval(
        self,
        record: ApprovalRecord,
        expected_version: int,
        *,
        audit: AuditRecord | None = None,
        notices: Sequence[NewMessage] = (),
    ) -> bool:
        async def swap(db: Tx) -> bool:
            cur = await db.execute(
                "UPDATE approvals SET status = ?, version = ?, record = ? "
                "WHERE request_id = ? AND version = ?",
                (
                    record.status,
                    record.version,
                    rows.encode(record),
                    record.request_id,
                    expected_version,
                ),
            )
            swapped = cur.rowcount == 1
            if not swapped:
                return False
            if record.status != "pending":
                await writes.unpark(db, record.msg_id, record.decided_at or 0.0)
            if notices:
                await writes.insert_messages(db, list(notices), BatchResult())
            await audit_log.append(db, audit)
            return True

        return await self._db.transaction(swap)

    async def purge_receipts(self, before: float) -> int:
        async def purge(db: Tx) -> int:
            cur = await db.execute(
                "DELETE FROM effects WHERE status IN ('done', 'failed', 'aborted') "
                "AND updated_at < ? AND NOT EXISTS "
                "(SELECT 1 FROM mailbox WHERE mailbox.msg_id = effects.msg_id)",
                (before,),
            )
            return cur.rowcount

        return await self._db.transaction(purge)


def _where(**filters: str | None) -> tuple[str, list[str]]:
    """`` WHERE column = ? AND …`` for each filter given (None: not filtered), and its params."""
    given = {column: value for column, value in filters.items() if value is not None}
    if not given:
        return "", []
    return " WHERE " + " AND ".join(f"{c} = ?" for c in given), list(given.values())
