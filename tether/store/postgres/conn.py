"""A psycopg connection on a thread of its own, its settings, and reconnecting after a fault.

* Each connection lives on one thread (``PgConnection``), as the SQLite store's do: a whole
  transaction runs there as one function, in one thread hop, with psycopg's synchronous API
  (its ``executemany`` pipelines the statements: one round trip for many rows).
* Every connection is set up the same way (``Settings``): TCP keepalives on both ends (a
  peer that vanished is noticed in about a minute, not hours: by the store, and by the
  server, which then frees the dead host's connection slot), ``statement_timeout`` and
  ``idle_in_transaction_session_timeout`` (a stuck statement or an abandoned transaction
  cannot hold locks for ever), the store's schema as ``search_path``. The server's side
  settings are plain ``SET`` commands after connecting, never startup options, so that the
  store works behind PgBouncer in session mode, which refuses unknown startup parameters.
* The idle timeout is also what ends a transaction cut off by a silent network fault (the
  server heard nothing): the writer's retry of that batch waits for it (``writer.py``), so it
  is shorter, by default, than both ``retry_for`` and ``statement_timeout``.
* A connection that broke (its backend terminated, the server restarted, the network cut)
  is dropped and made again on the next call (``call`` retries a read once on a new one).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import anyio
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tether.errors import StoreError, StoreOpenError

T = TypeVar("T")
Conn = psycopg.Connection[tuple[Any, ...]]

#: Connection parameters the store sets unless the URL sets them: keepalives, so that a dead
#: peer is noticed (idle 30 s, then 3 probes 10 s apart), and a bounded connect.
_DEFAULT_PARAMS = {
    "connect_timeout": "10",
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
    "application_name": "tether",
}

#: The same keepalives on the server's end of each connection (seconds, probes): without
#: them a backend whose host vanished holds its connection slot for the operating system's
#: default of two hours, and ``max_connections`` fills with the dead.
_SERVER_KEEPALIVES = {
    "tcp_keepalives_idle": sql.Literal(30),
    "tcp_keepalives_interval": sql.Literal(10),
    "tcp_keepalives_count": sql.Literal(3),
}


@dataclasses.dataclass(frozen=True)
class Settings:
    """How every connection of one store is made.

    Args:
        dsn: the libpq URL or key=value string, without the store's own options.
        schema: the schema the store's tables live in (None: the connection's default, usually
            ``public``).
        statement_timeout: seconds one statement may run (0: no limit).
        idle_in_transaction_timeout: seconds a transaction may sit idle before the server
            ends it and frees its locks (0: no limit).
    """

    dsn: str
    schema: str | None = None
    statement_timeout: float = 30.0
    idle_in_transaction_timeout: float = 10.0

    def conninfo(self) -> str:
        given = conninfo_to_dict(self.dsn)
        extra = {k: v for k, v in _DEFAULT_PARAMS.items() if k not in given}
        return make_conninfo(self.dsn, **extra)

    def connect(self) -> Conn:
        """A new connection, set up; ``psycopg.Error`` if the server cannot be reached."""
        conn = psycopg.connect(self.conninfo(), autocommit=True)
        try:
            for name, seconds in (
                ("statement_timeout", self.statement_timeout),
                ("idle_in_transaction_session_timeout", self.idle_in_transaction_timeout),
            ):
                conn.execute(
                    sql.SQL("SET {} = {}").format(
                        sql.Identifier(name), sql.Literal(f"{int(seconds * 1000)}ms")
                    )
                )
            for name, value in _SERVER_KEEPALIVES.items():
                conn.execute(sql.SQL("SET {} = {}").format(sql.Identifier(name), value))
            if self.schema is not None:
                conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        except BaseException:
            conn.close()
            raise
        return conn


def broken(exc: BaseException, conn: Conn | None) -> bool:
    """Whether ``exc`` left the connection unusable (a fault to reconnect after)."""
    if conn is None or conn.closed or conn.broken:
        return True
    return (
        isinstance(exc, psycopg.OperationalError) and conn.info.status != psycopg.pq.ConnStatus.OK
    )


class PgConnection:
    """One connection and the one thread that uses it, made again after it breaks."""

    def __init__(self, settings: Settings, name: str, where: str) -> None:
        self.settings = settings
        self.where = where
        self.name = name
        self._executor: ThreadPoolExecutor | None = None  # made by open, gone after close
        self.conn: Conn | None = None
        # the server's backend serving ``conn`` directly: its pid and its start, which tell it
        # from a later backend given the same pid. None behind a pooler (PgBouncer gives the
        # client a pid of its own): the server's backend may serve another client later.
        self.backend: tuple[int, Any] | None = None

    def _thread(self) -> ThreadPoolExecutor:
        if self._executor is None:
            raise StoreError(f"store {self.where} is not open")
        return self._executor

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` on the connection's thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._run, fn, args)

    def _run(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        return fn(self.connection(), *args)

    def connection(self) -> Conn:
        """The live connection, made (again) if there is none; on the connection's thread."""
        if self.conn is not None and (self.conn.closed or self.conn.broken):
            self.drop()
        if self.conn is None:
            conn = self.settings.connect()
            try:
                found = conn.execute(
                    "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
                ).fetchone()
                direct = found is not None and found[0] == conn.info.backend_pid
                self.backend = (int(found[0]), found[1]) if found is not None and direct else None
            except BaseException:
                conn.close()
                raise
            self.conn = conn
        return self.conn

    def drop(self) -> None:
        """Forget a broken connection (closing what is left of it); on the connection's thread."""
        conn, self.conn, self.backend = self.conn, None, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """``call`` for a read: after a fault that broke the connection, tried once more on a
        new one (a read changes nothing, so running it twice is safe)."""
        try:
            return await self.call(fn, *args)
        except psycopg.Error as exc:
            if not broken(exc, self.conn):
                raise StoreError(f"read from {self.where} failed: {exc}") from exc
            await self.call_raw(self.drop)
        try:
            return await self.call(fn, *args)
        except psycopg.Error as exc:
            raise StoreError(f"read from {self.where} failed: {exc}") from exc

    async def call_raw(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the connection's thread, without the connection."""
        return await asyncio.get_running_loop().run_in_executor(self._thread(), fn, *args)

    def start(self) -> None:
        """Start the connection's thread (it connects on first use)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"tether-pg-{self.name}"
            )

    async def open(self) -> None:
        """Connect now; ``StoreOpenError`` naming the server if it cannot be reached."""
        self.start()
        try:
            await self.call_raw(self.connection)
        except psycopg.Error as exc:
            raise StoreOpenError(f"cannot open store {self.where}: {exc}") from exc

    async def close(self) -> None:
        """Close the connection on its thread, then let the thread end. Shielded: a cancelled
        close must not leave the connection open."""
        executor = self._executor
        if executor is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                await self.call_raw(self.drop)
            finally:
                self._executor = None
                executor.shutdown(wait=False)


class Readers:
    """A few reader connections, each on its own thread, handed out one per read."""

    def __init__(self, settings: Settings, count: int, where: str) -> None:
        self.all = [PgConnection(settings, f"reader{i}", where) for i in range(count)]
        self._free: asyncio.Queue[PgConnection] | None = None

    async def open(self) -> None:
        self._free = asyncio.Queue()
        for c in self.all:
            c.start()
            self._free.put_nowait(c)

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        if self._free is None:
            raise StoreError("the store is not open")
        conn = await self._free.get()
        try:
            return await conn.read(fn, *args)
        finally:
            self._free.put_nowait(conn)

    async def close(self) -> None:
        self._free = None
        for c in self.all:
            await c.close()
