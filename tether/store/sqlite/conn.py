"""An SQLite connection on a thread of its own, and the transaction shape every write uses.

* Each connection lives on its own thread (``Connection``), and a call onto it is one thread
  hop (tens of µs of event-loop time, and latency): so every transaction runs there whole, as
  one function, and costs one hop whatever its size.
* A transaction is written against aiosqlite-shaped calls (``await db.executemany(...)``) on a
  ``Tx``, whose methods never wait: the connection's thread runs the coroutine to its end in
  one go (``run_inline``).
* Hot rows go in multi-row statements (``Tx.execute_rows``): every ``sqlite3_step`` releases
  and retakes the GIL, and each retake can wait for a busy event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
import sqlite3
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import anyio

from tether.errors import CorruptRecordError, StoreError, StoreOpenError

CHUNK = 500  # rows per IN (...) list: well under SQLite's bound-parameter limit


def store_error(what: str, exc: sqlite3.Error) -> StoreError:
    """A StoreError for a failed statement; CorruptRecordError when the file is damaged."""
    damaged = getattr(exc, "sqlite_errorname", "") in ("SQLITE_CORRUPT", "SQLITE_NOTADB")
    return (CorruptRecordError if damaged else StoreError)(f"{what}: {exc}")


def chunks(items: Sequence[Any], size: int = CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


T = TypeVar("T")

# Rows per multi-row statement, at most (and as many as the connection's bound-parameter limit
# allows: 999 before SQLite 3.32, 32766 since). Every statement releases and retakes the GIL,
# and each retake can wait for the busy event loop: the fewer per batch, the shorter it holds
# the write lock. 1024 rows of the widest hot row (8 columns) is a 27 kB statement.
_MAX_ROWS = 1024  # rows per multi-row statement


def _ladder(n: int, top: int) -> Iterator[tuple[int, int]]:
    """``(start, size)`` slices covering ``n`` rows: slices of ``top``, then the rest in
    decreasing powers of two, so that a handful of statement shapes (each prepared once, then
    taken from the connection's statement cache) serve any ``n``."""
    i = 0
    while n - i >= top:
        yield i, top
        i += top
    size = top
    while i < n:
        size >>= 1
        if n - i >= size:
            yield i, size
            i += size


@functools.lru_cache(maxsize=512)
def _rows_sql(head: str, row: str, tail: str, count: int) -> str:
    return head + ",".join([row] * count) + tail


def _per_statement(row: str, max_params: int) -> int:
    """The largest power of two of rows of ``row`` one statement can bind."""
    fits = min(_MAX_ROWS, max_params // max(1, row.count("?")))
    return 1 << (fits.bit_length() - 1)


class Rows:
    """A finished statement's rows, with aiosqlite's cursor reads."""

    __slots__ = ("rowcount", "rows")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self.rows = rows
        self.rowcount = rowcount

    async def fetchone(self) -> Any:
        return self.rows[0] if self.rows else None

    async def fetchall(self) -> list[Any]:
        return self.rows


class Tx:
    """A connection as seen from its own thread, with aiosqlite's call shapes. Nothing here
    waits, so a coroutine that awaits only these runs to its end in one ``run_inline``."""

    __slots__ = ("conn", "max_params")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.max_params = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        cur = self.conn.execute(sql, params)
        return Rows(cur.fetchall(), cur.rowcount)

    async def executemany(self, sql: str, params: Iterable[Sequence[Any]]) -> int:
        """Run ``sql`` once per row of ``params``; the number of rows it changed in all."""
        return self.conn.executemany(sql, params).rowcount

    async def execute_fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return self.conn.execute(sql, params).fetchall()

    async def execute_rows(
        self, head: str, row: str, rows: Sequence[Sequence[Any]], tail: str = ""
    ) -> list[Any]:
        """``head`` + ``row`` repeated once per row, comma-separated, + ``tail``, over ``rows``
        (e.g. a multi-row ``INSERT … VALUES`` or an ``IN (…)`` list), in as few statements as
        the parameter limit allows, in order; returns the rows they produce.

        The same work as ``executemany`` with far fewer ``sqlite3_step`` calls: each one
        releases and retakes the GIL, and while the event loop is busy every retake can wait
        for it. With the loop busy, ``executemany`` of single rows runs several times slower.
        """
        out: list[Any] = []
        conn = self.conn
        flat = list(itertools.chain.from_iterable(rows))
        width = len(rows[0]) if rows else 0
        for start, count in _ladder(len(rows), _per_statement(row, self.max_params)):
            sql = _rows_sql(head, row, tail, count)
            out.extend(conn.execute(sql, flat[start * width : (start + count) * width]).fetchall())
        return out

    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction


def run_inline(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never waits (it awaits ``Tx`` calls only) to its end, here."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a store transaction tried to wait for something")


class Connection:
    """One ``sqlite3`` connection and the one thread that uses it. ``call`` runs a function
    there (one thread hop); the aiosqlite-shaped methods are for one-off statements."""

    def __init__(self, executor: ThreadPoolExecutor, conn: sqlite3.Connection) -> None:
        self._executor = executor
        self.conn = conn
        self.tx = Tx(conn)

    @classmethod
    async def open(cls, path: str, name: str) -> Connection:
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"tether-sqlite-{name}")
        loop = asyncio.get_running_loop()
        try:
            conn = await loop.run_in_executor(executor, _open_connection, path)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(executor, conn)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def transaction(self, fn: Callable[[Tx], Coroutine[Any, Any, T]]) -> T:
        """Run ``fn(tx)`` inside ``BEGIN IMMEDIATE`` … ``COMMIT`` on the connection's thread, all
        of it in one hop; any error rolls back."""
        return await self.call(self._transaction, fn)

    def _transaction(self, fn: Callable[[Tx], Coroutine[Any, Any, T]]) -> T:
        conn = self.conn
        if conn.in_transaction:  # a ROLLBACK that failed earlier: never build on a leftover
            conn.execute("ROLLBACK")
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = run_inline(fn(self.tx))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # the first error is the one to report
                    conn.execute("ROLLBACK")
            raise
        return result

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        return await self.call(run_inline_fn, self.tx.execute, sql, params)

    async def execute_fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return await self.call(_fetchall, self.conn, sql, params)

    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction

    async def close(self) -> None:
        """Close the connection on its thread (after whatever is queued there), then let the
        thread end. Shielded: a cancelled close must not leave the connection open."""
        with anyio.CancelScope(shield=True):
            try:
                await self.call(self.conn.close)
            finally:
                self._executor.shutdown(wait=False)


def _create_private(path: Path) -> None:
    """Create an empty store file that only its owner may read or write (0600, less whatever
    the umask takes away): it holds customer data, and SQLite would create it 0644. The
    ``-wal`` and ``-shm`` files SQLite makes beside it take the main file's mode. An existing
    file is left as it is, its mode too: that is its owner's choice. (An empty file is an
    empty SQLite database, whose schema ``open`` writes.)"""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # created meanwhile by someone else, with the mode they chose
        return
    os.close(fd)


def _open_connection(path: str) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None, check_same_thread=False)


