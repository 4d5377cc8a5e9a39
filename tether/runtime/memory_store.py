"""``MemoryStore``: the same semantics as ``SqliteStore``, in dicts, for fast tests.

It is what ``Runtime(":memory:")`` uses. It shares nothing between processes and survives
nothing, so it is for tests of actor logic, never for durability.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

import msgspec

from tether.errors import CorruptRecordError, StoreError
from tether.runtime.store import (
    ActorRecord,
    ApprovalRecord,
    Batch,
    BatchResult,
    DeadLetter,
    EffectRecord,
    JournalRow,
    NewMessage,
    Reply,
    Snapshot,
    StepCommit,
    StopActor,
    StoredMessage,
)


class _Row(msgspec.Struct):
    seq: int
    msg: NewMessage
    attempts: int = 0
    # replaced, never appended to: a row starts with no list of its own (one per message)
    errors: Sequence[str] = ()
    parks: int = 0


class _ReplyRow(msgspec.Struct):
    reply: Reply
    created_at: float


T = TypeVar("T", bound=Any)

# What ``apply_one`` returns for a write with nothing to report. One shared instance is safe:
# callers only read results (the committer already hands one result to every write of a batch).
_NOTHING_TO_REPORT = BatchResult()


def _live(ops: list[T], stale: set[str]) -> list[T]:
    """``ops`` of actors whose writes were not rejected as stale. A function of its own, not a
    comprehension in ``apply_sync``: there ``stale`` would be a closure cell on every write."""
    return [op for op in ops if op.actor_id not in stale]


def _due(m: NewMessage, now: float) -> bool:
    """A message sent without a delay is due at once, whatever the reader's clock says."""
    return m.deliver_at <= now or m.deliver_at == m.created_at


