"""The writes of the memory store: a batch validated first, then applied in place.

Nothing below the checks can fail, so a batch is applied whole or not at all, in time
proportional to the batch, not to the store. ``apply_one`` takes the two writes of every
message (a send without a dedup key, and a step whose fence holds and that stops nothing)
without building a batch; both paths share the helpers below, so they cannot differ in what
they store. Fencing (I8) is checked in the same call that writes: the memory store has one
writer, its event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import msgspec

from tether.errors import StoreError
from tether.store.memory.tables import ReplyRow, Row, Tables
from tether.store.records import (
    Batch,
    BatchResult,
    DeadLetter,
    EffectRecord,
    NewMessage,
    Reply,
    StepCommit,
    StopActor,
    Write,
)

T = TypeVar("T", bound=Any)

# What ``apply_one`` returns for a write with nothing to report. One shared instance is safe:
# callers only read results (the committer already hands one result to every write of a batch).
_NOTHING_TO_REPORT = BatchResult()


def _live(ops: list[T], stale: set[str]) -> list[T]:
    """``ops`` of actors whose writes were not rejected as stale. A function of its own, not a
    comprehension in ``apply_sync``: there ``stale`` would be a closure cell on every write."""
    return [op for op in ops if op.actor_id not in stale]


def apply_one(t: Tables, write: Write) -> BatchResult | None:
    """``apply_sync`` of a batch of ``write`` alone, without building the batch, for the two
    writes of every message: a send without a dedup key, and a step whose fence holds and
    that stops nothing. None for any other write: the caller goes through ``apply_sync``."""
    if not t._open:
        t._check()  # raises
    step: Any = write  # told apart by ``type(...) is`` below: cheaper than isinstance
    kind = type(step)
    if kind is NewMessage:
        if step.dedup_key is not None:
            return None
        t._seq += 1  # inline Tables.next_seq: this is every message's path
        t.mailbox[step.msg_id] = Row(t._seq, step, step.attempts)
        return _NOTHING_TO_REPORT
    if kind is not StepCommit or step.stop is not None or step.effects:
        return None
    rec = t.actors.get(step.actor_id)
    if rec is None or rec.fence != step.fence:
        return None  # stale: apply_sync reports it
    if step.events:
        check_seqs(t, step, {})  # raises before anything is changed
    result = BatchResult() if step.outbox else _NOTHING_TO_REPORT  # only sends report
    for m in step.outbox:
        insert(t, m, result)
    apply_step(t, step)
    if step.claim_next is not None:
        claim(t, step.claim_next)
    return result


def apply_sync(t: Tables, batch: Batch) -> BatchResult:
    """``apply``, synchronously: nothing here waits, so the group committer calls it directly
    (no committer round trip) when it is the store's ``immediate`` path."""
    if not t._open:
        t._check()  # raises
    result = BatchResult()
    # Validate first, then mutate in place.
    actors = t.actors
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
            check_seqs(t, st, last_seq)

    if batch.spawns or batch.revives or batch.watches or batch.releases or batch.acquires:
        apply_registry(t, batch, result)

    steps = _live(batch.steps, stale) if stale else batch.steps
    # Plain loops, not comprehensions, over the steps: cheaper for the usual one write.
    messages = batch.messages  # then the steps' outboxes, in order
    claims = [c.msg_id for c in _live(batch.claims, stale)] if batch.claims else []
    stop_ops: list[StopActor] = []
    settled: Sequence[EffectRecord] = ()  # ledger rows settled with a step (rare)
    for s in steps:
        if s.effects:
            settled = [*settled, *s.effects]
        if s.outbox:
            if messages is batch.messages:
                messages = list(messages)
            messages.extend(s.outbox)
        if s.claim_next is not None:
            claims.append(s.claim_next)
        if s.stop is not None:
            stop_ops.append(s.stop)
    stop_ops += batch.stops
    for f in batch.failures:  # a dead letter's notice, stored with it
        if f.notice is not None and f.dead_letter_reason is not None and f.actor_id not in stale:
            if messages is batch.messages:
                messages = list(messages)
            messages.append(f.notice)
    for p in batch.parks:  # a new approval request's notices, stored with its park
        if p.notices and p.actor_id not in stale:
            if messages is batch.messages:
                messages = list(messages)
            messages.extend(p.notices)
    for m in messages:
        insert(t, m, result)
    for s in steps:
        apply_step(t, s)
    for msg_id in claims:
        claim(t, msg_id)
    if batch.failures or batch.effects or batch.parks or stop_ops or settled:
        apply_rest(t, batch, stale, stop_ops, settled)
    return result


def check_seqs(t: Tables, st: StepCommit, last_seq: dict[str, int]) -> None:
    """Refuse a step whose events do not follow the journal (and the batch's earlier steps of
    the same actor, in ``last_seq``)."""
    have = t.journal.get(st.actor_id)
    prev = last_seq.get(st.actor_id, have[-1].seq if have else 0)
    for ev in st.events:
        if ev.seq <= prev:
            raise StoreError(f"journal of {st.actor_id!r} already has seq {ev.seq}")
        prev = ev.seq
    last_seq[st.actor_id] = prev


def insert(t: Tables, m: NewMessage, result: BatchResult) -> None:
    """Store a sent message, unless its dedup key was used before (a duplicate)."""
    if m.dedup_key is not None:
        stored = t.dedup.setdefault((m.actor_id, m.dedup_key), (m.msg_id, m.created_at))[0]
        if stored != m.msg_id:
            result.duplicates[m.msg_id] = stored
            return
    t._seq += 1  # inline Tables.next_seq: this is every message's path
    t.mailbox[m.msg_id] = Row(t._seq, m, m.attempts)


