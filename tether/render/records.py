"""A store's rows as plain views (dicts of JSON values): an actor's summary, its journal
decoded, a mailbox message, an effect, an agent session's ``SessionInfo``.

Everything is read through ``StoreAdmin``, no more than an administration tool may read. A
damaged row is handed to the caller's ``on_corrupt`` (a ``CorruptRows``) and left out; it
never stops the others from being read.
"""

from __future__ import annotations

from typing import Any

import msgspec

import tether
from tether.actors.actor import import_class
from tether.actors.status import actor_status
from tether.render.text import decode, when
from tether.store.admin import StoreAdmin
from tether.store.records import PARKED, ActorRecord, EffectRecord, StoredMessage

#: Mailbox rows read per actor (listing depths and ``show``).
MAILBOX_LIMIT = 100_000
_JOURNAL_CHUNK = 10_000
_INTERNAL_PREFIXES = ("tether.", "breaker:")


class CorruptRows:
    """Damaged rows a reading left out, by key, with the error that names the damage (an
    ``on_corrupt`` callback for the store's listings)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str]] = []

    def __call__(self, key: str, exc: tether.CorruptRecordError) -> None:
        self.rows.append((key, str(exc)))

    def json(self, key: str) -> list[dict[str, str]]:
        """The damaged rows as listing entries: ``{key: ..., "status": "corrupt", ...}``."""
        return [{key: k, "status": "corrupt", "error": err} for k, err in self.rows]


def is_session(record: ActorRecord) -> bool:
    """Whether ``record`` is an agent session: its class is a ``tether.AgentSession``. When the
    class cannot be imported here, an actor spawned with a ``goal`` (as every session is) that
    is not one of tether's internals (``tether.*`` supervisors, ``breaker:*`` breakers,
    ``<session>/...`` guards) counts; a supervisor, spawned without one, does not."""
    try:
        cls = import_class(record.class_path)
    except tether.ConfigError:
        return (
            not record.actor_id.startswith(_INTERNAL_PREFIXES)
            and "/" not in record.actor_id
            and _spawned_with_goal(record.init)
        )
    return bool(getattr(cls, "is_session", False))


def _spawned_with_goal(init: bytes) -> bool:
    try:
        arguments = msgspec.msgpack.decode(init)
    except msgspec.DecodeError:
        return False
    return isinstance(arguments, dict) and isinstance(arguments.get("goal"), str)


async def actor_summary(
    store: StoreAdmin, rec: ActorRecord, now: float, lease_now: float, corrupt: CorruptRows
) -> dict[str, Any]:
    """One actor as a listing shows it. ``now``: this machine's clock, for message times;
    ``lease_now``: the store's, which judges leases."""
    mailbox = await store.list_messages(rec.actor_id, MAILBOX_LIMIT, on_corrupt=corrupt)
    return {
        "id": rec.actor_id,
        "class": rec.class_path,
        "parent": rec.parent_id,
        # The same word as ``tether tree``'s (an ``ActorStatus``): an administration process holds
        # no supervisor, so an actor the store says is active is ``running`` here.
        "status": actor_status(rec.status),
        "stop_reason": rec.stop_reason,
        "mailbox": len(mailbox),
        "parked": sum(is_parked(m, now) for m in mailbox),
        "journal": await journal_length(store, rec.actor_id),
        "lease_owner": rec.lease_owner,
        "lease_expires": rec.lease_expires if rec.lease_owner else None,
        "lease_live": bool(rec.lease_owner) and rec.lease_expires > lease_now,
        "fence": rec.fence,
        "created_at": rec.created_at,
    }


def lease_text(summary: dict[str, Any]) -> str:
    """An ``actor_summary``'s lease: its owner, and whether the lease has expired."""
    if not summary["lease_owner"]:
        return "-"
    return str(summary["lease_owner"]) + ("" if summary["lease_live"] else " (expired)")


async def journal_length(store: StoreAdmin, actor_id: str) -> int:
    """The number of events ever journaled (the journal is never truncated; a snapshot at seq
    N stands for events 1..N, so only the rows after the latest snapshot are read)."""
    snap = await store.load_snapshot(actor_id)
    seq = snap.seq if snap is not None else 0
    while True:
        rows = await store.load_journal(actor_id, seq, _JOURNAL_CHUNK)
        if rows:
            seq = rows[-1].seq
        if len(rows) < _JOURNAL_CHUNK:
            return seq


async def journal_after(store: StoreAdmin, actor_id: str, seq: int) -> list[tuple[int, Any]]:
    """The journal's events after ``seq``, decoded, as ``(seq, event)`` in order."""
    out: list[tuple[int, Any]] = []
    while True:
        rows = await store.load_journal(actor_id, seq, _JOURNAL_CHUNK)
        out.extend((row.seq, decode(row.payload)) for row in rows)
        if rows:
            seq = rows[-1].seq
        if len(rows) < _JOURNAL_CHUNK:
            return out


async def session_view(
    rt: tether.Runtime, rec: ActorRecord, corrupt: CorruptRows
) -> dict[str, Any] | None:
    """An agent session's ``rt.session_info``, from its committed journal (None for another
    actor, or a class this process cannot import)."""
    if not is_session(rec):
        return None
    try:
        return msgspec.to_builtins(await rt.session_info(rec.actor_id))  # type: ignore[no-any-return]
    except tether.CorruptRecordError as exc:
        corrupt(rec.actor_id, exc)
    except tether.ConfigError:  # not importable here: the journal is shown raw
        pass
    return None


def is_parked(m: StoredMessage, now: float) -> bool:
    """Set aside while its step waits for a person: for good (``PARKED``) or until a deadline
    (an approval's, a breaker's retry time)."""
    return m.deliver_at >= PARKED or (m.parks > 0 and m.deliver_at > now)


def message_view(m: StoredMessage, now: float) -> dict[str, Any]:
    """A mailbox message, with its state in words (due, parked, parked until ...)."""
    if m.deliver_at >= PARKED:
        state = "parked"
    elif is_parked(m, now):
        state = f"parked until {when(m.deliver_at, now)}"
    elif m.deliver_at > now:
        state = f"due {when(m.deliver_at, now)}"
    else:
        state = "due"
    return {
        "msg_id": m.msg_id,
        "type": m.type,
        "attempts": m.attempts,
        "parks": m.parks,
        "parked": is_parked(m, now),
        "deliver_at": None if m.deliver_at >= PARKED else m.deliver_at,
        "state": state,
        "wants_reply": m.wants_reply,
        "errors": list(m.errors),
        "last_error": m.errors[-1] if m.errors else None,
        "payload": decode(m.payload),
    }


def effect_view(e: EffectRecord) -> dict[str, Any]:
    """A row of the effects ledger, its arguments and result decoded."""
    return {
        "key": e.key,
        "msg_id": e.msg_id,
        "index": e.idx,
        "tool": e.tool,
        "status": e.status,
        "attempts": e.attempts,
        "args": decode(e.args),
        "result": decode(e.result) if e.result is not None else None,
        "error": e.error,
        "reason": e.reason,
        "history": list(e.history),
        "created_at": e.created_at,
        "updated_at": e.updated_at,
    }
