"""Rows of the PostgreSQL store as records, and records as rows.

PostgreSQL's columns have types, so a value read is always of its column's type: what can be
damaged is only what tether encodes into a blob itself (an approval request, an error
history), and those are decoded with an error that names the row. The conversions the SQLite
store shares are ``tether.store.columns``'.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from tether.errors import CorruptRecordError
from tether.store.columns import (
    AUDIT_COLUMNS,
    AUDIT_FIELDS,
    DEAD_COLUMNS,
    EFFECT_COLUMNS,
    audit_record,
    audit_values,
    dead_letter_record,
    decode_errors,
    effect_record,
    effect_values,
    encode,
)
from tether.store.records import ActorRecord, ApprovalRecord, RuntimeRecord, StoredMessage

__all__ = [
    "AUDIT_COLUMNS",
    "AUDIT_FIELDS",
    "DEAD_COLUMNS",
    "EFFECT_COLUMNS",
    "decode_errors",
    "encode",
]

_approval_decoder = msgspec.msgpack.Decoder(ApprovalRecord)

ACTOR_COLUMNS = (
    "actor_id, class_path, init, parent_id, status, stop_reason, fence, lease_owner, "
    "lease_expires, created_at, head_seq"
)
MAILBOX_COLUMNS = (
    "seq, msg_id, actor_id, type, payload, deliver_at, attempts, errors, wants_reply, parks, "
    "traceparent"
)
RUNTIME_COLUMNS = "runtime_id, host, pid, started_at"


def actor(row: Sequence[Any]) -> ActorRecord:
    return ActorRecord(*row)


def message(row: Sequence[Any]) -> StoredMessage:
    (seq, msg_id, actor_id, type_, payload, deliver_at, attempts, errors, wants_reply, parks,
     traceparent) = row  # fmt: skip
    return StoredMessage(
        msg_id=msg_id,
        actor_id=actor_id,
        type=type_,
        payload=payload,
        deliver_at=deliver_at,
        attempts=attempts,
        errors=decode_errors(errors, msg_id),
        wants_reply=wants_reply,
        seq=seq,
        parks=parks,
        traceparent=traceparent,
    )


dead_letter = dead_letter_record
effect_row = effect_values
effect = effect_record


def approval(request_id: str, blob: bytes) -> ApprovalRecord:
    try:
        return _approval_decoder.decode(blob)
    except msgspec.DecodeError as exc:
        raise CorruptRecordError(
            f"approval request {request_id!r} cannot be decoded: {exc}"
        ) from exc


def runtime(row: Sequence[Any]) -> RuntimeRecord:
    return RuntimeRecord(*row)


audit_row = audit_values
audit = audit_record
