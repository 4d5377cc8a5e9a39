"""The memory store's audit log: one row per attempted decision or resolution, appended with
the change it records (``Tables.append_audit_row``) or on its own for an attempt that was
refused (``append_audit``)."""

from __future__ import annotations

from tether.store.memory.tables import Tables
from tether.store.records import AuditRecord


class AuditLog(Tables):
    """The audit log part of ``MemoryStore``: its reads, and the append of a refused attempt."""

    async def append_audit(self, record: AuditRecord) -> int:
        self._check()
        return self.append_audit_row(record)

    async def list_audit(
        self,
        *,
        target: str | None = None,
        actor_id: str | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        self._check()
        if limit < 0:
            raise ValueError(f"list_audit: limit must be >= 0, not {limit}")
        out: list[AuditRecord] = []
        for a in reversed(self.audit):
            if len(out) >= limit:
                break
            if (
                (target is None or a.target == target)
                and (actor_id is None or a.actor_id == actor_id)
                and (before is None or a.seq < before)
            ):
                out.append(a)
        return out
