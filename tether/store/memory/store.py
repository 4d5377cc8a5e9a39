"""``MemoryStore``: the same semantics as ``SqliteStore``, in dicts, for fast tests.

It is what ``Runtime(":memory:")`` uses. It shares nothing between processes and survives
nothing, so it is for tests of actor logic, never for durability. Its writes never wait: it
offers them to the committer as its ``immediate`` path (``tether.store.protocol``).

Its parts, as ``SqliteStore``'s: the tables (``tables.py``), the writes of a batch
(``writes.py``), the effects ledger and approvals (``ledger.py``), the audit log
(``audit.py``), an id given to a new actor (``reuse.py``); here, the reads, the runtimes and
their leases, the dead letters and retention.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from tether.store.admin import OnCorrupt
from tether.store.memory import reuse, writes
from tether.store.memory.audit import AuditLog
from tether.store.memory.ledger import Ledger
from tether.store.memory.tables import Row, due
from tether.store.protocol import ImmediateWrites
from tether.store.reads import BatchedReads, Read, read_one_by_one
from tether.store.records import (
    ActorRecord,
    AuditRecord,
    Batch,
    BatchResult,
    DeadLetter,
    JournalRow,
    MessageCursor,
    MessagePage,
    NewMessage,
    Reply,
    RuntimeRecord,
    ScannedMessage,
    Snapshot,
    StoredMessage,
)
from tether.store.sequence import cursor_at, seq_after


class MemoryStore(Ledger, AuditLog):
    """A store in process memory. See the module docstring.

    Args:
        clock: the lease clock (seconds since the epoch); default: the system's.
    """

    def __init__(self, *, clock: Callable[[], float] | None = None) -> None:
        super().__init__(clock)

    changes: None = None  # in one process: its runtime sees every write itself

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def immediate(self) -> ImmediateWrites | None:
        # Withdrawn while one of its appliers is replaced on the instance (a test wrapping one
        # to inject failures): the wrapper must then see every write, through ``apply``.
        # Three plain lookups, no generator: the committer reads this on every write.
        own = self.__dict__
        if "apply" in own or "apply_sync" in own or "apply_one" in own:
            return None
        return self

    async def open(self) -> None:
        self._open = True

    async def close(self) -> None:
        self._open = False

    async def migrate(self, *, force: bool = False) -> tuple[int, int]:
        return (0, 0)  # no schema: nothing to upgrade

    async def apply(self, batch: Batch) -> BatchResult:
        return self.apply_sync(batch)

    apply_sync = writes.apply_sync
    apply_one = writes.apply_one

    # -- reads --------------------------------------------------------------------------------

    async def store_time(self) -> float:
        self._check()
        return self.clock()

    @property
    def batched_reads(self) -> BatchedReads:
        return self

    async def read_many(self, reads: Sequence[Read]) -> list[object]:
        # Its reads never wait: one by one is one call already. (The runtime gathers reads
        # only for a store whose writes wait, so this serves a store wrapped by a test.)
        return await read_one_by_one(self, reads)

    async def get_actor(self, actor_id: str) -> ActorRecord | None:
        self._check()
        rec = self.actors.get(actor_id)
        return None if rec is None else self._with_head(rec)

    def _with_head(self, rec: ActorRecord) -> ActorRecord:
        """``rec`` with its ``head_seq``: the journal held here is never damaged, so the head is
        read off its last row when asked for, not written with every step."""
        rows = self.journal.get(rec.actor_id)
        head = rows[-1].seq if rows else 0
        return rec if rec.head_seq == head else msgspec.structs.replace(rec, head_seq=head)

    async def list_actors(
        self,
        *,
        parent_id: str | None = None,
        on_corrupt: OnCorrupt | None = None,
    ) -> list[ActorRecord]:
        self._check()  # records held decoded: never damaged, on_corrupt is never called
        recs = [
            self._with_head(r)
            for r in self.actors.values()
            if parent_id is None or r.parent_id == parent_id
        ]
        return sorted(recs, key=lambda r: (r.created_at, r.actor_id))

    async def load_snapshot(self, actor_id: str) -> Snapshot | None:
        self._check()
        return self.snapshots.get(actor_id)

    async def load_journal(self, actor_id: str, after_seq: int, limit: int) -> list[JournalRow]:
        self._check()
        rows = self.journal.get(actor_id, [])
        return [r for r in rows if r.seq > after_seq][:limit]

    def _stored(self, row: Row) -> StoredMessage:
        m = row.msg
        return StoredMessage(
            msg_id=m.msg_id,
            actor_id=m.actor_id,
            type=m.type,
            payload=m.payload,
            deliver_at=m.deliver_at,
            attempts=row.attempts,
            errors=list(row.errors),
            wants_reply=m.wants_reply,
            seq=row.seq,
            parks=row.parks,
            traceparent=m.traceparent,
        )

    async def pending(
        self,
        actor_id: str,
        now: float,
        limit: int,
        *,
        on_corrupt: OnCorrupt | None = None,
    ) -> list[StoredMessage]:
        self._check()
        rows = [r for r in self.mailbox.values() if r.msg.actor_id == actor_id and due(r.msg, now)]
        return [self._stored(r) for r in rows[:limit]]

    async def list_messages(
        self, actor_id: str, limit: int, *, on_corrupt: OnCorrupt | None = None
    ) -> list[StoredMessage]:
        self._check()
        rows = [r for r in self.mailbox.values() if r.msg.actor_id == actor_id]
        return [self._stored(r) for r in rows[:limit]]

    async def scan_messages(
        self,
        cursor: MessageCursor | None,
        now: float,
        limit: int,
        *,
        skip_prefix: str | None = None,
        runtime_id: str | None = None,
    ) -> MessagePage:
        # The cursor is the last mailbox seq returned: one writer (this event loop) makes seq
        # order commit order. A message made ready again is re-inserted with a new seq.
        self._check()
        after = seq_after(cursor, "a memory store")
        held = self._held_elsewhere(runtime_id)
        rows: list[Row] = []
        for r in self.mailbox.values():  # dict order is seq order (Tables.mailbox)
            if (
                r.seq > after
                and due(r.msg, now)
                and not (skip_prefix and r.parks == 0 and r.msg.msg_id.startswith(skip_prefix))
                and not held(r.msg.actor_id)
            ):
                rows.append(r)
                if len(rows) >= limit:
                    break
        return MessagePage(
            messages=[ScannedMessage(r.msg.actor_id, r.msg.msg_id, r.parks > 0) for r in rows],
            cursor=cursor_at(rows[-1].seq if rows else after),
            more=len(rows) >= limit,
        )

    async def orphaned(self, now: float, limit: int) -> list[str]:
        self._check()
        lease_now = self.clock()  # leases run on the store's clock
        out: dict[str, None] = {}
        for r in self.mailbox.values():
            rec = self.actors.get(r.msg.actor_id)
            if rec is None or not due(r.msg, now):
                continue
            if (
                rec.lease_owner is None
                or rec.lease_expires < lease_now
                or rec.lease_owner not in self.runtimes
            ):
                out[rec.actor_id] = None
        return list(out)[:limit]

    async def due_between(
        self, after: float, upto: float, *, runtime_id: str | None = None
    ) -> list[str]:
        self._check()
        held = self._held_elsewhere(runtime_id)
        ids = (
            r.msg.actor_id
            for r in self.mailbox.values()
            if after < r.msg.deliver_at <= upto and r.msg.deliver_at > r.msg.created_at
        )
        return [a for a in dict.fromkeys(ids) if not held(a)]

    def _held_elsewhere(self, runtime_id: str | None) -> Callable[[str], bool]:
        """Whether an actor's lease is held by a registered runtime other than ``runtime_id``,
        unexpired on the store's clock: the complement of ``orphaned``'s test, less the
        scanning runtime's own leases (always False without ``runtime_id``)."""
        if runtime_id is None:
            return lambda actor_id: False
        lease_now = self.clock()

        def held(actor_id: str) -> bool:
            rec = self.actors.get(actor_id)
            return (
                rec is not None
                and rec.lease_owner is not None
                and rec.lease_owner != runtime_id
                and rec.lease_expires >= lease_now
                and rec.lease_owner in self.runtimes
            )

        return held

    async def get_replies(self, msg_ids: list[str]) -> list[Reply]:
        self._check()
        return [self.replies[m].reply for m in msg_ids if m in self.replies]

    async def find_dedup(self, actor_id: str, dedup_key: str) -> str | None:
        self._check()
        hit = self.dedup.get((actor_id, dedup_key))
        return hit[0] if hit else None

    async def watchers(self, actor_id: str) -> list[str]:
        self._check()
        return sorted(self.watches.get(actor_id, set()))

    # -- runtimes and their leases -------------------------------------------------------------

    async def renew_leases(self, owner: str, ttl: float) -> None:
        self._check()
        expires = self.clock() + ttl
        for k, rec in self.actors.items():
            if rec.lease_owner == owner:
                self.actors[k] = msgspec.structs.replace(rec, lease_expires=expires)

    async def register_runtime(self, runtime_id: str, host: str, pid: int, started: float) -> None:
        self._check()
        self.runtimes[runtime_id] = RuntimeRecord(runtime_id, host, pid, started)

    async def list_runtimes(self, *, on_corrupt: OnCorrupt | None = None) -> list[RuntimeRecord]:
        self._check()
        return sorted(self.runtimes.values(), key=lambda r: r.runtime_id)

    async def remove_runtime(self, runtime_id: str) -> None:
        self._check()
        self.runtimes.pop(runtime_id, None)
        for k, rec in self.actors.items():
            if rec.lease_owner == runtime_id:
                self.actors[k] = msgspec.structs.replace(rec, lease_owner=None, lease_expires=0.0)

    # -- dead letters and retention -----------------------------------------------------------

    async def reuse_id(self, record: ActorRecord, *, dependents: Sequence[str] = ()) -> list[str]:
        self._check()
        return reuse.reuse_id(self, record, dependents)

    async def dead_letters(
        self,
        actor_id: str | None = None,
        *,
        on_corrupt: OnCorrupt | None = None,
    ) -> list[DeadLetter]:
        self._check()
        out = [d for d in self.dead.values() if actor_id is None or d.actor_id == actor_id]
        return sorted(out, key=lambda d: d.created_at)

    async def dead_letter(self, msg_id: str) -> DeadLetter | None:
        self._check()
        return self.dead.get(msg_id)

    async def retry_dead_letter(
        self, msg_id: str, now: float, *, audit: AuditRecord | None = None
    ) -> DeadLetter | None:
        self._check()
        d = self.dead.pop(msg_id, None)
        if d is None:
            return None
        self.append_audit_row(audit)
        self.replies.pop(msg_id, None)
        msg = NewMessage(
            msg_id=d.msg_id,
            actor_id=d.actor_id,
            type=d.type,
            payload=d.payload,
            deliver_at=now,
            created_at=now,
        )
        # parks=1: the message has a past (ledger rows, approvals) its next delivery must read
        # A new seq: ready again for every scan.
        self.mailbox[msg_id] = Row(seq=self.next_seq(), msg=msg, parks=1)
        return d

    async def discard_dead_letter(self, msg_id: str, *, audit: AuditRecord | None = None) -> bool:
        self._check()
        if self.dead.pop(msg_id, None) is None:
            return False
        self.append_audit_row(audit)
        return True

    async def purge(self, before: float) -> int:
        self._check()
        old_keys = [k for k, (_, at) in self.dedup.items() if at < before]
        old_replies = [k for k, r in self.replies.items() if r.created_at < before]
        for k in old_keys:
            del self.dedup[k]
        for m in old_replies:
            del self.replies[m]
        return len(old_keys) + len(old_replies)