def _fetchall(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[Any]:
    return conn.execute(sql, params).fetchall()


def _fetch_each(
    conn: sqlite3.Connection, queries: Sequence[tuple[str, Sequence[Any]]]
) -> list[list[Any] | sqlite3.Error]:
    """Each statement's rows, or the error it alone failed with (a damaged page is one
    actor's: the others are still read)."""
    out: list[list[Any] | sqlite3.Error] = []
    for sql, params in queries:
        try:
            out.append(conn.execute(sql, params).fetchall())
        except sqlite3.Error as exc:
            out.append(exc)
    return out


def run_inline_fn(fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
    return run_inline(fn(*args))


class Database:
    """One SQLite file, opened: a writer connection, and a reader connection beside it (WAL
    lets it read while the writer writes). On ``":memory:"`` there is one connection, so reads
    queue behind whole batches on its thread and never see half of one."""

    def __init__(self, path: str, *, synchronous: str, create: bool) -> None:
        self.path = path
        self.synchronous = synchronous
        self.create = create
        self.writer: Connection | None = None
        self.reader: Connection | None = None

    async def open(self, ensure_schema: Callable[[Tx], Coroutine[Any, Any, None]]) -> None:
        """Connect, set WAL and the durability, then run ``ensure_schema`` on the writer."""
        if self.path != ":memory:":
            await anyio.to_thread.run_sync(self._check_path)
        try:
            self.writer = await self._connect("writer")
            await self.writer.call(run_inline_fn, ensure_schema, self.writer.tx)
            self.reader = self.writer if self.path == ":memory:" else await self._connect("reader")
        except sqlite3.DatabaseError as exc:
            await self.close()
            raise StoreOpenError(f"cannot open store {self.path!r}: {exc}") from exc
        except BaseException:
            await self.close()
            raise

    def _check_path(self) -> None:
        """Clear errors for a missing folder or store, or an unwritable file, before SQLite's
        own (which would create a missing file)."""
        path = Path(self.path)
        folder = path.resolve().parent
        if not self.create and not path.exists():
            raise StoreOpenError(f"no store at {self.path!r}")
        if not folder.is_dir():
            raise StoreOpenError(f"cannot open store {self.path!r}: folder {folder} does not exist")
        if path.is_dir():
            raise StoreOpenError(f"cannot open store {self.path!r}: it is a directory")
        if not self.create and path.stat().st_size == 0:
            raise StoreOpenError(f"{self.path!r} is an empty file, not a tether store")
        if path.exists() and not os.access(path, os.R_OK | os.W_OK):
            raise StoreOpenError(f"cannot open store {self.path!r}: the file is not writable")
        if not path.exists() and not os.access(folder, os.W_OK):
            raise StoreOpenError(
                f"cannot create store {self.path!r}: folder {folder} is not writable"
            )
        if not path.exists():
            _create_private(path)

    async def _connect(self, name: str) -> Connection:
        db = await Connection.open(self.path, name)
        try:
            await db.execute("PRAGMA busy_timeout = 30000")
            if self.path != ":memory:":
                mode = await (await db.execute("PRAGMA journal_mode = WAL")).fetchone()
                if mode is None or str(mode[0]).lower() != "wal":
                    raise StoreOpenError(f"cannot switch {self.path!r} to WAL mode")
            await db.execute(f"PRAGMA synchronous = {self.synchronous}")
            # Check each b-tree cell's size and place as its page is read: a damaged page
            # (cell pointers overwritten) is then an SQLITE_CORRUPT error, where unchecked it
            # can read as a page with fewer rows, and a journal as one with fewer events.
            await db.execute("PRAGMA cell_size_check = ON")
        except BaseException:
            # Not in self.writer/reader yet, so close() would miss it.
            await db.close()
            raise
        return db

    async def close(self) -> None:
        for db in {id(c): c for c in (self.reader, self.writer) if c is not None}.values():
            await db.close()
        self.reader = self.writer = None

    def w(self) -> Connection:
        """The writer connection; ``StoreError`` if the store is not open."""
        if self.writer is None:
            raise StoreError(f"store {self.path!r} is not open")
        return self.writer

    async def read(self, sql: str, params: Sequence[Any] = (), *, of: str = "") -> list[Any]:
        """The rows of one statement on the reader (its own snapshot). ``of``: what is read
        (``"the journal of 'a'"``), named by the error if the read fails: a damaged page then
        names the actor whose rows it holds."""
        if self.reader is None:
            raise StoreError(f"store {self.path!r} is not open")
        try:
            return await self.reader.execute_fetchall(sql, params)
        except sqlite3.Error as exc:
            what = f"read of {of} from" if of else "read from"
            raise store_error(f"{what} {self.path!r} failed", exc) from exc

    async def read_each(
        self, queries: Sequence[tuple[str, Sequence[Any]]]
    ) -> list[list[Any] | sqlite3.Error]:
        """The rows of each statement, in order, all in one hop to the reader; a statement
        that failed alone has its error in its place."""
        if self.reader is None:
            raise StoreError(f"store {self.path!r} is not open")
        reader = self.reader
        try:
            return await reader.call(_fetch_each, reader.conn, queries)
        except sqlite3.Error as exc:
            raise store_error(f"read from {self.path!r} failed", exc) from exc

    async def transaction(self, fn: Callable[[Tx], Coroutine[Any, Any, T]]) -> T:
        """A small write outside the group committer, its sqlite3 errors as StoreError."""
        try:
            return await self.w().transaction(fn)
        except sqlite3.Error as exc:
            raise store_error(f"write to {self.path!r} failed", exc) from exc
