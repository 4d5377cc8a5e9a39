"""The memory store's effects ledger (I4) and approval requests (I9): reads, and the small
writes a person's decision makes outside the group committer (``SqliteStore``'s are in
``tether.store.sqlite.ledger``)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from tether.store.admin import OnCorrupt
from tether.store.memory import writes
from tether.store.memory.tables import Tables
from tether.store.records import ApprovalRecord, AuditRecord, BatchResult, EffectRecord, NewMessage


class Ledger(Tables):
    """The ledger and approvals part of ``MemoryStore``."""

    async def effects_of(self, actor_id: str, msg_id: str) -> list[EffectRecord]:
        self._check()
        rows = [e for e in self.effects.values() if e.actor_id == actor_id and e.msg_id == msg_id]
        return sorted(rows, key=lambda e: e.idx)

    async def find_effects(
        self,
        *,
        actor_id: str | None = None,
        status: str | None = None,
        key: str | None = None,
        on_corrupt: OnCorrupt | None = None,
    ) -> list[EffectRecord]:
        self._check()
        rows = [
            e
            for e in self.effects.values()
            if (actor_id is None or e.actor_id == actor_id)
            and (status is None or e.status == status)
            and (key is None or e.key == key)
        ]
        return sorted(rows, key=lambda e: (e.created_at, e.actor_id, e.msg_id, e.idx))

    async def recent_effects(
        self,
        actor_id: str,
        limit: int,
        *,
        after: float | None = None,
        exclude_tools: Collection[str] = (),
    ) -> list[EffectRecord]:
        self._check()
        if limit < 0:
            raise ValueError(f"recent_effects: limit must be >= 0, not {limit}")
        rows = sorted(
            (
                e
                for e in self.effects.values()
                if e.actor_id == actor_id
                and (after is None or e.created_at > after)
                and e.tool not in exclude_tools
            ),
            key=lambda e: (e.created_at, e.msg_id, e.idx),
        )
        return rows[-limit:] if limit else []  # (rows[-0:] would be every row)

    async def resolve_effect(
        self, key: str, record: EffectRecord, now: float, *, audit: AuditRecord | None = None
    ) -> EffectRecord | None:
        self._check()
        found = [e for e in self.effects.values() if e.key == key and e.status == "quarantined"]
        if not found:
            return None
        old = found[0]
        writes.upsert_effect(self, record)
        writes.unpark(self, old.msg_id, now)
        self.append_audit_row(audit)
        return record

    async def unpark(self, msg_id: str, now: float) -> bool:
        self._check()
        return writes.unpark(self, msg_id, now)

    async def find_approvals(
        self,
        *,
        status: str | None = None,
        actor_id: str | None = None,
        request_id: str | None = None,
        on_corrupt: OnCorrupt | None = None,
    ) -> list[ApprovalRecord]:
        # Records are kept decoded here: nothing can be corrupt, so on_corrupt is never called.
        self._check()
        rows = [
            a
            for a in self.approvals.values()
            if (status is None or a.status == status)
            and (actor_id is None or a.actor_id == actor_id)
            and (request_id is None or a.request_id == request_id)
        ]
        return sorted(rows, key=lambda a: (a.created_at, a.request_id))

    async def update_approval(
        self,
        record: ApprovalRecord,
        expected_version: int,
        *,
        audit: AuditRecord | None = None,
        notices: Sequence[NewMessage] = (),
    ) -> bool:
        self._check()
        old = self.approvals.get(record.request_id)
        if old is None or old.version != expected_version:
            return False
        self.approvals[record.request_id] = record
        if record.status != "pending":
            writes.unpark(self, record.msg_id, record.decided_at or 0.0)
        result = BatchResult()
        for m in notices:
            writes.insert(self, m, result)
        self.append_audit_row(audit)
        return True

    async def purge_receipts(self, before: float) -> int:
        self._check()
        old = [
            slot
            for slot, e in self.effects.items()
            if e.status in ("done", "failed", "aborted")
            and e.updated_at < before
            and e.msg_id not in self.mailbox
        ]
        for slot in old:
            del self.effects[slot]
        return len(old)
