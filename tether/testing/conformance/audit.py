"""The audit log: every attempted decision or resolution, allowed or refused, written in the
transaction of the change it records (``update_approval``, ``resolve_effect``,
``retry_dead_letter``, ``discard_dead_letter``) or on its own (``append_audit``); the notices
a decision or a new approval request stores with itself."""

from __future__ import annotations

import msgspec
import pytest

from tether.store.protocol import Store
from tether.store.records import (
    ApprovalRecord,
    AttemptFailed,
    AuditRecord,
    Batch,
    Claim,
    Park,
)
from tether.testing.conformance.reuse import approval_of
from tether.testing.conformance.support import (
    LATER,
    NOW,
    effect,
    msg,
    owned,
    pending_ids,
    send,
    take_over,
)


def audit_row(
    target: str = "req-1",
    *,
    action: str = "approve",
    outcome: str = "allowed",
    identity: str = "alice",
    actor_id: str | None = "a",
    at: float = NOW,
) -> AuditRecord:
    return AuditRecord(
        at=at,
        identity=identity,
        authenticated=True,
        via="console",
        action=action,
        target=target,
        outcome=outcome,
        detail="approved (1 of 1)" if outcome == "allowed" else "it was already approved",
        actor_id=actor_id,
        version_before=0,
        version_after=1 if outcome == "allowed" else None,
        fingerprint="f" * 32,
        remote="127.0.0.1",
    )


def without_seq(rows: list[AuditRecord]) -> list[AuditRecord]:
    return [msgspec.structs.replace(r, seq=0) for r in rows]


async def _requested(store: Store) -> ApprovalRecord:
    """Actor ``a`` owned, ``m1`` parked on request ``req-1``; the stored request."""
    fence = await owned(store, "a")
    await send(store, msg("m1"))
    await store.apply(Batch(claims=[Claim("a", fence, "m1")]))
    await store.apply(
        Batch(parks=[Park("a", fence, "m1", approval=approval_of("a", "m1", "req-1"))])
    )
    [request] = await store.find_approvals(request_id="req-1")
    return request


def _approved(request: ApprovalRecord) -> ApprovalRecord:
    return msgspec.structs.replace(
        request, status="approved", version=request.version + 1, decided_at=NOW + 5
    )


async def test_a_decision_stores_its_audit_row_and_notices_with_itself(store: Store) -> None:
    """``update_approval`` with ``audit`` and ``notices``: the record, the audit row and the
    notices (as messages of their actor) are all stored; the audit row gets a seq."""
    request = await _requested(store)
    await owned(store, "notifier", "rt-1")
    notice = msg("n1", "notifier", dedup_key="req-1:decided")
    row = audit_row()
    assert await store.update_approval(
        _approved(request), request.version, audit=row, notices=[notice]
    )
    [stored] = await store.find_approvals(request_id="req-1")
    assert (stored.status, stored.version) == ("approved", 1)
    [logged] = await store.list_audit()
    assert logged.seq > 0
    assert msgspec.structs.replace(logged, seq=0) == row
    assert await pending_ids(store, "notifier") == ["n1"]


async def test_a_decision_that_lost_the_race_writes_no_audit_row_and_no_notice(
    store: Store,
) -> None:
    """A compare-and-swap that fails (the stored version moved on) writes nothing at all: not
    the record, not its audit row, not its notices."""
    request = await _requested(store)
    await owned(store, "notifier", "rt-1")
    assert await store.update_approval(_approved(request), request.version)
    late = msgspec.structs.replace(_approved(request), status="rejected")
    assert not await store.update_approval(
        late, request.version, audit=audit_row(), notices=[msg("n1", "notifier", dedup_key="k")]
    )
    assert await store.list_audit() == []
    assert await pending_ids(store, "notifier") == []
    [stored] = await store.find_approvals(request_id="req-1")
    assert stored.status == "approved"


async def test_a_notice_whose_dedup_key_is_taken_is_stored_once(store: Store) -> None:
    """Two decisions carrying notices with the same dedup key (a decision retried) store one."""
    request = await _requested(store)
    await owned(store, "notifier", "rt-1")
    modified = msgspec.structs.replace(request, version=1)
    assert await store.update_approval(
        modified, 0, notices=[msg("n1", "notifier", dedup_key="req-1:decided")]
    )
    assert await store.update_approval(
        _approved(modified), 1, notices=[msg("n2", "notifier", dedup_key="req-1:decided")]
    )
    assert await pending_ids(store, "notifier") == ["n1"]


async def test_append_audit_gives_each_row_a_growing_seq_listed_newest_first(
    store: Store,
) -> None:
    seqs = [
        await store.append_audit(audit_row(f"req-{i}", outcome="refused", identity=f"u{i}"))
        for i in range(3)
    ]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == 3
    listed = await store.list_audit()
    assert [r.seq for r in listed] == seqs[::-1]
    assert [r.identity for r in listed] == ["u2", "u1", "u0"]


