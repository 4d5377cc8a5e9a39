"""Records as the column values every SQL store writes, and rows read back as records.

The SQLite and PostgreSQL stores keep the same tables with the same columns, in the same
order (their own types): the conversions between a row and a record live here once. What
differs stays with each backend: SQLite checks every value's type first (its columns have
affinity, not types) and deflates large ledger blobs (``pack`` / ``unpack``, given here).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from tether.store.records import AuditRecord, DeadLetter, EffectRecord

_errors_decoder = msgspec.msgpack.Decoder(list[str])
encode = msgspec.msgpack.encode

EFFECT_COLUMNS = (
    "actor_id, msg_id, idx, key, tool, input_hash, args, status, attempts, result, error, "
    "reason, history, created_at, updated_at"
)
DEAD_COLUMNS = "msg_id, actor_id, type, payload, attempts, errors, reason, created_at"
AUDIT_FIELDS = (
    "at, identity, authenticated, via, action, target, outcome, detail, actor_id, "
    "version_before, version_after, fingerprint, remote"
)
AUDIT_COLUMNS = "seq, " + AUDIT_FIELDS

Blob = Callable[[Any], Any]  # a stored blob as written, or the reverse


def _same(blob: Any) -> Any:
    return blob


def decode_errors(blob: bytes | None, where: str) -> list[str]:
    """An error history as stored (msgpack of a list of strings); one that does not decode
    reads as a single line saying so, never as an error that hides the row."""
    if not blob:
        return []
    try:
        return _errors_decoder.decode(blob)
    except msgspec.DecodeError:
        return [f"(error history of {where} is unreadable)"]


def effect_values(e: EffectRecord, pack: Blob = _same) -> tuple[Any, ...]:
    """A ledger row's values, in ``EFFECT_COLUMNS`` order; ``pack``: how its large blobs are
    stored."""
    return (
        e.actor_id,
        e.msg_id,
        e.idx,
        e.key,
        e.tool,
        e.input_hash,
        pack(e.args),
        e.status,
        e.attempts,
        pack(e.result),
        e.error,
        e.reason,
        encode(e.history),
        e.created_at,
        e.updated_at,
    )


def effect_record(row: Sequence[Any], unpack: Blob = _same) -> EffectRecord:
    """A ledger row read in ``EFFECT_COLUMNS`` order; ``unpack``: the reverse of ``pack``."""
    (actor_id, msg_id, idx, key, tool, input_hash, args, status, attempts, result, error,
     reason, history, created_at, updated_at) = row  # fmt: skip
    return EffectRecord(
        actor_id=actor_id,
        msg_id=msg_id,
        idx=idx,
        key=key,
        tool=tool,
        input_hash=input_hash,
        args=unpack(args),
        status=status,
        attempts=attempts,
        result=unpack(result),
        error=error,
        reason=reason,
        history=decode_errors(history, f"effect {key}"),
        created_at=created_at,
        updated_at=updated_at,
    )


def dead_letter_record(row: Sequence[Any]) -> DeadLetter:
    """A dead letter read in ``DEAD_COLUMNS`` order."""
    msg_id, actor_id, type_, payload, attempts, errors, reason, created_at = row
    return DeadLetter(
        msg_id=msg_id,
        actor_id=actor_id,
        type=type_,
        payload=payload,
        attempts=attempts,
        errors=decode_errors(errors, msg_id),
        reason=reason,
        created_at=created_at,
    )


def audit_values(a: AuditRecord) -> tuple[Any, ...]:
    """An audit row's values, in ``AUDIT_FIELDS`` order (its seq is the store's to give)."""
    return (
        a.at,
        a.identity,
        a.authenticated,
        a.via,
        a.action,
        a.target,
        a.outcome,
        a.detail,
        a.actor_id,
        a.version_before,
        a.version_after,
        a.fingerprint,
        a.remote,
    )


def audit_record(row: Sequence[Any]) -> AuditRecord:
    """An audit row read in ``AUDIT_COLUMNS`` order."""
    (seq, at, identity, authenticated, via, action, target, outcome, detail, actor_id,
     version_before, version_after, fingerprint, remote) = row  # fmt: skip
    return AuditRecord(
        seq=seq,
        at=at,
        identity=identity,
        authenticated=bool(authenticated),
        via=via,
        action=action,
        target=target,
        outcome=outcome,
        detail=detail,
        actor_id=actor_id,
        version_before=version_before,
        version_after=version_after,
        fingerprint=fingerprint,
        remote=remote,
    )
