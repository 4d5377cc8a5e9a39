"""The memory store's tables: plain dicts, one per SQLite table, and the row kinds they hold."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import msgspec

from tether.errors import StoreError
from tether.store.records import (
    ActorRecord,
    ApprovalRecord,
    AuditRecord,
    DeadLetter,
    EffectRecord,
    JournalRow,
    NewMessage,
    Reply,
    RuntimeRecord,
    Snapshot,
)


class Row(msgspec.Struct):
    """A mailbox row."""

    seq: int
    msg: NewMessage
    attempts: int = 0
    # replaced, never appended to: a row starts with no list of its own (one per message)
    errors: Sequence[str] = ()
    parks: int = 0


class ReplyRow(msgspec.Struct):
    reply: Reply
    created_at: float


def due(m: NewMessage, now: float) -> bool:
    """A message sent without a delay is due at once, whatever the reader's clock says."""
    return m.deliver_at <= now or m.deliver_at == m.created_at


class Tables:
    """Every table of a memory store. ``clock``: the lease clock."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self.clock = clock if clock is not None else time.time
        self._open = False
        self.actors: dict[str, ActorRecord] = {}
        self.mailbox: dict[str, Row] = {}  # msg_id -> row; dict order is insertion (= seq) order
        self.dedup: dict[tuple[str, str], tuple[str, float]] = {}
        self.journal: dict[str, list[JournalRow]] = {}
        self.snapshots: dict[str, Snapshot] = {}
        self.replies: dict[str, ReplyRow] = {}
        self.dead: dict[str, DeadLetter] = {}
        self.runtimes: dict[str, RuntimeRecord] = {}
        self.watches: dict[str, set[str]] = {}
        self.effects: dict[tuple[str, str, int], EffectRecord] = {}
        self.approvals: dict[str, ApprovalRecord] = {}
        self.audit: list[AuditRecord] = []  # in seq order
        self._seq = 0

    def _check(self) -> None:
        if not self._open:
            raise StoreError("memory store is not open")

    def append_audit_row(self, record: AuditRecord | None) -> int:
        """Append ``record`` (if any) to the audit log with the next seq; that seq (0: none)."""
        if record is None:
            return 0
        seq = self.audit[-1].seq + 1 if self.audit else 1
        self.audit.append(msgspec.structs.replace(record, seq=seq))
        return seq

    def next_seq(self) -> int:
        """The next mailbox seq: above every one ever assigned (the scan's cursor is a seq)."""
        self._seq += 1
        return self._seq
