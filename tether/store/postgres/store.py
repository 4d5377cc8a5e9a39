"""``PostgresStore``: sessions in PostgreSQL, shared by runtimes on many hosts.

Layout of the work, and why:

* One writer connection on a thread of its own applies each group-commit batch in one
  transaction, exactly once even when its connection breaks mid-commit (``writer.py``); a few
  reader connections serve everything else, each read its own snapshot (``reads.py``).
* Fencing is checked inside every write transaction, on rows locked ``FOR SHARE``
  (``writes.py``); leases are judged on the server's clock (``clock_timestamp()``), so
  runtimes on hosts whose clocks disagree agree on who holds a lease; claims of free or
  expired leases take rows ``FOR UPDATE SKIP LOCKED``.
* The message scan is a chain of transaction snapshots, not a sequence watermark
  (``cursor.py``): a message whose transaction commits after a later one was read is still
  returned.
* The schema is numbered migrations under an advisory lock (``schema.py``); a store of
  another version is refused (``SchemaVersionError``), never migrated silently.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgspec
import psycopg

from tether.errors import ConfigError, StoreError
from tether.store.hosts import hostname_of, runtime_gone
from tether.store.postgres import cursor as scan
from tether.store.postgres import rows, schema, writes
from tether.store.postgres.conn import Conn, Readers, Settings
from tether.store.postgres.notices import Notices, channel_of
from tether.store.postgres.reads import Reads, _fetch
from tether.store.postgres.writer import Cursor, Writer
from tether.store.protocol import ChangeFeed
from tether.store.records import (
    ActorRecord,
    ApprovalRecord,
    AuditRecord,
    Batch,
    BatchResult,
    DeadLetter,
    EffectRecord,
    MessageCursor,
    MessagePage,
    NewMessage,
    Reply,
    ScannedMessage,
)
from tether.store.reuse import PREDECESSOR_ROWS, UNSETTLED, left_in_mailbox, reuse_blockers
from tether.store.urls import shown


def split_schema(dsn: str, schema: str | None) -> tuple[str, str | None]:
    """The libpq URL without tether's own ``schema`` query parameter, and the schema (the URL's,
    or ``schema``); ``ConfigError`` if both name one and they differ."""
    if "://" not in dsn:
        return dsn, schema
    parts = urllib.parse.urlsplit(dsn)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    named = [v for k, v in query if k == "schema"]
    if not named:
        return dsn, schema
    if len(named) > 1 or (schema is not None and schema != named[0]):
        raise ConfigError(f"the store URL {shown(dsn)!r} and schema={schema!r} name two schemas")
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k != "schema"])
    return urllib.parse.urlunsplit(parts._replace(query=rest)), named[0]


def with_schema(dsn: str, schema: str) -> str:
    """The URL ``dsn`` naming ``schema`` (``?schema=``)."""
    parts = urllib.parse.urlsplit(dsn)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "schema"]
    return urllib.parse.urlunsplit(
        parts._replace(query=urllib.parse.urlencode([*query, ("schema", schema)]))
    )


T = TypeVar("T")


class PostgresStore(Reads):
    """A store in a PostgreSQL database, shared by every runtime that opens it.

    Args:
        dsn: a libpq URL (``postgresql://user@host:5432/db``) or key=value string. A URL may
            name the schema as ``?schema=NAME`` (tether takes it out before libpq sees it).
        schema: the schema holding the store's tables (default: the connection's default
            schema, usually ``public``); several stores can share a database in schemas of
            their own. Created with the store when missing.
        readers: reader connections (besides the writer's; see docs/operations.md).
        statement_timeout: seconds one statement may run before the server cancels it.
        idle_in_transaction_timeout: seconds an open transaction may idle before the server
            ends it, freeing its locks.
        retry_for: seconds a write keeps retrying while the server is unreachable (a
            restart, a failover) before it raises ``StoreError``.
        create: False refuses to create the schema of a new store (a tool that only
            administers stores).
    """

    immediate: None = None  # every write waits for the server

    def __init__(
        self,
        dsn: str,
        *,
        schema: str | None = None,
        readers: int = 2,
        statement_timeout: float = 30.0,
        idle_in_transaction_timeout: float = 60.0,
        retry_for: float = 30.0,
        create: bool = True,
    ) -> None:
        dsn, schema = split_schema(dsn, schema)
        if not isinstance(readers, int) or readers < 1:
            raise ConfigError(f"readers must be an integer >= 1, not {readers!r}")
        if schema is not None and (not isinstance(schema, str) or not schema):
            raise ConfigError(f"schema must be a non-empty name, not {schema!r}")
        for name, value in (
            ("statement_timeout", statement_timeout),
            ("idle_in_transaction_timeout", idle_in_transaction_timeout),
            ("retry_for", retry_for),
        ):
            if not isinstance(value, int | float) or value < 0:
                raise ConfigError(f"{name} must be a number of seconds >= 0, not {value!r}")
        self.dsn = dsn
        self.schema = schema
        self.create = create
        self.where = repr(shown(dsn)) + (f" (schema {schema!r})" if schema else "")
        self.settings = Settings(
            dsn,
            schema=schema,
            statement_timeout=statement_timeout,
            idle_in_transaction_timeout=idle_in_transaction_timeout,
        )
        self.retry_for = retry_for
        self._writer = Writer(self.settings, self.where, retry_for=retry_for)
        self._readers = Readers(self.settings, readers, self.where)
        self._notices = Notices(self.settings, self._writer.conn)
        self._open = False

    @property
    def changes(self) -> ChangeFeed:
        """Other processes' writes, by LISTEN/NOTIFY (``notices.py``)."""
        return self._notices

    # -- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        try:
            await self._writer.open()
            await self._writer.conn.call(self._ensure_schema)
            await self._readers.open()
        except psycopg.Error as exc:
            await self.close()
            raise StoreError(f"cannot open store {self.where}: {exc}") from exc
        except BaseException:
            await self.close()
            raise
        self._open = True

    def _ensure_schema(self, conn: Conn) -> None:
        if self.schema is not None and self.create:
            conn.execute(
                psycopg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                    psycopg.sql.Identifier(self.schema)
                )
            )
        name = self._schema_name(conn)
        schema.ensure_schema(conn, self.where, name, create=self.create)
        self._notices.channel = channel_of(name)

    def _schema_name(self, conn: Conn) -> str:
        row = conn.execute("SELECT current_schema()").fetchone()
        if row is None or row[0] is None:
            raise StoreError(f"store {self.where}: schema {self.schema!r} does not exist")
        return str(row[0])

    async def close(self) -> None:
        self._open = False
        await self._notices.close()
        await self._readers.close()
        await self._writer.close()

    async def migrate(self, *, force: bool = False) -> tuple[int, int]:
        if self._open:
            raise StoreError(f"store {self.where} is open: migrate it before opening it")
        try:
            await self._writer.open()
            return await self._writer.conn.call(self._migrate, force)
        except psycopg.Error as exc:
            raise StoreError(f"store {self.where} not migrated: {exc}") from exc
        finally:
            await self._writer.close()

    def _migrate(self, conn: Conn, force: bool) -> tuple[int, int]:
        if self.schema is not None:
            conn.execute(
                psycopg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                    psycopg.sql.Identifier(self.schema)
                )
            )
        in_use: list[str] = []
        if not force and conn.execute("SELECT to_regclass('runtimes') IS NOT NULL").fetchone() == (
            True,
        ):
            in_use = [
                f"{runtime_id} (pid {pid} on {hostname_of(host)})"
                for runtime_id, host, pid, started in conn.execute(
                    "SELECT runtime_id, host, pid, started_at FROM runtimes"
                ).fetchall()
                if not runtime_gone(host, pid, started)
            ]
        return schema.migrate(conn, self.where, self._schema_name(conn), in_use)

    # -- the batch ----------------------------------------------------------------------------

    async def apply(self, batch: Batch) -> BatchResult:
        return await self._commit(lambda cur: writes.apply(cur, batch), BatchResult)

    async def _commit(self, fn: Callable[[Cursor], T], result_type: type[T]) -> T:
        """Run ``fn`` in one write transaction, exactly once (``writer.py``); then tell the
        other processes (``notices.py``)."""
        result = await self._writer.run(fn, result_type)
        self._notices.committed()
        return result

    async def _write(self, sql_params: list[tuple[str, Sequence[Any]]]) -> list[int]:
        """A small write outside the group committer: each statement's changed-row count."""

        def statements(cur: Cursor) -> list[int]:
            counts = []
            for sql, params in sql_params:
                cur.execute(sql, params)
                counts.append(cur.rowcount)
            return counts

        return await self._commit(statements, list[int])

    # -- mail ---------------------------------------------------------------------------------

    async def scan_messages(
        self,
        cursor: MessageCursor | None,
        now: float,
        limit: int,
        *,
        skip_prefix: str | None = None,
    ) -> MessagePage:
        band = scan.decode(cursor)
        messages: list[ScannedMessage] = []
        while True:
            found = await self._scan_band(band, now, limit - len(messages), skip_prefix)
            hi = str(found[0][5])
            messages += [
                ScannedMessage(actor_id, msg_id, bool(restored))
                for actor_id, msg_id, restored, _, _, _ in found
                if msg_id is not None
            ]
            if len(messages) >= limit:  # the band goes on past this page
                last = found[-1]
                after = (int(last[3]), int(last[4]))
                return MessagePage(messages, scan.Band(band.lo, hi, after).encode(), True)
            if band.hi is None:  # a band read whole, up to now
                return MessagePage(messages, scan.Band(hi).encode(), False)
            band = scan.Band(hi)  # the end of a band read part-way: on to now, in this call

    async def _scan_band(
        self, band: scan.Band, now: float, limit: int, skip_prefix: str | None
    ) -> list[Any]:
        params: dict[str, Any] = {"now": now, "limit": limit, "lo": band.lo, "hi": band.hi}
        if band.after is not None:
            params["xid"], params["seq"] = str(band.after[0]), band.after[1]
        if skip_prefix:
            params["skip"], params["skip_len"] = skip_prefix, len(skip_prefix)
        return await self._readers.read(_fetch, scan.band_sql(band, skip=bool(skip_prefix)), params)

    async def due_between(self, after: float, upto: float) -> list[str]:
        found = await self._read(
            "SELECT DISTINCT actor_id FROM mailbox WHERE deliver_at > %s AND deliver_at <= %s "
            "AND deliver_at > created_at",
            (after, upto),
        )
        return [r[0] for r in found]

    async def orphaned(self, now: float, limit: int) -> list[str]:
        found = await self._read(
            "SELECT DISTINCT m.actor_id FROM mailbox m JOIN actors a ON a.actor_id = m.actor_id "
            "WHERE (m.deliver_at <= %s OR m.deliver_at = m.created_at) AND a.status = 'active' "
            f"AND (a.lease_owner IS NULL OR a.lease_expires < {writes.SERVER_NOW} "
            "OR NOT EXISTS (SELECT 1 FROM runtimes r WHERE r.runtime_id = a.lease_owner)) "
            "LIMIT %s",
            (now, limit),
        )
        return [r[0] for r in found]

    async def get_replies(self, msg_ids: list[str]) -> list[Reply]:
        if not msg_ids:
            return []
        found = await self._read(
            "SELECT msg_id, ok, payload FROM replies WHERE msg_id = ANY(%s)", (msg_ids,)
        )
        return [Reply(msg_id=m, ok=ok, payload=p) for m, ok, p in found]

    async def find_dedup(self, actor_id: str, dedup_key: str) -> str | None:
        found = await self._read(
            "SELECT msg_id FROM dedup WHERE actor_id = %s AND dedup_key = %s",
            (actor_id, dedup_key),
        )
        return str(found[0][0]) if found else None

    async def watchers(self, actor_id: str) -> list[str]:
        found = await self._read(
            "SELECT watcher FROM watches WHERE watched = %s ORDER BY watcher", (actor_id,)
        )
        return [r[0] for r in found]

    # -- leases and runtimes ------------------------------------------------------------------

    async def renew_leases(self, owner: str, ttl: float) -> None:
        await self._write(
            [
                (
                    f"UPDATE actors SET lease_expires = {writes.SERVER_NOW} + %s "
                    "WHERE lease_owner = %s",
                    (ttl, owner),
                )
            ]
        )

    async def register_runtime(self, runtime_id: str, host: str, pid: int, started: float) -> None:
        await self._write(
            [
                (
                    "INSERT INTO runtimes (runtime_id, host, pid, started_at) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT (runtime_id) DO UPDATE SET "
                    "host = excluded.host, pid = excluded.pid, started_at = excluded.started_at",
                    (runtime_id, host, pid, started),
                )
            ]
        )

    async def remove_runtime(self, runtime_id: str) -> None:
        await self._write(
            [
                ("DELETE FROM runtimes WHERE runtime_id = %s", (runtime_id,)),
                (
                    "UPDATE actors SET lease_owner = NULL, lease_expires = 0 "
                    "WHERE lease_owner = %s",
                    (runtime_id,),
                ),
            ]
        )

    # -- dead letters and retention -----------------------------------------------------------

    async def reuse_id(self, record: ActorRecord, *, dependents: Sequence[str] = ()) -> list[str]:
        return await self._commit(lambda cur: _reuse_id(cur, record, list(dependents)), list[str])

    async def retry_dead_letter(
        self, msg_id: str, now: float, *, audit: AuditRecord | None = None
    ) -> DeadLetter | None:
        letter = await self.dead_letter(msg_id)
        if letter is None:
            return None

        def move(cur: Cursor) -> bool:
            # parks = 1: its past in the ledger is read again; a new seq and transaction id:
            # ready again for every runtime's scan.
            cur.execute(
                "INSERT INTO mailbox (msg_id, actor_id, type, payload, deliver_at, attempts, "
                "errors, wants_reply, created_at, parks) SELECT msg_id, actor_id, type, "
                "payload, %s, 0, NULL, FALSE, %s, 1 FROM dead_letters WHERE msg_id = %s",
                (now, now, msg_id),
            )
            if cur.rowcount != 1:
                return False
            cur.execute("DELETE FROM dead_letters WHERE msg_id = %s", (msg_id,))
            cur.execute("DELETE FROM replies WHERE msg_id = %s", (msg_id,))
            _append_audit(cur, audit)
            return True

        return letter if await self._commit(move, bool) else None

    async def discard_dead_letter(self, msg_id: str, *, audit: AuditRecord | None = None) -> bool:
        def delete(cur: Cursor) -> bool:
            cur.execute("DELETE FROM dead_letters WHERE msg_id = %s", (msg_id,))
            if cur.rowcount != 1:
                return False
            _append_audit(cur, audit)
            return True

        return await self._commit(delete, bool)

    async def purge(self, before: float) -> int:
        counts = await self._write(
            [
                ("DELETE FROM dedup WHERE created_at < %s", (before,)),
                ("DELETE FROM replies WHERE created_at < %s", (before,)),
            ]
        )
        return sum(counts)

    # -- the effects ledger (I4), approvals (I9) and the audit log ------------------------------

    async def resolve_effect(
        self, key: str, record: EffectRecord, now: float, *, audit: AuditRecord | None = None
    ) -> EffectRecord | None:
        def resolve(cur: Cursor) -> bool:
            cur.execute(
                "SELECT msg_id FROM effects WHERE key = %s AND status = 'quarantined' FOR UPDATE",
                (key,),
            )
            found = cur.fetchall()
            if not found:
                return False
            cur.execute(writes.UPSERT_EFFECT, rows.effect_row(record))
            writes.unpark(cur, found[0][0], now)
            _append_audit(cur, audit)
            return True

        return record if await self._commit(resolve, bool) else None

    async def unpark(self, msg_id: str, now: float) -> bool:
        return await self._commit(lambda cur: writes.unpark(cur, msg_id, now), bool)

    async def update_approval(
        self,
        record: ApprovalRecord,
        expected_version: int,
        *,
        audit: AuditRecord | None = None,
        notices: Sequence[NewMessage] = (),
    ) -> bool:
        def swap(cur: Cursor) -> bool:
            cur.execute(
                "UPDATE approvals SET status = %s, version = %s, record = %s "
                "WHERE request_id = %s AND version = %s",
                (
                    record.status,
                    record.version,
                    msgspec.msgpack.encode(record),
                    record.request_id,
                    expected_version,
                ),
            )
            if cur.rowcount != 1:
                return False
            if record.status != "pending":
                writes.unpark(cur, record.msg_id, record.decided_at or 0.0)
            if notices:
                writes.insert_messages(cur, list(notices), BatchResult())
            _append_audit(cur, audit)
            return True

        return await self._commit(swap, bool)

    async def append_audit(self, record: AuditRecord) -> int:
        return await self._commit(lambda cur: _append_audit(cur, record), int)

    async def purge_receipts(self, before: float) -> int:
        [count] = await self._write(
            [
                (
                    "DELETE FROM effects WHERE status IN ('done', 'failed', 'aborted') "
                    "AND updated_at < %s AND NOT EXISTS "
                    "(SELECT 1 FROM mailbox WHERE mailbox.msg_id = effects.msg_id)",
                    (before,),
                )
            ]
        )
        return count