class MemoryStore:
    """A store in process memory. See the module docstring."""

    def __init__(self) -> None:
        self._open = False
        self.actors: dict[str, ActorRecord] = {}
        self.mailbox: dict[str, _Row] = {}  # msg_id -> row; dict order is insertion (= seq) order
        self.dedup: dict[tuple[str, str], tuple[str, float]] = {}
        self.journal: dict[str, list[JournalRow]] = {}
        self.snapshots: dict[str, Snapshot] = {}
        self.replies: dict[str, _ReplyRow] = {}
        self.dead: dict[str, DeadLetter] = {}
        self.runtimes: dict[str, tuple[str, str, int, float]] = {}
        self.watches: dict[str, set[str]] = {}
        self.effects: dict[tuple[str, str, int], EffectRecord] = {}
        self.approvals: dict[str, ApprovalRecord] = {}
        self._seq = 0

    async def open(self) -> None:
        self._open = True

    async def close(self) -> None:
        self._open = False

    def _check(self) -> None:
        if not self._open:
            raise StoreError("memory store is not open")

    async def apply(self, batch: Batch) -> BatchResult:
        return self.apply_sync(batch)

    def apply_one(self, write: Any) -> BatchResult | None:
        """``apply_sync`` of a batch of ``write`` alone, without building the batch, for the two
        writes of every message: a send without a dedup key, and a step whose fence holds and
        that stops nothing. None for any other write: the caller goes through ``apply_sync``.
        Both paths share the helpers below, so they cannot differ in what they store."""
        if not self._open:
            self._check()  # raises
        kind = type(write)
        if kind is NewMessage:
            if write.dedup_key is not None:
                return None
            self._seq += 1
            self.mailbox[write.msg_id] = _Row(self._seq, write, write.attempts)
            return _NOTHING_TO_REPORT
        if kind is not StepCommit or write.stop is not None:
            return None
        rec = self.actors.get(write.actor_id)
        if rec is None or rec.fence != write.fence:
            return None  # stale: apply_sync reports it
        if write.events:
            self._check_seqs(write, {})  # raises before anything is changed
        result = BatchResult() if write.outbox else _NOTHING_TO_REPORT  # only sends report
        for m in write.outbox:
            self._insert(m, result)
        self._apply_step(write)
        if write.claim_next is not None:
            self._claim(write.claim_next)
        return result

    def apply_sync(self, batch: Batch) -> BatchResult:
        """``apply``, synchronously: nothing here waits, so the group committer calls it directly
        (no committer round trip) when it is the store's ``apply`` in force."""
        if not self._open:
            self._check()  # raises
        result = BatchResult()
        # Validate first, then mutate in place: nothing below the checks can fail, so a batch is
        # applied whole or not at all, in time proportional to the batch, not to the store.
        actors = self.actors
        if (
            batch.releases
            or batch.steps
            or batch.claims
            or batch.failures
            or batch.effects
            or batch.parks
        ):
            for op in batch.fenced():
                rec = actors.get(op.actor_id)
                if rec is None or rec.fence != op.fence:
                    result.stale.add(op.actor_id)
        stale = result.stale
        last_seq: dict[str, int] = {}
        for st in batch.steps:
            if st.events and st.actor_id not in stale:
                self._check_seqs(st, last_seq)

        if batch.spawns or batch.revives or batch.watches or batch.releases or batch.acquires:
            self._apply_registry(batch, result)

        steps = _live(batch.steps, stale) if stale else batch.steps
        # Plain loops, not comprehensions, over the steps: cheaper for the usual one write.
        messages = batch.messages  # then the steps' outboxes, in order
        claims = [c.msg_id for c in _live(batch.claims, stale)] if batch.claims else []
        stop_ops: list[StopActor] = []
        for s in steps:
            if s.outbox:
                if messages is batch.messages:
                    messages = list(messages)
                messages.extend(s.outbox)
            if s.claim_next is not None:
                claims.append(s.claim_next)
            if s.stop is not None:
                stop_ops.append(s.stop)
        stop_ops += batch.stops
        for m in messages:
            self._insert(m, result)
        for s in steps:
            self._apply_step(s)
        for msg_id in claims:
            self._claim(msg_id)
        if batch.failures or batch.effects or batch.parks or stop_ops:
            self._apply_rest(batch, stale, stop_ops)
        return result

    def _check_seqs(self, st: StepCommit, last_seq: dict[str, int]) -> None:
        """Refuse a step whose events do not follow the journal (and the batch's earlier
        steps of the same actor, in ``last_seq``)."""
        have = self.journal.get(st.actor_id)
        prev = last_seq.get(st.actor_id, have[-1].seq if have else 0)
        for ev in st.events:
            if ev.seq <= prev:
                raise StoreError(f"journal of {st.actor_id!r} already has seq {ev.seq}")
            prev = ev.seq
        last_seq[st.actor_id] = prev

    def _insert(self, m: NewMessage, result: BatchResult) -> None:
        """Store a sent message, unless its dedup key was used before (a duplicate)."""
        if m.dedup_key is not None:
            stored = self.dedup.setdefault((m.actor_id, m.dedup_key), (m.msg_id, m.created_at))[0]
            if stored != m.msg_id:
                result.duplicates[m.msg_id] = stored
                return
        self._seq += 1
        self.mailbox[m.msg_id] = _Row(self._seq, m, m.attempts)

    def _apply_step(self, s: StepCommit) -> None:
        """A step's journal, snapshot, ack and replies (its outbox is inserted before)."""
        if s.events:
            self.journal.setdefault(s.actor_id, []).extend(s.events)
        if s.snapshot is not None:
            self.snapshots[s.actor_id] = s.snapshot
        row = self.mailbox.pop(s.msg_id, None)
        replies = self.replies
        if s.reply is not None and row is not None:
            replies[s.msg_id] = _ReplyRow(Reply(s.msg_id, True, s.reply), row.msg.created_at)
        for late in s.late_replies:
            replies[late.msg_id] = _ReplyRow(Reply(late.msg_id, True, late.payload), late.at)

    def _claim(self, msg_id: str) -> None:
        row = self.mailbox.get(msg_id)
        if row is not None:
            row.attempts += 1  # a row is never shared: reads hand out copies

    def _apply_registry(self, batch: Batch, result: BatchResult) -> None:
        """The actor registry's writes of ``apply_sync`` (after its checks; none can fail).
        Apart, so that the usual batch (a message, a step) skips them with one test."""
        actors, stale = self.actors, result.stale
        for sp in batch.spawns:
            actors.setdefault(sp.record.actor_id, sp.record)
            result.spawned[sp.record.actor_id] = actors[sp.record.actor_id]
        for rv in batch.revives:
            rec = actors.get(rv.actor_id)
            if rec is not None:
                actors[rv.actor_id] = msgspec.structs.replace(
                    rec, status="active", stop_reason=None
                )
        for w in batch.watches:
            self.watches.setdefault(w.watched, set()).add(w.watcher)
        for rel in batch.releases:
            rec = actors.get(rel.actor_id)
            if rel.actor_id not in stale and rec is not None and rec.fence == rel.fence:
                actors[rel.actor_id] = msgspec.structs.replace(
                    rec, lease_owner=None, lease_expires=0.0
                )
        for acq in batch.acquires:
            rec = actors.get(acq.actor_id)
            free = (
                rec is not None
                and rec.status == "active"
                and (
                    rec.lease_owner is None
                    or rec.lease_owner == acq.owner
                    or rec.lease_expires < acq.now
                    or rec.lease_owner not in self.runtimes
                )
            )
            if rec is not None and free:
                rec = msgspec.structs.replace(
                    rec, lease_owner=acq.owner, lease_expires=acq.expires, fence=rec.fence + 1
                )
                actors[acq.actor_id] = rec
                result.leases[acq.actor_id] = rec.fence
            else:
                result.leases[acq.actor_id] = None

    def _apply_rest(self, batch: Batch, stale: set[str], stop_ops: list[StopActor]) -> None:
        """The rarer writes of ``apply_sync`` (failures, the ledger, parks, stops), after the
        checks: nothing here can fail."""
        actors, mailbox = self.actors, self.mailbox

        dead_letter = self._dead_letter
        for f in batch.failures:
            if f.actor_id in stale:
                continue
            row = mailbox.get(f.msg_id)
            if row is not None:
                row.errors = list(f.errors)
                row.attempts += int(f.claim_again)
            if f.dead_letter_reason is not None:
                dead_letter(f.msg_id, f.dead_letter_reason, f.now)

        parks = [p for p in batch.parks if p.actor_id not in stale]
        ledger = [e.record for e in batch.effects if e.actor_id not in stale]
        ledger.extend(p.effect for p in parks if p.effect is not None)
        for e in ledger:
            self._upsert_effect(e)
        for p in parks:
            if p.approval is not None:
                self.approvals.setdefault(p.approval.request_id, p.approval)
            row = mailbox.get(p.msg_id)
            if row is not None:
                mailbox[p.msg_id] = msgspec.structs.replace(
                    row,
                    msg=msgspec.structs.replace(row.msg, deliver_at=p.until),
                    attempts=max(row.attempts - 1, 0),
                    parks=row.parks + 1,
                )

        for halt in stop_ops:
            rec = actors.get(halt.actor_id)
            if rec is not None:
                actors[halt.actor_id] = msgspec.structs.replace(
                    rec,
                    status=halt.status,
                    stop_reason=halt.reason,
                    fence=rec.fence + 1,
                    lease_owner=None,
                    lease_expires=0.0,
                )
            for msg_id in [k for k, r in mailbox.items() if r.msg.actor_id == halt.actor_id]:
                dead_letter(msg_id, f"actor {halt.status}: {halt.reason}", halt.now)
            for watcher in sorted(self.watches.pop(halt.actor_id, set())):
                notice_id = f"terminated:{halt.actor_id}:{watcher}:{halt.now!r}"
                if notice_id not in mailbox:
                    self._seq += 1
                    mailbox[notice_id] = _Row(
                        seq=self._seq,
                        msg=NewMessage(
                            notice_id, watcher, "Terminated", halt.notice, halt.now, halt.now
                        ),
                    )

    def _dead_letter(self, msg_id: str, reason: str, at: float) -> None:
        row = self.mailbox.pop(msg_id, None)
        if row is None:
            return
        if row.msg.wants_reply:
            payload = msgspec.msgpack.encode([*row.errors, reason])
            self.replies[msg_id] = _ReplyRow(Reply(msg_id, False, payload), at)
        self.dead[msg_id] = DeadLetter(
            msg_id=msg_id,
            actor_id=row.msg.actor_id,
            type=row.msg.type,
            payload=row.msg.payload,
            attempts=row.attempts,
            errors=list(row.errors),
            reason=reason,
            created_at=at,
        )

    async def get_actor(self, actor_id: str) -> ActorRecord | None:
        self._check()
        return self.actors.get(actor_id)

    async def list_actors(
        self,
        *,
        parent_id: str | None = None,
        on_corrupt: Callable[[str, CorruptRecordError], None] | None = None,
    ) -> list[ActorRecord]:
        self._check()  # records held decoded: never damaged, on_corrupt is never called
        recs = [r for r in self.actors.values() if parent_id is None or r.parent_id == parent_id]
        return sorted(recs, key=lambda r: (r.created_at, r.actor_id))

    async def load_snapshot(self, actor_id: str) -> Snapshot | None:
        self._check()
        return self.snapshots.get(actor_id)

    async def load_journal(self, actor_id: str, after_seq: int, limit: int) -> list[JournalRow]:
        self._check()
        rows = self.journal.get(actor_id, [])
        return [r for r in rows if r.seq > after_seq][:limit]

    def _stored(self, row: _Row) -> StoredMessage:
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
        )

    async def pending(
        self,
        actor_id: str,
        now: float,
        limit: int,
        *,
        on_corrupt: Callable[[str, CorruptRecordError], None] | None = None,
    ) -> list[StoredMessage]:
        self._check()
        rows = [r for r in self.mailbox.values() if r.msg.actor_id == actor_id and _due(r.msg, now)]
        return [self._stored(r) for r in rows[:limit]]

    async def new_messages(
        self, after_seq: int, now: float, limit: int, *, skip_prefix: str | None = None
    ) -> list[tuple[int, str, str, bool]]:
        self._check()
        rows = [
            r
            for r in self.mailbox.values()
            if r.seq > after_seq
            and _due(r.msg, now)
            and not (skip_prefix and r.parks == 0 and r.msg.msg_id.startswith(skip_prefix))
        ]
        return [(r.seq, r.msg.actor_id, r.msg.msg_id, r.parks > 0) for r in rows[:limit]]

    async def orphaned(self, now: float, limit: int) -> list[str]:
        self._check()
        out: dict[str, None] = {}
        for r in self.mailbox.values():
            rec = self.actors.get(r.msg.actor_id)
            if rec is None or not _due(r.msg, now):
                continue
            if (
                rec.lease_owner is None
                or rec.lease_expires < now
                or rec.lease_owner not in self.runtimes
            ):
                out[rec.actor_id] = None
        return list(out)[:limit]

    async def due_between(self, after: float, upto: float) -> list[str]:
        self._check()
        ids = (
            r.msg.actor_id
            for r in self.mailbox.values()
            if after < r.msg.deliver_at <= upto and r.msg.deliver_at > r.msg.created_at
        )
        return list(dict.fromkeys(ids))

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

    async def renew_leases(self, owner: str, expires: float) -> None:
        self._check()
        for k, rec in self.actors.items():
            if rec.lease_owner == owner:
                self.actors[k] = msgspec.structs.replace(rec, lease_expires=expires)

    async def register_runtime(self, runtime_id: str, host: str, pid: int, started: float) -> None:
        self._check()
        self.runtimes[runtime_id] = (runtime_id, host, pid, started)

    async def list_runtimes(
        self, *, on_corrupt: Callable[[str, CorruptRecordError], None] | None = None
    ) -> list[tuple[str, str, int, float]]:
        self._check()
        return list(self.runtimes.values())

    async def remove_runtime(self, runtime_id: str) -> None:
        self._check()
        self.runtimes.pop(runtime_id, None)
        for k, rec in self.actors.items():
            if rec.lease_owner == runtime_id:
                self.actors[k] = msgspec.structs.replace(rec, lease_owner=None, lease_expires=0.0)

    async def dead_letters(
        self,
        actor_id: str | None = None,
        *,
        on_corrupt: Callable[[str, CorruptRecordError], None] | None = None,
    ) -> list[DeadLetter]:
        self._check()
        out = [d for d in self.dead.values() if actor_id is None or d.actor_id == actor_id]
        return sorted(out, key=lambda d: d.created_at)

    async def dead_letter(self, msg_id: str) -> DeadLetter | None:
        self._check()
        return self.dead.get(msg_id)

    async def retry_dead_letter(self, msg_id: str, now: float) -> DeadLetter | None:
        self._check()
        d = self.dead.pop(msg_id, None)
        if d is None:
            return None
        self.replies.pop(msg_id, None)
        self._seq += 1
        msg = NewMessage(
            msg_id=d.msg_id,
            actor_id=d.actor_id,
            type=d.type,
            payload=d.payload,
            deliver_at=now,
            created_at=now,
        )
        # parks=1: the message has a past (ledger rows, approvals) its next delivery must read
        self.mailbox[msg_id] = _Row(seq=self._seq, msg=msg, parks=1)
        return d

    async def discard_dead_letter(self, msg_id: str) -> bool:
        self._check()
        return self.dead.pop(msg_id, None) is not None

    async def purge(self, before: float) -> int:
        self._check()
        old_keys = [k for k, (_, at) in self.dedup.items() if at < before]
        old_replies = [k for k, r in self.replies.items() if r.created_at < before]
        for k in old_keys:
            del self.dedup[k]
        for m in old_replies:
            del self.replies[m]
        return len(old_keys) + len(old_replies)

    # -- the effects ledger -------------------------------------------------------------------

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
        on_corrupt: Callable[[str, CorruptRecordError], None] | None = None,
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
        self, key: str, record: EffectRecord, now: float
    ) -> EffectRecord | None:
        self._check()
        found = [e for e in self.effects.values() if e.key == key and e.status == "quarantined"]
        if not found:
            return None
        old = found[0]
        self._upsert_effect(record)
        self._unpark(old.msg_id, now)
        return record

    def _upsert_effect(self, e: EffectRecord) -> None:
        """Insert the row, or replace only the outcome of the slot's row (as SQLite's upsert):
        a slot's identity (key, tool, input hash, args) and created_at are fixed."""
        slot = (e.actor_id, e.msg_id, e.idx)
        old = self.effects.get(slot)
        self.effects[slot] = (
            e
            if old is None
            else msgspec.structs.replace(
                old,
                status=e.status,
                attempts=e.attempts,
                result=e.result,
                error=e.error,
                reason=e.reason,
                history=list(e.history),
                updated_at=e.updated_at,
            )
        )

    async def unpark(self, msg_id: str, now: float) -> bool:
        self._check()
        return self._unpark(msg_id, now)

    def _unpark(self, msg_id: str, now: float) -> bool:
        row = self.mailbox.get(msg_id)
        if row is None or row.msg.deliver_at <= now:
            return False
        del self.mailbox[msg_id]  # re-inserted last: dict order is seq order
        self._seq += 1
        self.mailbox[msg_id] = msgspec.structs.replace(
            row, seq=self._seq, msg=msgspec.structs.replace(row.msg, deliver_at=now)
        )
        return True

    async def find_approvals(
        self,
        *,
        status: str | None = None,
        actor_id: str | None = None,
        request_id: str | None = None,
        on_corrupt: Callable[[str, CorruptRecordError], None] | None = None,
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

    async def update_approval(self, record: ApprovalRecord, expected_version: int) -> bool:
        self._check()
        old = self.approvals.get(record.request_id)
        if old is None or old.version != expected_version:
            return False
        self.approvals[record.request_id] = record
        if record.status != "pending":
            self._unpark(record.msg_id, record.decided_at or 0.0)
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
