"""The PostgreSQL store's reads across every actor (``StoreAdmin``) and of the effects ledger,
approvals and audit log: each one statement on a reader connection, its own snapshot."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

from tether.errors import CorruptRecordError
from tether.store.admin import OnCorrupt
from tether.store.postgres import rows
from tether.store.postgres.conn import Conn, Readers
from tether.store.postgres.writes import SERVER_NOW
from tether.store.records import (
    ActorRecord,
    ApprovalRecord,
    AuditRecord,
    DeadLetter,
    EffectRecord,
    JournalRow,
    RuntimeRecord,
    Snapshot,
    StoredMessage,
)

R = TypeVar("R")


def _fetch(conn: Conn, sql: str, params: Sequence[Any] | dict[str, Any]) -> list[Any]:
    return conn.execute(sql, params).fetchall()


def where(**filters: str | None) -> tuple[str, list[str]]:
    """`` WHERE column = %s AND …`` for each filter given (None: not filtered), and its params."""
    given = {column: value for column, value in filters.items() if value is not None}
    if not given:
        return "", []
    return " WHERE " + " AND ".join(f"{c} = %s" for c in given), list(given.values())


def _decoded(
    found: list[Any],
    decode: Callable[[Any], R],
    key: Callable[[Any], str],
    on_corrupt: OnCorrupt | None,
) -> list[R]:
    out: list[R] = []
    for row in found:
        try:
            out.append(decode(row))
        except CorruptRecordError as exc:
            if on_corrupt is None:
                raise
            on_corrupt(key(row), exc)
    return out


class Reads:
    """The reads of ``PostgresStore`` (which sets ``_readers``)."""

    _readers: Readers

    async def _read(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        return await self._readers.read(_fetch, sql, params)

    async def store_time(self) -> float:
        [(now,)] = await self._read(f"SELECT {SERVER_NOW}")
        return float(now)

    async def get_actor(self, actor_id: str) -> ActorRecord | None:
        found = await self._read(
            f"SELECT {rows.ACTOR_COLUMNS} FROM actors WHERE actor_id = %s", (actor_id,)
        )
        return rows.actor(found[0]) if found else None

    async def list_actors(
        self, *, parent_id: str | None = None, on_corrupt: OnCorrupt | None = None
    ) -> list[ActorRecord]:
        clause, params = where(parent_id=parent_id)
        found = await self._read(
            f"SELECT {rows.ACTOR_COLUMNS} FROM actors{clause} ORDER BY created_at, actor_id",
            params,
        )
        return [rows.actor(r) for r in found]

    async def load_snapshot(self, actor_id: str) -> Snapshot | None:
        found = await self._read(
            "SELECT seq, state FROM snapshots WHERE actor_id = %s", (actor_id,)
        )
        return Snapshot(seq=found[0][0], state=found[0][1]) if found else None

    async def load_journal(self, actor_id: str, after_seq: int, limit: int) -> list[JournalRow]:
        found = await self._read(
            "SELECT seq, payload FROM journal WHERE actor_id = %s AND seq > %s "
            "ORDER BY seq LIMIT %s",
            (actor_id, after_seq, limit),
        )
        return [JournalRow(seq, payload) for seq, payload in found]

    async def pending(
        self, actor_id: str, now: float, limit: int, *, on_corrupt: OnCorrupt | None = None
    ) -> list[StoredMessage]:
        found = await self._read(
            f"SELECT {rows.MAILBOX_COLUMNS} FROM mailbox WHERE actor_id = %s "
            "AND (deliver_at <= %s OR deliver_at = created_at) ORDER BY seq LIMIT %s",
            (actor_id, now, limit),
        )
        return [rows.message(r) for r in found]

    async def list_messages(
        self, actor_id: str, limit: int, *, on_corrupt: OnCorrupt | None = None
    ) -> list[StoredMessage]:
        found = await self._read(
            f"SELECT {rows.MAILBOX_COLUMNS} FROM mailbox WHERE actor_id = %s ORDER BY seq LIMIT %s",
            (actor_id, limit),
        )
        return [rows.message(r) for r in found]

    async def dead_letter(self, msg_id: str) -> DeadLetter | None:
        found = await self._read(
            f"SELECT {rows.DEAD_COLUMNS} FROM dead_letters WHERE msg_id = %s", (msg_id,)
        )
        return rows.dead_letter(found[0]) if found else None

    async def dead_letters(
        self, actor_id: str | None = None, *, on_corrupt: OnCorrupt | None = None
    ) -> list[DeadLetter]:
        clause, params = where(actor_id=actor_id)
        found = await self._read(
            f"SELECT {rows.DEAD_COLUMNS} FROM dead_letters{clause} ORDER BY created_at, msg_id",
            params,
        )
        return [rows.dead_letter(r) for r in found]

    async def list_runtimes(self, *, on_corrupt: OnCorrupt | None = None) -> list[RuntimeRecord]:
        found = await self._read(f"SELECT {rows.RUNTIME_COLUMNS} FROM runtimes ORDER BY runtime_id")
        return [rows.runtime(r) for r in found]

    # -- the effects ledger and approvals --------------------------------------------------------

    async def effects_of(self, actor_id: str, msg_id: str) -> list[EffectRecord]:
        found = await self._read(
            f"SELECT {rows.EFFECT_COLUMNS} FROM effects WHERE actor_id = %s AND msg_id = %s "
            "ORDER BY idx",
            (actor_id, msg_id),
        )
        return [rows.effect(r) for r in found]

    async def find_effects(
        self,
        *,
        actor_id: str | None = None,
        status: str | None = None,
        key: str | None = None,
        on_corrupt: OnCorrupt | None = None,
    ) -> list[EffectRecord]:
        clause, params = where(actor_id=actor_id, status=status, key=key)
        found = await self._read(
            f"SELECT {rows.EFFECT_COLUMNS} FROM effects{clause} "
            "ORDER BY created_at, actor_id, msg_id, idx",
            params,
        )
        return [rows.effect(r) for r in found]

    async def recent_effects(
        self,
        actor_id: str,
        limit: int,
        *,
        after: float | None = None,
        exclude_tools: Collection[str] = (),
    ) -> list[EffectRecord]:
        if limit < 0:
            raise ValueError(f"recent_effects: limit must be >= 0, not {limit}")
        conditions = ["actor_id = %s"]
        params: list[Any] = [actor_id]
        if after is not None:
            conditions.append("created_at > %s")
            params.append(after)
        excluded = sorted(set(exclude_tools))
        if excluded:  # before the LIMIT: an excluded row must not take a kept row's place
            conditions.append("NOT (tool = ANY(%s))")
            params.append(excluded)
        found = await self._read(
            f"SELECT {rows.EFFECT_COLUMNS} FROM effects WHERE {' AND '.join(conditions)} "
            "ORDER BY created_at DESC, msg_id DESC, idx DESC LIMIT %s",
            [*params, limit],
        )
        return [rows.effect(r) for r in reversed(found)]

    async def find_approvals(
        self,
        *,
        status: str | None = None,
        actor_id: str | None = None,
        request_id: str | None = None,
        on_corrupt: OnCorrupt | None = None,
    ) -> list[ApprovalRecord]:
        clause, params = where(status=status, actor_id=actor_id, request_id=request_id)
        found = await self._read(
            f"SELECT request_id, record FROM approvals{clause} ORDER BY created_at, request_id",
            params,
        )
        return _decoded(found, lambda r: rows.approval(r[0], r[1]), lambda r: r[0], on_corrupt)

    async def list_audit(
        self,
        *,
        target: str | None = None,
        actor_id: str | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        if limit < 0:
            raise ValueError(f"list_audit: limit must be >= 0, not {limit}")
        clause, params = where(target=target, actor_id=actor_id)
        args: list[Any] = list(params)
        if before is not None:
            clause += (" AND" if clause else " WHERE") + " seq < %s"
            args.append(before)
        found = await self._read(
            f"SELECT {rows.AUDIT_COLUMNS} FROM audit{clause} ORDER BY seq DESC LIMIT %s",
            [*args, limit],
        )
        return [rows.audit(r) for r in found]
