"""Rows of the SQLite store as records, and records as rows, with every value type-checked.

SQLite columns have type affinity, not types: text written by hand (or a disk fault) into a
REAL or INTEGER column stays text, and a TEXT column keeps a blob. tether never writes such a
value, and msgspec does not check the fields of a record built from a row: every row read into
a record is checked here, column by column (plain ``type(...)`` checks), and a wrong one raises
``CorruptRecordError`` naming the table, the row, the column and the value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import msgspec

from tether.errors import CorruptRecordError
from tether.store.columns import (
    DEAD_COLUMNS,
    EFFECT_COLUMNS,
    dead_letter_record,
    decode_errors,
    effect_record,
    effect_values,
    encode,
)
from tether.store.records import (
    ActorRecord,
    ApprovalRecord,
    DeadLetter,
    EffectRecord,
    NewMessage,
    RuntimeRecord,
)
from tether.store.sqlite.blobs import pack, unpack

# Read and written under these names by the rest of the SQLite store.
__all__ = ["DEAD_COLUMNS", "EFFECT_COLUMNS", "decode_errors", "encode"]


def mailbox_row(m: NewMessage) -> tuple[Any, ...]:
    """A new message's mailbox columns, in the order the inserts name them."""
    return (
        m.msg_id,
        m.actor_id,
        m.type,
        m.payload,
        m.deliver_at,
        int(m.wants_reply),
        m.created_at,
        m.attempts,
        m.traceparent,
    )


def effect_row(e: EffectRecord) -> tuple[Any, ...]:
    return effect_values(e, pack)


def effect(row: Sequence[Any]) -> EffectRecord:
    check_row("effects", effect_key(row), row, EFFECT_TYPES)
    return effect_record(row, unpack)


_approval_decoder = msgspec.msgpack.Decoder(ApprovalRecord)


def approval(request_id: str, blob: bytes) -> ApprovalRecord:
    try:
        return _approval_decoder.decode(blob)
    except msgspec.DecodeError as exc:
        raise CorruptRecordError(
            f"approval request {request_id!r} cannot be decoded: {exc}"
        ) from exc


# -- type checks ---------------------------------------------------------------------------------

Kind = tuple[tuple[type, ...], str]  # the Python types a column's values may have; its name
_TEXT: Kind = ((str,), "text")
_TEXT_OR_NULL: Kind = ((str, type(None)), "text or NULL")
_BLOB: Kind = ((bytes,), "a blob")
_BLOB_OR_NULL: Kind = ((bytes, type(None)), "a blob or NULL")
_INT: Kind = ((int,), "an integer")
_REAL: Kind = ((float, int), "a number")
_WHAT = {str: "the text", bytes: "the blob", int: "the integer", float: "the number"}
Columns = tuple[tuple[str, tuple[type, ...], str], ...]


#: The kinds another module of the store names its own columns with (``audit.py``).
TEXT, TEXT_OR_NULL, INT, REAL = _TEXT, _TEXT_OR_NULL, _INT, _REAL


def _columns(names: str, *kinds: Kind) -> Columns:
    return tuple(
        (name.strip(), types, wanted)
        for name, (types, wanted) in zip(names.split(","), kinds, strict=True)
    )


columns = _columns


def check_row(table: str, key: Any, row: Sequence[Any], columns: Columns) -> None:
    """Raise CorruptRecordError if a value of ``row`` is not of its column's type."""
    for value, (column, types, wanted) in zip(row, columns, strict=True):
        if type(value) not in types:
            shown = repr(value)
            if len(shown) > 60:
                shown = shown[:57] + "..."
            raise CorruptRecordError(
                f"{table} row {key!r} is damaged: column {column} holds "
                f"{_WHAT.get(type(value), 'the value')} {shown}, not {wanted}"
            )


def ignore_corrupt(key: str, error: CorruptRecordError) -> None:
    pass


def checked(
    table: str,
    rows: Iterable[Sequence[Any]],
    columns: Columns,
    on_corrupt: Callable[[str, CorruptRecordError], None] | None,
    key: Callable[[Sequence[Any]], Any] = lambda row: row[0],
) -> Iterator[Sequence[Any]]:
    """The rows of the right types; a wrong one raises, or goes to ``on_corrupt(key, error)``."""
    for row in rows:
        try:
            check_row(table, key(row), row, columns)
        except CorruptRecordError as exc:
            if on_corrupt is None:
                raise
            on_corrupt(str(key(row)), exc)
            continue
        yield row


ACTOR_COLUMNS = (
    "actor_id, class_path, init, parent_id, status, stop_reason, fence, lease_owner, "
    "lease_expires, created_at, head_seq"
)
ACTOR_TYPES = _columns(
    ACTOR_COLUMNS,
    _TEXT,
    _TEXT,
    _BLOB,
    _TEXT_OR_NULL,
    _TEXT,
    _TEXT_OR_NULL,
    _INT,
    _TEXT_OR_NULL,
    _REAL,
    _REAL,
    _INT,
)


def actor(row: Sequence[Any]) -> ActorRecord:
    check_row("actors", row[0], row, ACTOR_TYPES)
    return ActorRecord(*row)


def dead_letter(row: Sequence[Any]) -> DeadLetter:
    check_row("dead_letters", row[0], row, DEAD_TYPES)
    return dead_letter_record(row)


MAILBOX_COLUMNS = (
    "seq, msg_id, type, payload, deliver_at, attempts, errors, wants_reply, parks, traceparent"
)
MAILBOX_TYPES = _columns(
    MAILBOX_COLUMNS,
    _INT,
    _TEXT,
    _TEXT,
    _BLOB,
    _REAL,
    _INT,
    _BLOB_OR_NULL,
    _INT,
    _INT,
    _TEXT_OR_NULL,
)


def msg_key(row: Sequence[Any]) -> Any:
    return row[1]


def all_typed(rows: Sequence[Sequence[Any]], columns: Columns) -> bool:
    """Whether every value of ``rows`` has its column's type (checked per column, fast)."""
    for i, (_, types, _) in enumerate(columns):
        for row in rows:
            if type(row[i]) not in types:
                return False
    return True


DEAD_TYPES = _columns(DEAD_COLUMNS, _TEXT, _TEXT, _TEXT, _BLOB, _INT, _BLOB_OR_NULL, _TEXT, _REAL)

EFFECT_TYPES = _columns(
    EFFECT_COLUMNS,
    _TEXT,
    _TEXT,
    _INT,
    _TEXT,
    _TEXT,
    _TEXT,
    _BLOB,
    _TEXT,
    _INT,
    _BLOB_OR_NULL,
    _TEXT_OR_NULL,
    _TEXT_OR_NULL,
    _BLOB_OR_NULL,
    _REAL,
    _REAL,
)


def effect_key(row: Sequence[Any]) -> Any:
    return row[3]


RUNTIME_COLUMNS = "runtime_id, host, pid, started_at"
RUNTIME_TYPES = _columns(RUNTIME_COLUMNS, _TEXT, _TEXT, _INT, _REAL)


def runtime(row: Sequence[Any]) -> RuntimeRecord:
    return RuntimeRecord(*row)
