"""The SQLite store's audit log: one row per attempted decision or resolution.

A row is appended in the transaction that makes the change it records (``append``, called by
``update_approval``, ``resolve_effect`` and the dead-letter writes), or on its own for an
attempt that was refused (``append_audit``). ``seq`` is the log's order: AUTOINCREMENT, so a
row's seq is above every earlier one's, even after rows were deleted by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tether.store.columns import AUDIT_COLUMNS, AUDIT_FIELDS, audit_record, audit_values
from tether.store.records import AuditRecord
from tether.store.sqlite import rows
from tether.store.sqlite.conn import Database, Tx

AUDIT_TABLE = """
CREATE TABLE audit (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    at             REAL NOT NULL,
    identity       TEXT NOT NULL,
    authenticated  INTEGER NOT NULL,
    via            TEXT NOT NULL,
    action         TEXT NOT NULL,
    target         TEXT NOT NULL,
    outcome        TEXT NOT NULL,
    detail         TEXT NOT NULL,
    actor_id       TEXT,
    version_before INTEGER,
    version_after  INTEGER,
    fingerprint    TEXT,
    remote         TEXT
);
CREATE INDEX audit_by_target ON audit(target, seq);
CREATE INDEX audit_by_actor ON audit(actor_id, seq);
"""

_FIELDS = AUDIT_FIELDS
_INT_OR_NULL: rows.Kind = ((int, type(None)), "an integer or NULL")
AUDIT_TYPES = rows.columns(
    AUDIT_COLUMNS,
    rows.INT,
    rows.REAL,
    rows.TEXT,
    rows.INT,
    rows.TEXT,
    rows.TEXT,
    rows.TEXT,
    rows.TEXT,
    rows.TEXT,
    rows.TEXT_OR_NULL,
    _INT_OR_NULL,
    _INT_OR_NULL,
    rows.TEXT_OR_NULL,
    rows.TEXT_OR_NULL,
)
_INSERT = f"INSERT INTO audit ({_FIELDS}) VALUES ({', '.join('?' * 13)}) RETURNING seq"


def _row(a: AuditRecord) -> tuple[Any, ...]:
    return audit_values(a)


def _record(row: Sequence[Any]) -> AuditRecord:
    rows.check_row("audit", row[0], row, AUDIT_TYPES)
    return audit_record(row)


async def append(db: Tx, record: AuditRecord | None) -> int:
    """Append ``record`` (if any) in the transaction ``db``; its seq (0 for none)."""
    if record is None:
        return 0
    [(seq,)] = await db.execute_fetchall(_INSERT, _row(record))
    return int(seq)


class AuditLog:
    """The audit part of ``SqliteStore`` (which sets ``_db``)."""

    _db: Database

    async def append_audit(self, record: AuditRecord) -> int:
        async def write(db: Tx) -> int:
            return await append(db, record)

        return await self._db.transaction(write)

    async def list_audit(
        self,
        *,
        target: str | None = None,
        actor_id: str | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        if limit < 0:  # SQLite reads a negative LIMIT as none at all
            raise ValueError(f"list_audit: limit must be >= 0, not {limit}")
        where: list[str] = []
        params: list[Any] = []
        for column, value in (("target", target), ("actor_id", actor_id)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if before is not None:
            where.append("seq < ?")
            params.append(before)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        found = await self._db.read(
            f"SELECT {AUDIT_COLUMNS} FROM audit{clause} ORDER BY seq DESC LIMIT ?",
            [*params, limit],
        )
        return [_record(r) for r in found]
