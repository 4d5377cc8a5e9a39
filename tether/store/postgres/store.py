"""``PostgresStore``: sessions in PostgreSQL, shared by runtimes on many hosts.

Layout of the work, and why:

* ``writers`` connections (1 by default), each on a thread of its own, apply the group
  committer's batches, each in one transaction, exactly once even when its connection breaks
  mid-commit (``writer.py``); the committer's lanes keep one actor's writes on one of them,
  in order (``tether.runtime.lanes``), and with two or more, batches commit at once. A few reader
  connections serve everything else, each read its own snapshot (``reads.py``,
  ``mail.py``). A person's decisions and retention are writes of their own
  (``admin_writes.py``).
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

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg

from tether.errors import ConfigError, StoreError
from tether.store.hosts import hostname_of, runtime_gone
from tether.store.postgres import schema, writes
from tether.store.postgres.admin_writes import AdminWrites
from tether.store.postgres.conn import Conn, Readers, Settings
from tether.store.postgres.dsn import split_schema, split_writers
from tether.store.postgres.mail import MailReads
from tether.store.postgres.notices import Notices, channel_of
from tether.store.postgres.writer import Cursor, Writers
from tether.store.protocol import ChangeFeed
from tether.store.records import Batch, BatchResult
from tether.store.urls import shown

T = TypeVar("T")


class PostgresStore(MailReads, AdminWrites):
    """A store in a PostgreSQL database, shared by every runtime that opens it.

    Args:
        dsn: a libpq URL (``postgresql://user@host:5432/db``) or key=value string. A URL may
            name the schema as ``?schema=NAME`` (tether takes it out before libpq sees it).
        schema: the schema holding the store's tables (default: the connection's default
            schema, usually ``public``); several stores can share a database in schemas of
            their own. Created with the store when missing.
        readers: reader connections (besides the writers'; see docs/operations.md).
        writers: writer connections committing batches concurrently (default 1, or the URL's
            ``?writers=N``; 1 commits one batch after another). One actor's writes always
            commit in submission order, whatever the number.
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
        writers: int | None = None,
        statement_timeout: float = 30.0,
        idle_in_transaction_timeout: float = 10.0,
        retry_for: float = 30.0,
        create: bool = True,
    ) -> None:
        dsn, schema = split_schema(dsn, schema)
        dsn, writers = split_writers(dsn, writers)
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
        self._writers = Writers(self.settings, self.where, count=writers, retry_for=retry_for)
        self._writer = self._writers.first  # the one that sets up the schema and migrates
        #: How many batches the committer may have in flight at once (``tether.runtime.lanes``).
        self.write_lanes = writers
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
            await self._writers.open()
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
        await self._writers.close()

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
        noticed = False  # the last attempt's commit had its notice queued after it

        def write(cur: Cursor) -> BatchResult:  # each attempt starts here (writer.py)
            nonlocal noticed
            noticed = False
            return writes.apply(cur, batch)

        def notice(conn: Conn) -> None:  # after the commit, in its pipeline
            nonlocal noticed
            noticed = self._notices.inline(conn)

        if batch.local:  # concerns no other runtime: no notice (``Batch.local``)
            return await self._writers.run(write, BatchResult, pipelined=True)
        result = await self._writers.run(write, BatchResult, pipelined=True, then=notice)
        if not noticed:
            self._notices.committed()
        return result

    async def _commit(self, fn: Callable[[Cursor], T], result_type: type[T]) -> T:
        """Run ``fn`` in one write transaction, exactly once, with no batch in flight
        (``Writers.alone``); then tell the other processes (``notices.py``)."""
        result = await self._writers.alone(fn, result_type)
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