def _append_audit(cur: Cursor, record: AuditRecord | None) -> int:
    """Append ``record`` (if any) in the transaction of ``cur``; its seq (0 for none)."""
    if record is None:
        return 0
    cur.execute(
        f"INSERT INTO audit ({rows.AUDIT_FIELDS}) VALUES ({', '.join(['%s'] * 13)}) RETURNING seq",
        rows.audit_row(record),
    )
    row = cur.fetchone()
    return int(row[0]) if row is not None else 0


def _reuse_id(cur: Cursor, record: ActorRecord, dependents: list[str]) -> list[str]:
    """``Store.reuse_id`` in the transaction of ``cur``: what stands in the way, or ``[]``."""
    actor_id = record.actor_id
    cur.execute("SELECT status FROM actors WHERE actor_id = %s FOR UPDATE", (actor_id,))
    found = cur.fetchall()
    status = found[0][0] if found else None
    unsettled: list[Any] = []
    if status not in (None, "active"):
        cur.execute(
            "SELECT key, tool, status FROM effects WHERE actor_id = %s AND status = ANY(%s) "
            "ORDER BY created_at, msg_id, idx",
            (actor_id, list(UNSETTLED)),
        )
        unsettled = cur.fetchall()
    blockers = reuse_blockers(actor_id, status, unsettled)
    if blockers:
        return blockers
    ids = [actor_id, *dependents]
    for table, column in PREDECESSOR_ROWS:
        cur.execute(f"DELETE FROM {table} WHERE {column} = ANY(%s)", (ids,))
    if dependents:
        cur.execute(
            "UPDATE actors SET fence = fence + 1, lease_owner = NULL, lease_expires = 0, "
            "head_seq = 0 WHERE actor_id = ANY(%s)",
            (dependents,),
        )
    cur.execute("SELECT msg_id FROM mailbox WHERE actor_id = %s ORDER BY seq", (actor_id,))
    left = cur.fetchall()
    if left:
        why = left_in_mailbox(actor_id)
        writes.dead_letter(cur, [(m, why, record.created_at) for (m,) in left])
    cur.execute(
        "UPDATE actors SET class_path = %s, init = %s, parent_id = %s, status = 'active', "
        "stop_reason = NULL, lease_owner = NULL, lease_expires = 0, created_at = %s, "
        "head_seq = 0 WHERE actor_id = %s",
        (record.class_path, record.init, record.parent_id, record.created_at, actor_id),
    )
    return []