async def test_list_audit_filters_by_target_and_actor_and_pages_with_before(store: Store) -> None:
    await store.append_audit(audit_row("req-1", actor_id="a"))
    await store.append_audit(audit_row("req-2", actor_id="b"))
    await store.append_audit(audit_row("req-1", actor_id="a", outcome="refused"))
    await store.append_audit(audit_row("key-9", action="effect.retry", actor_id=None))
    assert [r.outcome for r in await store.list_audit(target="req-1")] == ["refused", "allowed"]
    assert [r.target for r in await store.list_audit(actor_id="b")] == ["req-2"]
    first = await store.list_audit(limit=2)
    assert [r.target for r in first] == ["key-9", "req-1"]
    rest = await store.list_audit(before=first[-1].seq, limit=10)
    assert [r.target for r in rest] == ["req-2", "req-1"]
    assert await store.list_audit(limit=0) == []
    with pytest.raises(ValueError, match="limit must be >= 0"):
        await store.list_audit(limit=-1)


async def test_an_audit_row_keeps_every_field_as_written(store: Store) -> None:
    """Every field reads back as written, NULLs and an unauthenticated name included."""
    row = AuditRecord(
        at=NOW + 0.25,
        identity="bob (typed)",
        authenticated=False,
        via="cli",
        action="reject",
        target="req-7",
        outcome="refused",
        detail="its deadline passed",
        actor_id=None,
        version_before=None,
        version_after=None,
        fingerprint=None,
        remote=None,
    )
    await store.append_audit(row)
    assert without_seq(await store.list_audit()) == [row]


async def test_a_resolution_stores_its_audit_row_with_itself(store: Store) -> None:
    """``resolve_effect`` with ``audit`` writes it with the resolution; a key that is not
    quarantined (any more) writes neither."""
    fence = await owned(store, "a")
    await send(store, msg("m1"))
    q = effect("m1", status="quarantined", reason="ambiguous")
    await store.apply(Batch(parks=[Park("a", fence, "m1", effect=q)]))
    row = audit_row(q.key, action="effect.retry")
    retry = msgspec.structs.replace(q, status="retry", updated_at=NOW + 5)
    assert await store.resolve_effect(q.key, retry, NOW + 5, audit=row) == retry
    assert without_seq(await store.list_audit()) == [row]
    assert await store.resolve_effect(q.key, retry, NOW + 6, audit=row) is None
    assert len(await store.list_audit()) == 1


@pytest.mark.parametrize("how", ["retry", "discard"])
async def test_a_dead_letter_resolution_stores_its_audit_row_with_itself(
    store: Store, how: str
) -> None:
    """Retrying or discarding a dead letter writes its audit row in the same transaction; a
    dead letter that is not there (any more) writes none."""
    fence = await owned(store, "a")
    await send(store, msg("m1"))
    await store.apply(
        Batch(failures=[AttemptFailed("a", fence, "m1", ["boom"], dead_letter_reason="x")])
    )
    row = audit_row("m1", action=f"dead_letter.{how}")
    if how == "retry":
        assert await store.retry_dead_letter("m1", NOW + 5, audit=row) is not None
        assert await store.retry_dead_letter("m1", NOW + 6, audit=row) is None
    else:
        assert await store.discard_dead_letter("m1", audit=row)
        assert not await store.discard_dead_letter("m1", audit=row)
    assert without_seq(await store.list_audit()) == [row]


async def test_a_park_stores_its_notices_once_and_a_stale_park_stores_none(store: Store) -> None:
    """The notices of a new approval request are stored with its park; the same step parked
    again (a replay) stores them once (their dedup key); a park with a stale fence stores
    none (I8)."""
    fence = await owned(store, "a")
    await owned(store, "notifier", "rt-1")
    await send(store, msg("m1"), msg("m2"))
    request = approval_of("a", "m1", "req-1")
    notice = msg("n1", "notifier", dedup_key="req-1:requested")
    await store.apply(Batch(parks=[Park("a", fence, "m1", approval=request, notices=[notice])]))
    again = msg("n1-again", "notifier", dedup_key="req-1:requested")
    assert await store.unpark("m1", NOW + 1)
    await store.apply(Batch(parks=[Park("a", fence, "m1", approval=request, notices=[again])]))
    assert await pending_ids(store, "notifier", LATER) == ["n1"]

    new_fence = await take_over(store, "a")
    assert new_fence > fence
    stale = Park("a", fence, "m2", notices=[msg("n2", "notifier", dedup_key="req-2:requested")])
    result = await store.apply(Batch(parks=[stale]))
    assert result.stale == {"a"}
    assert await pending_ids(store, "notifier", LATER) == ["n1"]
