"""``StoreAdmin``: what an administration process reads from a store.

The CLI, the web console and an integrity checker look into a store that runtimes
serve, without serving it: listings and reads across every actor — the registry, journals,
mailboxes, the effects ledger, approvals, dead letters, the audit log, registered runtimes —
and the store's own clock, to tell a live lease from an expired one. Every ``Store`` is a ``StoreAdmin``
(``Store`` extends it); a tool that only looks should ask for no more than this.

Damaged rows. A row a store cannot decode, or whose value is of the wrong type (written by
hand, or by a disk fault), raises ``CorruptRecordError`` naming its table, key, column and
value. The listings that take ``on_corrupt`` leave such a row out instead and report it as
``on_corrupt(key, error)``, so that one damaged row never hides the others. A store that
keeps decoded records (``MemoryStore``) has none, and never calls it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from tether.errors import CorruptRecordError
from tether.store.records import (
    ActorRecord,
    ApprovalRecord,
    AuditRecord,
    DeadLetter,
    EffectRecord,
    JournalRow,
    RuntimeRecord,
    Snapshot,
    StoredMessage,
)

#: ``on_corrupt(key, error)``: told of each damaged row a listing left out.
OnCorrupt = Callable[[str, CorruptRecordError], None]


class StoreAdmin(Protocol):
    """Reads across every actor of a store, for tools that administer it."""

    async def store_time(self) -> float:
        """Now, on the clock the store judges leases by (seconds since the epoch): compare
        ``ActorRecord.lease_expires`` with this, never with the reader's own clock."""
        ...

    async def get_actor(self, actor_id: str) -> ActorRecord | None:
        """The actor's record, or None; ``CorruptRecordError`` naming the column if its row
        is damaged."""
        ...

    async def list_actors(
        self, *, parent_id: str | None = None, on_corrupt: OnCorrupt | None = None
    ) -> list[ActorRecord]:
        """Actors (of ``parent_id`` if given), ordered by ``(created_at, actor_id)``."""
        ...

    async def load_snapshot(self, actor_id: str) -> Snapshot | None:
        """The actor's latest snapshot, or None."""
        ...

    async def load_journal(self, actor_id: str, after_seq: int, limit: int) -> list[JournalRow]:
        """Up to ``limit`` journal rows of the actor with ``seq > after_seq``, by seq."""
        ...

    async def list_messages(
        self, actor_id: str, limit: int, *, on_corrupt: OnCorrupt | None = None
    ) -> list[StoredMessage]:
        """Up to ``limit`` messages of the actor, due or not (delayed and parked ones too), in
        mailbox order: what ``Store.pending`` would deliver once each came due."""
        ...

    async def dead_letters(
        self, actor_id: str | None = None, *, on_corrupt: OnCorrupt | None = None
    ) -> list[DeadLetter]:
        """Dead letters (of ``actor_id`` if given), oldest first."""
        ...

    async def dead_letter(self, msg_id: str) -> DeadLetter | None:
        """One dead letter, or None."""
        ...

    async def find_effects(
        self,
        *,
        actor_id: str | None = None,
        status: str | None = None,
        key: str | None = None,
        on_corrupt: OnCorrupt | None = None,
    ) -> list[EffectRecord]:
        """Ledger rows matching every filter given, ordered by
        ``(created_at, actor_id, msg_id, idx)``."""
        ...

    async def find_approvals(
        self,
        *,
        status: str | None = None,
        actor_id: str | None = None,
        request_id: str | None = None,
        on_corrupt: OnCorrupt | None = None,
    ) -> list[ApprovalRecord]:
        """Approval requests matching every filter given, ordered by
        ``(created_at, request_id)``."""
        ...

    async def list_audit(
        self,
        *,
        target: str | None = None,
        actor_id: str | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        """Rows of the audit log matching every filter given, newest first: at most ``limit``
        (>= 0, else ``ValueError``) with ``seq < before`` if ``before`` is given (the next
        page starts before the last row of this one)."""
        ...

    async def list_runtimes(self, *, on_corrupt: OnCorrupt | None = None) -> list[RuntimeRecord]:
        """Every registered runtime, live or not yet known dead, ordered by ``runtime_id``."""
        ...
