"""The reads an activation makes — record, snapshot, journal, mail — each as its SQL and the
shaping of its rows: shared by ``SqliteStore``'s single reads and by its ``read_many``, which
runs many of them in one hop to the reader thread (``tether.store.reads``)."""

from __future__ import annotations

import sqlite3
from typing import Any

from tether.errors import CorruptRecordError
from tether.store.admin import OnCorrupt
from tether.store.reads import GetActor, LoadJournal, LoadSnapshot, Pending, Read
from tether.store.records import ActorRecord, JournalRow, Snapshot, StoredMessage
from tether.store.sqlite import rows
from tether.store.sqlite.conn import store_error

GET_ACTOR = f"SELECT {rows.ACTOR_COLUMNS} FROM actors WHERE actor_id = ?"
LOAD_SNAPSHOT = "SELECT seq, state FROM snapshots WHERE actor_id = ?"
LOAD_JOURNAL = (
    "SELECT seq, payload FROM journal WHERE actor_id = ? AND seq > ? ORDER BY seq LIMIT ?"
)
# A deliver_at that is not a number is never "<= now" (SQLite orders text after every number):
# such a row is read too, to be reported, not left waiting unseen.
PENDING = (
    f"SELECT {rows.MAILBOX_COLUMNS} "
    "FROM mailbox WHERE actor_id = ? AND (deliver_at <= ? OR deliver_at = created_at "
    "OR typeof(deliver_at) NOT IN ('real', 'integer')) ORDER BY seq LIMIT ?"
)


def actor(found: list[Any]) -> ActorRecord | None:
    return rows.actor(found[0]) if found else None


def snapshot(found: list[Any]) -> Snapshot | None:
    return Snapshot(seq=found[0][0], state=found[0][1]) if found else None


def journal(found: list[Any]) -> list[JournalRow]:
    return [JournalRow(seq, payload) for seq, payload in found]


def pending(found: list[Any], actor_id: str, on_corrupt: OnCorrupt | None) -> list[StoredMessage]:
    if on_corrupt is not None or not rows.all_typed(found, rows.MAILBOX_TYPES):
        found = list(rows.checked("mailbox", found, rows.MAILBOX_TYPES, on_corrupt, rows.msg_key))
    return [
        StoredMessage(
            msg_id=msg_id,
            actor_id=actor_id,
            type=type_,
            payload=payload,
            deliver_at=deliver_at,
            attempts=attempts,
            errors=rows.decode_errors(errors, msg_id),
            wants_reply=bool(wants_reply),
            seq=seq,
            parks=parks,
            traceparent=traceparent,
        )
        for (
            seq,
            msg_id,
            type_,
            payload,
            deliver_at,
            attempts,
            errors,
            wants_reply,
            parks,
            traceparent,
        ) in found
    ]


def of(read: Read) -> str:
    """What ``read`` reads, as a failed read names it (a damaged page names its actor)."""
    what = {GetActor: "record", LoadSnapshot: "snapshot", LoadJournal: "journal"}.get(
        type(read), "mailbox"
    )
    return f"the {what} of {read.actor_id!r}"


def query(read: Read) -> tuple[str, tuple[Any, ...]]:
    """The statement of one read and its parameters."""
    match read:
        case GetActor(actor_id):
            return GET_ACTOR, (actor_id,)
        case LoadSnapshot(actor_id):
            return LOAD_SNAPSHOT, (actor_id,)
        case LoadJournal(actor_id, after_seq, limit):
            return LOAD_JOURNAL, (actor_id, after_seq, limit)
        case Pending(actor_id, now, limit, _):
            return PENDING, (actor_id, now, limit)
    raise TypeError(f"not a read: {read!r}")


def shape(read: Read, found: list[Any] | sqlite3.Error, path: str) -> object:
    """What the single read returns for the rows ``found``; the error it would raise (its
    statement failed: a damaged page; or a damaged row), in its place."""
    if isinstance(found, sqlite3.Error):
        return store_error(f"read of {of(read)} from {path!r} failed", found)
    try:
        match read:
            case GetActor():
                return actor(found)
            case LoadSnapshot():
                return snapshot(found)
            case LoadJournal():
                return journal(found)
            case Pending(actor_id, _, _, on_corrupt):
                return pending(found, actor_id, on_corrupt)
    except CorruptRecordError as exc:
        return exc
    raise TypeError(f"not a read: {read!r}")