def apply_step(t: Tables, s: StepCommit) -> None:
    """A step's journal, snapshot, ack and replies (its outbox is inserted before)."""
    if s.events:
        t.journal.setdefault(s.actor_id, []).extend(s.events)
    if s.snapshot is not None:
        t.snapshots[s.actor_id] = s.snapshot
    row = t.mailbox.pop(s.msg_id, None)
    replies = t.replies
    if s.reply is not None and row is not None:
        replies[s.msg_id] = ReplyRow(Reply(s.msg_id, True, s.reply), row.msg.created_at)
    for late in s.late_replies:
        replies[late.msg_id] = ReplyRow(Reply(late.msg_id, True, late.payload), late.at)


def claim(t: Tables, msg_id: str) -> None:
    row = t.mailbox.get(msg_id)
    if row is not None:
        row.attempts += 1  # a row is never shared: reads hand out copies


def apply_registry(t: Tables, batch: Batch, result: BatchResult) -> None:
    """The actor registry's writes of ``apply_sync`` (after its checks; none can fail).
    Apart, so that the usual batch (a message, a step) skips them with one test."""
    actors, stale = t.actors, result.stale
    for sp in batch.spawns:
        actors.setdefault(sp.record.actor_id, sp.record)
        result.spawned[sp.record.actor_id] = actors[sp.record.actor_id]
    for rv in batch.revives:
        rec = actors.get(rv.actor_id)
        if rec is not None:
            actors[rv.actor_id] = msgspec.structs.replace(rec, status="active", stop_reason=None)
    for w in batch.watches:
        t.watches.setdefault(w.watched, set()).add(w.watcher)
    for rel in batch.releases:
        rec = actors.get(rel.actor_id)
        if rel.actor_id not in stale and rec is not None and rec.fence == rel.fence:
            actors[rel.actor_id] = msgspec.structs.replace(rec, lease_owner=None, lease_expires=0.0)
    now = t.clock() if batch.acquires else 0.0  # leases run on the store's clock
    for acq in batch.acquires:
        rec = actors.get(acq.actor_id)
        free = (
            rec is not None
            and rec.status == "active"
            and (
                rec.lease_owner is None
                or rec.lease_owner == acq.owner
                or rec.lease_expires < now
                or rec.lease_owner not in t.runtimes
            )
        )
        if rec is not None and free:
            rec = msgspec.structs.replace(
                rec, lease_owner=acq.owner, lease_expires=now + acq.ttl, fence=rec.fence + 1
            )
            actors[acq.actor_id] = rec
            result.leases[acq.actor_id] = rec.fence
        else:
            result.leases[acq.actor_id] = None


def apply_rest(
    t: Tables,
    batch: Batch,
    stale: set[str],
    stop_ops: list[StopActor],
    settled: Sequence[EffectRecord],
) -> None:
    """The rarer writes of ``apply_sync`` (failures, the ledger, parks, stops), after the
    checks: nothing here can fail. ``settled``: ledger rows settled with a live step."""
    actors, mailbox = t.actors, t.mailbox

    for f in batch.failures:
        if f.actor_id in stale:
            continue
        row = mailbox.get(f.msg_id)
        if row is not None:
            row.errors = list(f.errors)
            row.attempts += int(f.claim_again)
        if f.dead_letter_reason is not None:
            dead_letter(t, f.msg_id, f.dead_letter_reason, f.now)

    parks = [p for p in batch.parks if p.actor_id not in stale]
    ledger = [e.record for e in batch.effects if e.actor_id not in stale]
    ledger.extend(settled)
    ledger.extend(p.effect for p in parks if p.effect is not None)
    for e in ledger:
        upsert_effect(t, e)
    for p in parks:
        if p.approval is not None:
            t.approvals.setdefault(p.approval.request_id, p.approval)
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
            dead_letter(t, msg_id, f"actor {halt.status}: {halt.reason}", halt.now)
        for watcher in sorted(t.watches.pop(halt.actor_id, set())):
            notice_id = f"terminated:{halt.actor_id}:{watcher}:{halt.now!r}"
            if notice_id not in mailbox:
                mailbox[notice_id] = Row(
                    seq=t.next_seq(),
                    msg=NewMessage(
                        notice_id, watcher, "Terminated", halt.notice, halt.now, halt.now
                    ),
                )


def dead_letter(t: Tables, msg_id: str, reason: str, at: float) -> None:
    row = t.mailbox.pop(msg_id, None)
    if row is None:
        return
    if row.msg.wants_reply:
        payload = msgspec.msgpack.encode([*row.errors, reason])
        t.replies[msg_id] = ReplyRow(Reply(msg_id, False, payload), at)
    t.dead[msg_id] = DeadLetter(
        msg_id=msg_id,
        actor_id=row.msg.actor_id,
        type=row.msg.type,
        payload=row.msg.payload,
        attempts=row.attempts,
        errors=list(row.errors),
        reason=reason,
        created_at=at,
    )


def upsert_effect(t: Tables, e: EffectRecord) -> None:
    """Insert the row, or replace only the outcome of the slot's row (as SQLite's upsert): a
    slot's identity (key, tool, input hash, args) and created_at are fixed."""
    slot = (e.actor_id, e.msg_id, e.idx)
    old = t.effects.get(slot)
    t.effects[slot] = (
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


def unpark(t: Tables, msg_id: str, now: float) -> bool:
    """Make a parked message due at ``now``, ready again for the scan: a new seq, last."""
    row = t.mailbox.get(msg_id)
    if row is None or row.msg.deliver_at <= now:
        return False
    del t.mailbox[msg_id]  # re-inserted last: dict order is seq order
    t.mailbox[msg_id] = msgspec.structs.replace(
        row, seq=t.next_seq(), msg=msgspec.structs.replace(row.msg, deliver_at=now)
    )
    return True
