"""``SqliteStore``: the embedded default, on the standard ``sqlite3`` module.

Layout of the work, and why:

* Each connection lives on its own thread (``_Conn``), and a call onto it is one thread hop
  (tens of µs of event-loop time, and latency): so every transaction runs there whole, as one
  function, and costs one hop whatever its size.
* One writer connection, WAL, ``BEGIN IMMEDIATE`` per batch. A batch is applied as a fixed
  handful of ``executemany`` calls, whatever its size. ``_apply`` is written against
  aiosqlite-shaped calls (``await db.executemany(...)``) on a ``_Tx``, whose methods never
  wait: the writer thread runs the coroutine to its end in one go (``_run_inline``).
* One reader connection for everything else; WAL lets it read while the writer writes. On
  ``":memory:"`` there is one connection, so reads queue behind whole batches on its thread and
  never see half of one.
* The schema carries a version in ``meta``; a store of another version is refused (an older
  one with the command that upgrades it: ``tether migrate``, ``runtime/migrations.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
import sqlite3
from collections.abc import Callable, Collection, Coroutine, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
import msgspec

from tether.errors import CorruptRecordError, SchemaVersionError, StoreError, StoreOpenError
from tether.runtime.blobs import pack, unpack
from tether.runtime.store import (
    SCHEMA_VERSION,
    ActorRecord,
    ApprovalRecord,
    Batch,
    BatchResult,
    DeadLetter,
    EffectRecord,
    JournalRow,
    NewMessage,
    Reply,
    Snapshot,
    StoredMessage,
)

Durability = Literal["full", "normal"]

# The effects ledger, keyed by message: msg ids are a runtime's random prefix and a counter, so
# new rows land on a few hot pages instead of one page per session (a commit dirties, and
# writes to the WAL, every page it touches). Lookups by actor (a session's ledger, a loop
# guard's rebuild) go through ``effects_by_actor``, in time order. The key is not indexed: it
# is a hash of the primary key's own fields (I5), and a person resolving a quarantined effect
# finds it among the few quarantined rows through ``effects_by_status``.
_EFFECTS_TABLE = """
CREATE TABLE {name} (
    actor_id    TEXT NOT NULL,
    msg_id      TEXT NOT NULL,
    idx         INTEGER NOT NULL,
    key         TEXT NOT NULL,
    tool        TEXT NOT NULL,
    input_hash  TEXT NOT NULL,
    args        BLOB NOT NULL,
    status      TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    result      BLOB,
    error       TEXT,
    reason      TEXT,
    history     BLOB,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL,
    PRIMARY KEY (msg_id, idx)
) WITHOUT ROWID;
"""
_EFFECTS_INDEXES = """
CREATE INDEX effects_by_actor ON effects(actor_id, created_at);
CREATE INDEX effects_by_status ON effects(status, updated_at);
"""

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE actors (
    actor_id      TEXT PRIMARY KEY,
    class_path    TEXT NOT NULL,
    init          BLOB NOT NULL,
    parent_id     TEXT,
    status        TEXT NOT NULL DEFAULT 'active',
    stop_reason   TEXT,
    fence         INTEGER NOT NULL DEFAULT 0,
    lease_owner   TEXT,
    lease_expires REAL NOT NULL DEFAULT 0,
    created_at    REAL NOT NULL
);
CREATE INDEX actors_by_parent ON actors(parent_id);
CREATE TABLE mailbox (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    msg_id      TEXT NOT NULL UNIQUE,
    actor_id    TEXT NOT NULL,
    type        TEXT NOT NULL,
    payload     BLOB NOT NULL,
    deliver_at  REAL NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    errors      BLOB,
    wants_reply INTEGER NOT NULL DEFAULT 0,
    created_at  REAL NOT NULL,
    parks       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX mailbox_by_actor ON mailbox(actor_id, seq);
CREATE INDEX mailbox_by_due ON mailbox(deliver_at);
CREATE TABLE dedup (
    actor_id   TEXT NOT NULL,
    dedup_key  TEXT NOT NULL,
    msg_id     TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (actor_id, dedup_key)
) WITHOUT ROWID;
CREATE INDEX dedup_by_age ON dedup(created_at);
CREATE TABLE journal (
    actor_id TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    payload  BLOB NOT NULL,
    PRIMARY KEY (actor_id, seq)
) WITHOUT ROWID;
CREATE TABLE snapshots (actor_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, state BLOB NOT NULL);
CREATE TABLE replies (
    msg_id     TEXT PRIMARY KEY,
    actor_id   TEXT NOT NULL,
    ok         INTEGER NOT NULL,
    payload    BLOB NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX replies_by_age ON replies(created_at);
CREATE TABLE dead_letters (
    msg_id     TEXT PRIMARY KEY,
    actor_id   TEXT NOT NULL,
    type       TEXT NOT NULL,
    payload    BLOB NOT NULL,
    attempts   INTEGER NOT NULL,
    errors     BLOB,
    reason     TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE watches (
    watched TEXT NOT NULL,
    watcher TEXT NOT NULL,
    PRIMARY KEY (watched, watcher)
) WITHOUT ROWID;
{effects}CREATE TABLE approvals (
    request_id TEXT PRIMARY KEY,
    actor_id   TEXT NOT NULL,
    status     TEXT NOT NULL,
    version    INTEGER NOT NULL,
    created_at REAL NOT NULL,
    record     BLOB NOT NULL
);
CREATE INDEX approvals_by_status ON approvals(status, created_at);
CREATE TABLE runtimes (
    runtime_id TEXT PRIMARY KEY,
    host       TEXT NOT NULL,
    pid        INTEGER NOT NULL,
    started_at REAL NOT NULL
);
""".replace("{effects}", _EFFECTS_TABLE.format(name="effects") + _EFFECTS_INDEXES)

_TABLES = frozenset(
    line.split()[2] for line in _SCHEMA.splitlines() if line.startswith("CREATE TABLE")
)

# msgpack of an empty list: what a NULL ``errors`` column means.
_NO_ERRORS = b"\x90"
_CHUNK = 500  # rows per IN (...) list: well under SQLite's bound-parameter limit

_errors_decoder = msgspec.msgpack.Decoder(list[str])
_encode = msgspec.msgpack.encode


def _decode_errors(blob: bytes | None, where: str) -> list[str]:
    if not blob:
        return []
    try:
        return _errors_decoder.decode(blob)
    except msgspec.DecodeError:
        return [f"(error history of {where} is unreadable)"]


def _store_error(what: str, exc: sqlite3.Error) -> StoreError:
    """A StoreError for a failed statement; CorruptRecordError when the file is damaged."""
    damaged = getattr(exc, "sqlite_errorname", "") in ("SQLITE_CORRUPT", "SQLITE_NOTADB")
    return (CorruptRecordError if damaged else StoreError)(f"{what}: {exc}")


def _chunks(items: Sequence[Any], size: int = _CHUNK) -> Iterable[Sequence[Any]]:
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


class _Rows:
    """A finished statement's rows, with aiosqlite's cursor reads."""

    __slots__ = ("rowcount", "rows")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self.rows = rows
        self.rowcount = rowcount

    async def fetchone(self) -> Any:
        return self.rows[0] if self.rows else None

    async def fetchall(self) -> list[Any]:
        return self.rows


class _Tx:
    """A connection as seen from its own thread, with aiosqlite's call shapes. Nothing here
    waits, so a coroutine that awaits only these runs to its end in one ``_run_inline``."""

    __slots__ = ("conn", "max_params")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.max_params = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> _Rows:
        cur = self.conn.execute(sql, params)
        return _Rows(cur.fetchall(), cur.rowcount)

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


def _run_inline(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never waits (it awaits ``_Tx`` calls only) to its end, here."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a store transaction tried to wait for something")


class _Conn:
    """One ``sqlite3`` connection and the one thread that uses it. ``call`` runs a function
    there (one thread hop); the aiosqlite-shaped methods are for one-off statements."""

    def __init__(self, executor: ThreadPoolExecutor, conn: sqlite3.Connection) -> None:
        self._executor = executor
        self.conn = conn
        self.tx = _Tx(conn)

    @classmethod
    async def open(cls, path: str, name: str) -> _Conn:
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

    async def transaction(self, fn: Callable[[_Tx], Coroutine[Any, Any, T]]) -> T:
        """Run ``fn(tx)`` inside ``BEGIN IMMEDIATE`` … ``COMMIT`` on the connection's thread, all
        of it in one hop; any error rolls back."""
        return await self.call(self._transaction, fn)

    def _transaction(self, fn: Callable[[_Tx], Coroutine[Any, Any, T]]) -> T:
        conn = self.conn
        if conn.in_transaction:  # a ROLLBACK that failed earlier: never build on a leftover
            conn.execute("ROLLBACK")
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = _run_inline(fn(self.tx))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # the first error is the one to report
                    conn.execute("ROLLBACK")
            raise
        return result

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> _Rows:
        return await self.call(_run_inline_fn, self.tx.execute, sql, params)

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


def _open_connection(path: str) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None, check_same_thread=False)


def _fetchall(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[Any]:
    return conn.execute(sql, params).fetchall()


def _run_inline_fn(fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
    return _run_inline(fn(*args))


class SqliteStore:
    """A store in one SQLite file. See the module docstring for how it is used."""

    def __init__(self, path: str | os.PathLike[str], *, durability: Durability = "full") -> None:
        if durability not in ("full", "normal"):
            raise StoreOpenError(f"durability must be 'full' or 'normal', not {durability!r}")
        self.path = str(path)
        self.durability = durability
        self._writer: _Conn | None = None
        self._reader: _Conn | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        if self.path != ":memory:":
            await anyio.to_thread.run_sync(self._check_path)
        try:
            self._writer = await self._connect("writer")
            await self._writer.call(_run_inline_fn, self._ensure_schema, self._writer.tx)
            self._reader = (
                self._writer if self.path == ":memory:" else await self._connect("reader")
            )
        except sqlite3.DatabaseError as exc:
            await self.close()
            raise StoreOpenError(f"cannot open store {self.path!r}: {exc}") from exc
        except BaseException:
            await self.close()
            raise

    def _check_path(self) -> None:
        """Clear errors for a missing folder or an unwritable file, before SQLite's own."""
        path = Path(self.path)
        folder = path.resolve().parent
        if not folder.is_dir():
            raise StoreOpenError(f"cannot open store {self.path!r}: folder {folder} does not exist")
        if path.is_dir():
            raise StoreOpenError(f"cannot open store {self.path!r}: it is a directory")
        if path.exists() and not os.access(path, os.R_OK | os.W_OK):
            raise StoreOpenError(f"cannot open store {self.path!r}: the file is not writable")
        if not path.exists() and not os.access(folder, os.W_OK):
            raise StoreOpenError(
                f"cannot create store {self.path!r}: folder {folder} is not writable"
            )

    async def _connect(self, name: str) -> _Conn:
        db = await _Conn.open(self.path, name)
        try:
            await db.execute("PRAGMA busy_timeout = 30000")
            if self.path != ":memory:":
                mode = await (await db.execute("PRAGMA journal_mode = WAL")).fetchone()
                if mode is None or str(mode[0]).lower() != "wal":
                    raise StoreOpenError(f"cannot switch {self.path!r} to WAL mode")
            await db.execute(f"PRAGMA synchronous = {self.durability.upper()}")
        except BaseException:
            # Not in self._writer/_reader yet, so close() would miss it.
            await db.close()
            raise
        return db

    async def _ensure_schema(self, db: _Tx) -> None:
        """Run on the writer's thread, inline (``_run_inline``): it never waits."""
        await db.execute("BEGIN IMMEDIATE")
        try:
            tables = {
                row[0]
                for row in await db.execute_fetchall(
                    "SELECT name FROM sqlite_master WHERE type='table'"
                )
            }
            if not tables:
                # executescript would commit first; run each statement inside this transaction
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    await db.execute(statement)
                await db.execute(
                    "INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
                )
            elif "meta" not in tables:
                raise SchemaVersionError(
                    f"{self.path!r} is an SQLite file but not a tether store (no meta table)"
                )
            else:
                rows = list(
                    await db.execute_fetchall("SELECT value FROM meta WHERE key='schema_version'")
                )
                found = rows[0][0] if rows else None
                if found != str(SCHEMA_VERSION):
                    from tether.runtime.migrations import can_migrate  # it imports this module

                    hint = (
                        f": stop every runtime on it and run `tether --db {self.path} migrate`"
                        if can_migrate(found)
                        else ""
                    )
                    raise SchemaVersionError(
                        f"store {self.path!r} has schema version {found!r}; this tether reads "
                        f"version {SCHEMA_VERSION} and never migrates silently{hint}"
                    )
                missing = sorted(_TABLES - tables)
                if missing:
                    raise SchemaVersionError(
                        f"store {self.path!r} has schema version {found} but lacks the "
                        f"table(s) {', '.join(missing)}: it is damaged"
                    )
            await db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                await db.execute("ROLLBACK")
            raise

    async def close(self) -> None:
        for db in {id(c): c for c in (self._reader, self._writer) if c is not None}.values():
            await db.close()
        self._reader = self._writer = None

    def _r(self) -> _Conn:
        if self._reader is None:
            raise StoreError(f"store {self.path!r} is not open")
        return self._reader

    def _w(self) -> _Conn:
        if self._writer is None:
            raise StoreError(f"store {self.path!r} is not open")
        return self._writer

    async def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        # On ":memory:" the reader is the writer: its thread runs whole batches, so a read never
        # sees half of one.
        try:
            return await self._r().execute_fetchall(sql, params)
        except sqlite3.Error as exc:
            raise _store_error(f"read from {self.path!r} failed", exc) from exc

    async def _transaction(self, fn: Callable[[_Tx], Coroutine[Any, Any, T]]) -> T:
        """A small write outside the group committer, its sqlite3 errors as StoreError."""
        try:
            return await self._w().transaction(fn)
        except sqlite3.Error as exc:
            raise _store_error(f"write to {self.path!r} failed", exc) from exc

    # -- the batch ----------------------------------------------------------------------------

    async def apply(self, batch: Batch) -> BatchResult:
        db = self._w()
        try:
            # One thread hop: BEGIN, every write, COMMIT (or ROLLBACK) run on the writer thread.
            return await db.transaction(lambda tx: self._apply(tx, batch))
        except sqlite3.Error as exc:
            raise StoreError(f"batch not applied to {self.path!r}: {exc}") from exc

    async def _apply(self, db: _Tx, b: Batch) -> BatchResult:
        result = BatchResult()

        # I8: check every fenced write against the current fence, in this transaction.
        fenced = {(op.actor_id, op.fence) for op in b.fenced()}
        if fenced:
            # Only the stale pairs come back: usually none, so one step per statement.
            for (actor_id,) in await db.execute_rows(
                "SELECT v.column1 FROM (VALUES ",
                "(?, ?)",
                list(fenced),
                ") AS v LEFT JOIN actors ON actors.actor_id = v.column1 "
                "WHERE actors.fence IS NOT v.column2",
            ):
                result.stale.add(actor_id)
        stale = result.stale

        if b.spawns:
            await db.executemany(
                "INSERT OR IGNORE INTO actors (actor_id, class_path, init, parent_id, status, "
                "stop_reason, fence, lease_owner, lease_expires, created_at) "
                "VALUES (?, ?, ?, ?, 'active', NULL, 0, NULL, 0, ?)",
                [
                    (r.actor_id, r.class_path, r.init, r.parent_id, r.created_at)
                    for r in (s.record for s in b.spawns)
                ],
            )
            for rec in await self._actors_in(db, [s.record.actor_id for s in b.spawns]):
                result.spawned[rec.actor_id] = rec

        if b.revives:
            await db.executemany(
                "UPDATE actors SET status = 'active', stop_reason = NULL WHERE actor_id = ?",
                [(r.actor_id,) for r in b.revives],
            )
        if b.watches:
            await db.executemany(
                "INSERT OR IGNORE INTO watches (watched, watcher) VALUES (?, ?)",
                [(w.watched, w.watcher) for w in b.watches],
            )

        releases = [r for r in b.releases if r.actor_id not in stale]
        if releases:
            await db.executemany(
                "UPDATE actors SET lease_owner = NULL, lease_expires = 0 WHERE actor_id = ? AND fence = ?",
                [(r.actor_id, r.fence) for r in releases],
            )

        if b.acquires:
            await db.executemany(
                "UPDATE actors SET lease_owner = ?, lease_expires = ?, fence = fence + 1 "
                "WHERE actor_id = ? AND status = 'active' AND (lease_owner IS NULL "
                "OR lease_owner = ? OR lease_expires < ? "
                "OR lease_owner NOT IN (SELECT runtime_id FROM runtimes))",
                [(a.owner, a.expires, a.actor_id, a.owner, a.now) for a in b.acquires],
            )
            wanted = {a.actor_id: a for a in b.acquires}
            got = {r.actor_id: r for r in await self._actors_in(db, list(wanted))}
            for actor_id, a in wanted.items():
                now_rec = got.get(actor_id)
                won = (
                    now_rec is not None
                    and now_rec.lease_owner == a.owner
                    and now_rec.lease_expires == a.expires
                )
                result.leases[actor_id] = now_rec.fence if won and now_rec is not None else None

        steps = [s for s in b.steps if s.actor_id not in stale]
        messages = list(b.messages)
        for s in steps:
            messages.extend(s.outbox)
        if messages:
            keyed = [m for m in messages if m.dedup_key is not None]
            if keyed:
                await db.executemany(
                    "INSERT OR IGNORE INTO dedup (actor_id, dedup_key, msg_id, created_at) VALUES (?, ?, ?, ?)",
                    [(m.actor_id, m.dedup_key, m.msg_id, m.created_at) for m in keyed],
                )
            # In batch order (it is mailbox order): runs of messages without a dedup key in
            # multi-row inserts, keyed ones each checked against the dedup table.
            runs = (
                itertools.groupby(messages, lambda m: m.dedup_key is not None)
                if keyed
                else [(False, messages)]  # usually: one run, without a key function per message
            )
            for has_key, run in runs:
                if not has_key:
                    await db.execute_rows(
                        "INSERT INTO mailbox (msg_id, actor_id, type, payload, deliver_at, "
                        "wants_reply, created_at, attempts) VALUES ",
                        "(?, ?, ?, ?, ?, ?, ?, ?)",
                        [_mailbox_row(m) for m in run],
                    )
                    continue
                await db.executemany(
                    "INSERT INTO mailbox (msg_id, actor_id, type, payload, deliver_at, wants_reply, created_at, attempts) "
                    "SELECT ?, ?, ?, ?, ?, ?, ?, ? WHERE NOT EXISTS "
                    "(SELECT 1 FROM dedup WHERE actor_id = ? AND dedup_key = ? AND msg_id <> ?)",
                    [(*_mailbox_row(m), m.actor_id, m.dedup_key, m.msg_id) for m in run],
                )
            if keyed:
                ours = {(m.actor_id, m.dedup_key): m.msg_id for m in keyed}
                pairs = list(ours)
                for chunk in _chunks(pairs):
                    values = ",".join("(?, ?)" for _ in chunk)
                    flat = [x for pair in chunk for x in pair]
                    for actor_id, key, stored in await db.execute_fetchall(
                        f"SELECT actor_id, dedup_key, msg_id FROM dedup WHERE (actor_id, dedup_key) IN (VALUES {values})",
                        flat,
                    ):
                        # Every message carrying this key in the batch that is not the stored one
                        # is a duplicate of it.
                        for m in keyed:
                            if m.actor_id == actor_id and m.dedup_key == key and m.msg_id != stored:
                                result.duplicates[m.msg_id] = stored
                del ours

        if steps:
            journal = [(s.actor_id, e.seq, e.payload) for s in steps for e in s.events]
            if journal:
                await db.execute_rows(
                    "INSERT INTO journal (actor_id, seq, payload) VALUES ", "(?, ?, ?)", journal
                )
            snaps = [
                (s.actor_id, s.snapshot.seq, s.snapshot.state)
                for s in steps
                if s.snapshot is not None
            ]
            if snaps:
                await db.executemany(
                    "INSERT OR REPLACE INTO snapshots (actor_id, seq, state) VALUES (?, ?, ?)",
                    snaps,
                )
            replies = [(s.msg_id, s.actor_id, s.reply) for s in steps if s.reply is not None]
            if replies:
                await db.execute_rows(
                    "INSERT OR REPLACE INTO replies (msg_id, actor_id, ok, payload, created_at) "
                    "SELECT v.column1, v.column2, 1, v.column3, mailbox.created_at FROM (VALUES ",
                    "(?, ?, ?)",
                    replies,
                    ") AS v JOIN mailbox ON mailbox.msg_id = v.column1",
                )
            late = [(r.msg_id, s.actor_id, r.payload, r.at) for s in steps for r in s.late_replies]
            if late:
                await db.executemany(
                    "INSERT OR REPLACE INTO replies (msg_id, actor_id, ok, payload, created_at) "
                    "VALUES (?, ?, 1, ?, ?)",
                    late,
                )
            await db.execute_rows(
                "DELETE FROM mailbox WHERE msg_id IN (", "?", [(s.msg_id,) for s in steps], ")"
            )

        claims = [c.msg_id for c in b.claims if c.actor_id not in stale]
        claims.extend(s.claim_next for s in steps if s.claim_next is not None)
        if claims and len(set(claims)) == len(claims):
            await db.execute_rows(
                "UPDATE mailbox SET attempts = attempts + 1 WHERE msg_id IN (",
                "?",
                [(m,) for m in claims],
                ")",
            )
        elif claims:  # one message counted twice in a batch: once per claim
            await db.executemany(
                "UPDATE mailbox SET attempts = attempts + 1 WHERE msg_id = ?",
                [(m,) for m in claims],
            )

        failures = [f for f in b.failures if f.actor_id not in stale]
        if failures:
            await db.executemany(
                "UPDATE mailbox SET errors = ?, attempts = attempts + ? WHERE msg_id = ?",
                [(_encode(f.errors), int(f.claim_again), f.msg_id) for f in failures],
            )
            dead = [f for f in failures if f.dead_letter_reason is not None]
            if dead:
                await self._dead_letter(
                    db, [(f.msg_id, f.dead_letter_reason or "", f.now) for f in dead]
                )

        effects = [e.record for e in b.effects if e.actor_id not in stale]
        parks = [p for p in b.parks if p.actor_id not in stale]
        effects.extend(p.effect for p in parks if p.effect is not None)
        if effects:
            rows = [_effect_row(e) for e in effects]
            if await db.executemany(_UPSERT_EFFECT, rows) != len(rows):
                # The upsert leaves a row of another actor alone (see _UPSERT_EFFECT): refuse
                # the batch rather than let an intent go unrecorded (I4).
                raise StoreError(
                    "an effect's (msg_id, idx) is already held by another actor's effect; "
                    "the batch was rolled back"
                )
        requests = [p.approval for p in parks if p.approval is not None]
        if requests:
            await db.executemany(
                "INSERT OR IGNORE INTO approvals (request_id, actor_id, status, version, "
                "created_at, record) VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (a.request_id, a.actor_id, a.status, a.version, a.created_at, _encode(a))
                    for a in requests
                ],
            )
        if parks:
            # The claim counted an attempt that did not fail: give it back (I7 counts failures
            # and unfinished deliveries, not waiting).
            await db.executemany(
                "UPDATE mailbox SET deliver_at = ?, attempts = max(attempts - 1, 0), "
                "parks = parks + 1 WHERE msg_id = ?",
                [(p.until, p.msg_id) for p in parks],
            )

        stops = [s.stop for s in steps if s.stop is not None] + list(b.stops)
        if stops:
            await db.executemany(
                "UPDATE actors SET status = ?, stop_reason = ?, fence = fence + 1, "
                "lease_owner = NULL, lease_expires = 0 WHERE actor_id = ?",
                [(st.status, st.reason, st.actor_id) for st in stops],
            )
            pending: list[tuple[str, str, float]] = []
            for st in stops:
                for (msg_id,) in await db.execute_fetchall(
                    "SELECT msg_id FROM mailbox WHERE actor_id = ?", (st.actor_id,)
                ):
                    pending.append((msg_id, f"actor {st.status}: {st.reason}", st.now))
            if pending:
                await self._dead_letter(db, pending)
            # Death watch: every watcher gets a Terminated notice in the same transaction.
            await db.executemany(
                "INSERT OR IGNORE INTO mailbox (msg_id, actor_id, type, payload, deliver_at, wants_reply, created_at) "
                "SELECT 'terminated:' || watched || ':' || watcher || ':' || ?, watcher, 'Terminated', ?, ?, 0, ? "
                "FROM watches WHERE watched = ?",
                [(repr(st.now), st.notice, st.now, st.now, st.actor_id) for st in stops],
            )
            await db.executemany(
                "DELETE FROM watches WHERE watched = ?", [(st.actor_id,) for st in stops]
            )
        return result

    async def _dead_letter(self, db: _Tx, rows: list[tuple[str, str, float]]) -> None:
        """Move mailbox rows to dead letters, answering any waiting ask with its error history
        (the errors recorded on the message, then the reason)."""
        asked: dict[str, list[str]] = {}
        for chunk in _chunks([m for m, _, _ in rows]):
            marks = ",".join("?" * len(chunk))
            for msg_id, errors in await db.execute_fetchall(
                f"SELECT msg_id, errors FROM mailbox WHERE wants_reply = 1 AND msg_id IN ({marks})",
                chunk,
            ):
                asked[msg_id] = _decode_errors(errors, msg_id)
        if asked:
            await db.executemany(
                "INSERT OR REPLACE INTO replies (msg_id, actor_id, ok, payload, created_at) "
                "SELECT msg_id, actor_id, 0, ?, ? FROM mailbox WHERE msg_id = ?",
                [(_encode([*asked[m], reason]), at, m) for m, reason, at in rows if m in asked],
            )
        await db.executemany(
            "INSERT OR REPLACE INTO dead_letters (msg_id, actor_id, type, payload, attempts, errors, reason, created_at) "
            "SELECT msg_id, actor_id, type, payload, attempts, errors, ?, ? FROM mailbox WHERE msg_id = ?",
            [(reason, at, msg_id) for msg_id, reason, at in rows],
        )
        await db.executemany("DELETE FROM mailbox WHERE msg_id = ?", [(m,) for m, _, _ in rows])

    async def _actors_in(self, db: _Tx, ids: list[str]) -> list[ActorRecord]:
        out: list[ActorRecord] = []
        for chunk in _chunks(ids):
            marks = ",".join("?" * len(chunk))
            rows = await db.execute_fetchall(
                f"SELECT {_ACTOR_COLUMNS} FROM actors WHERE actor_id IN ({marks})", chunk
            )
            # Inside a batch: a damaged row is left out (its spawn or lease is not reported as
            # done), never raised, which would roll back every other actor's writes too.
            out.extend(
                ActorRecord(*r) for r in _checked("actors", rows, _ACTOR_TYPES, _ignore_corrupt)
            )
        return out

    # -- reads --------------------------------------------------------------------------------

    async def get_actor(self, actor_id: str) -> ActorRecord | None:
        rows = await self._read(
            f"SELECT {_ACTOR_COLUMNS} FROM actors WHERE actor_id = ?", (actor_id,)
        )
        return _actor(rows[0]) if rows else None

    async def list_actors(
        self,
        *,
        parent_id: str | None = None,
        on_corrupt: Callable[[str, CorruptRecordError], None] | None = None,
    ) -> list[ActorRecord]:
        if parent_id is None:
            rows = await self._read(
                f"SELECT {_ACTOR_COLUMNS} FROM actors ORDER BY created_at, actor_id"
            )
        else:
            rows = await self._read(
                f"SELECT {_ACTOR_COLUMNS} FROM actors WHERE parent_id = ? ORDER BY created_at, actor_id",
                (parent_id,),
            )
        return [ActorRecord(*r) for r in _checked("actors", rows, _ACTOR_TYPES, on_corrupt)]

    async def load_snapshot(self, actor_id: str) -> Snapshot | None:
        rows = await self._read("SELECT seq, state FROM snapshots WHERE actor_id = ?", (actor_id,))
        return Snapshot(seq=rows[0][0], state=rows[0][1]) if rows else None

    async def load_journal(self, actor_id: str, after_seq: int, limit: int) -> list[JournalRow]:
        rows = await self._read(
            "SELECT seq, payload FROM journal WHERE actor_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (actor_id, after_seq, limit),
        )
        return [JournalRow(seq, payload) for seq, payload in rows]

    async def pending(
        self,
        actor_id: str,
        now: float,
        limit: int,
        *,
        on_corrupt: Callable[[str, CorruptRecordError], None] | None = None,
    ) -> list[StoredMessage]:
        # A deliver_at that is not a number is never "<= now" (SQLite orders text after every
        # number): such a row is read too, to be reported, not left waiting unseen.
        rows = await self._read(
            f"SELECT {_MAILBOX_COLUMNS} "
            "FROM mailbox WHERE actor_id = ? AND (deliver_at <= ? OR deliver_at = created_at "
            "OR typeof(deliver_at) NOT IN ('real', 'integer')) ORDER BY seq LIMIT ?",
            (actor_id, now, limit),
        )
        if on_corrupt is not None or not _all_typed(rows, _MAILBOX_TYPES):
            rows = list(_checked("mailbox", rows, _MAILBOX_TYPES, on_corrupt, _msg_key))
        return [
            StoredMessage(
                msg_id=msg_id,
                actor_id=actor_id,
                type=type_,
                payload=payload,
                deliver_at=deliver_at,
                attempts=attempts,
                errors=_decode_errors(errors, msg_id),
                wants_reply=bool(wants_reply),
                seq=seq,
                parks=parks,
            )
            for seq, msg_id, type_, payload, deliver_at, attempts, errors, wants_reply, parks in rows
        ]

    async def new_messages(
        self, after_seq: int, now: float, limit: int, *, skip_prefix: str | None = None
    ) -> list[tuple[int, str, str, bool]]:
        skip = "AND NOT (parks = 0 AND substr(msg_id, 1, ?) = ?) " if skip_prefix else ""
        rows = await self._read(
            "SELECT seq, actor_id, msg_id, parks > 0 FROM mailbox WHERE seq > ? "
            f"AND (deliver_at <= ? OR deliver_at = created_at) {skip}ORDER BY seq LIMIT ?",
            (after_seq, now, *((len(skip_prefix), skip_prefix) if skip_prefix else ()), limit),
        )
        return [(s, a, m, bool(r)) for s, a, m, r in rows]

    async def orphaned(self, now: float, limit: int) -> list[str]:
        rows = await self._read(
            "SELECT DISTINCT m.actor_id FROM mailbox m JOIN actors a ON a.actor_id = m.actor_id "
            "WHERE (m.deliver_at <= ? OR m.deliver_at = m.created_at) AND (a.lease_owner IS NULL OR a.lease_expires < ? "
            "OR a.lease_owner NOT IN (SELECT runtime_id FROM runtimes)) LIMIT ?",
            (now, now, limit),
        )
        return [r[0] for r in rows]

    async def due_between(self, after: float, upto: float) -> list[str]:
        rows = await self._read(
            "SELECT DISTINCT actor_id FROM mailbox WHERE deliver_at > ? AND deliver_at <= ? "
            "AND deliver_at > created_at",
            (after, upto),
        )
        return [r[0] for r in rows]

    async def get_replies(self, msg_ids: list[str]) -> list[Reply]:
        out: list[Reply] = []
        for chunk in _chunks(msg_ids):
            marks = ",".join("?" * len(chunk))
            rows = await self._read(
                f"SELECT msg_id, ok, payload FROM replies WHERE msg_id IN ({marks})", chunk
            )
            out.extend(Reply(msg_id=m, ok=bool(ok), payload=p) for m, ok, p in rows)
        return out

    async def find_dedup(self, actor_id: str, dedup_key: str) -> str | None:
        rows = await self._read(
            "SELECT msg_id FROM dedup WHERE actor_id = ? AND dedup_key = ?", (actor_id, dedup_key)
        )
        return str(rows[0][0]) if rows else None

    async def dead_letter(self, msg_id: str) -> DeadLetter | None:
        rows = await self._read(
            f"SELECT {_DEAD_COLUMNS} FROM dead_letters WHERE msg_id = ?", (msg_id,)
        )
        return _dead_letter(rows[0]) if rows else None

    async def watchers(self, actor_id: str) -> list[str]:
        rows = await self._read(
            "SELECT watcher FROM watches WHERE watched = ? ORDER BY watcher", (actor_id,)
        )
        return [r[0] for r in rows]

    async def dead_letters(
        self,
        actor_id: str | None = None,
        *,
        on_corrupt: Callable[[str, CorruptRecordError], None] | None = None,
    ) -> list[DeadLetter]:
        sql = f"SELECT {_DEAD_COLUMNS} FROM dead_letters"
        rows = await (
            self._read(sql + " WHERE actor_id = ? ORDER BY created_at", (actor_id,))
            if actor_id is not None
            else self._read(sql + " ORDER BY created_at")
        )
        if on_corrupt is None:
            return [_dead_letter(r) for r in rows]
        return [_dead_letter(r) for r in _checked("dead_letters", rows, _DEAD_TYPES, on_corrupt)]

    # -- small writes outside the group committer ---------------------------------------------

    async def _write(self, sql_params: list[tuple[str, Sequence[Any]]]) -> list[int]:
        async def statements(db: _Tx) -> list[int]:
            counts = []
            for sql, params in sql_params:
                cur = await db.execute(sql, params)
                counts.append(cur.rowcount)
            return counts

        return await self._transaction(statements)

    async def renew_leases(self, owner: str, expires: float) -> None:
        await self._write(
            [("UPDATE actors SET lease_expires = ? WHERE lease_owner = ?", (expires, owner))]
        )

    async def register_runtime(self, runtime_id: str, host: str, pid: int, started: float) -> None:
        await self._write(
            [
                (
                    "INSERT OR REPLACE INTO runtimes VALUES (?, ?, ?, ?)",
                    (runtime_id, host, pid, started),
                )
            ]
        )

    async def list_runtimes(
        self, *, on_corrupt: Callable[[str, CorruptRecordError], None] | None = None
    ) -> list[tuple[str, str, int, float]]:
        rows = await self._read(f"SELECT {_RUNTIME_COLUMNS} FROM runtimes")
        return [
            (r, h, p, s) for r, h, p, s in _checked("runtimes", rows, _RUNTIME_TYPES, on_corrupt)
        ]

    async def remove_runtime(self, runtime_id: str) -> None:
        await self._write(
            [
                ("DELETE FROM runtimes WHERE runtime_id = ?", (runtime_id,)),
                (
                    "UPDATE actors SET lease_owner = NULL, lease_expires = 0 WHERE lease_owner = ?",
                    (runtime_id,),
                ),
            ]
        )

    async def retry_dead_letter(self, msg_id: str, now: float) -> DeadLetter | None:
        letter = await self.dead_letter(msg_id)
        if letter is None:
            return None
        moved = await self._write(
            [
                (
                    # parks = 1: the message has a past (ledger rows, approvals) that its next
                    # delivery must read, though its attempts start again from 0.
                    "INSERT INTO mailbox (msg_id, actor_id, type, payload, deliver_at, attempts, errors, wants_reply, created_at, parks) "
                    "SELECT msg_id, actor_id, type, payload, ?, 0, NULL, 0, ?, 1 FROM dead_letters WHERE msg_id = ?",
                    (now, now, msg_id),
                ),
                ("DELETE FROM dead_letters WHERE msg_id = ?", (msg_id,)),
                ("DELETE FROM replies WHERE msg_id = ?", (msg_id,)),
            ]
        )
        return letter if moved[0] == 1 else None

    async def discard_dead_letter(self, msg_id: str) -> bool:
        return (await self._write([("DELETE FROM dead_letters WHERE msg_id = ?", (msg_id,))]))[
            0
        ] == 1

    async def purge(self, before: float) -> int:
        counts = await self._write(
            [
                ("DELETE FROM dedup WHERE created_at < ?", (before,)),
                ("DELETE FROM replies WHERE created_at < ?", (before,)),
            ]
        )
        return sum(counts)

    # -- the effects ledger -------------------------------------------------------------------

    async def effects_of(self, actor_id: str, msg_id: str) -> list[EffectRecord]:
        rows = await self._read(
            f"SELECT {_EFFECT_COLUMNS} FROM effects WHERE actor_id = ? AND msg_id = ? ORDER BY idx",
            (actor_id, msg_id),
        )
        return [_effect(r) for r in rows]

    async def find_effects(
        self,
        *,
        actor_id: str | None = None,
        status: str | None = None,
        key: str | None = None,
        on_corrupt: Callable[[str, CorruptRecordError], None] | None = None,
    ) -> list[EffectRecord]:
        where, params = [], []
        for column, value in (("actor_id", actor_id), ("status", status), ("key", key)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        sql = f"SELECT {_EFFECT_COLUMNS} FROM effects"
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = await self._read(sql + " ORDER BY created_at, actor_id, msg_id, idx", params)
        if on_corrupt is None:
            return [_effect(r) for r in rows]
        return [
            _effect(r) for r in _checked("effects", rows, _EFFECT_TYPES, on_corrupt, _effect_key)
        ]

    async def recent_effects(
        self,
        actor_id: str,
        limit: int,
        *,
        after: float | None = None,
        exclude_tools: Collection[str] = (),
    ) -> list[EffectRecord]:
        if limit < 0:  # SQLite reads a negative LIMIT as none at all
            raise ValueError(f"recent_effects: limit must be >= 0, not {limit}")
        where: list[str] = ["actor_id = ?"]
        params: list[Any] = [actor_id]
        if after is not None:
            where.append("created_at > ?")
            params.append(after)
        excluded = sorted(set(exclude_tools))
        if excluded:  # before the LIMIT: an excluded row must not take a kept row's place
            where.append(f"tool NOT IN ({', '.join('?' * len(excluded))})")
            params.extend(excluded)
        # Newest first to apply the LIMIT, then reversed to oldest first. ``effects_by_actor``
        # holds (actor_id, created_at) and then the primary key (msg_id, idx): the ORDER BY
        # is its order, so SQLite walks it backwards and stops after ``limit`` kept rows.
        rows = await self._read(
            f"SELECT {_EFFECT_COLUMNS} FROM effects WHERE {' AND '.join(where)}"
            " ORDER BY created_at DESC, msg_id DESC, idx DESC LIMIT ?",
            [*params, limit],
        )
        return [_effect(r) for r in reversed(rows)]

    async def resolve_effect(
        self, key: str, record: EffectRecord, now: float
    ) -> EffectRecord | None:
        async def resolve(db: _Tx) -> EffectRecord | None:
            rows = await db.execute_fetchall(
                "SELECT msg_id FROM effects WHERE key = ? AND status = 'quarantined'", (key,)
            )
            if not rows:
                return None
            await db.execute(_UPSERT_EFFECT, _effect_row(record))
            await _unpark(db, rows[0][0], now)
            return record

        return await self._transaction(resolve)

    async def unpark(self, msg_id: str, now: float) -> bool:
        async def move(db: _Tx) -> bool:
            return await _unpark(db, msg_id, now)

        return await self._transaction(move)

    async def find_approvals(
        self,
        *,
        status: str | None = None,
        actor_id: str | None = None,
        request_id: str | None = None,
        on_corrupt: Callable[[str, CorruptRecordError], None] | None = None,
    ) -> list[ApprovalRecord]:
        where, params = [], []
        for column, value in (
            ("status", status),
            ("actor_id", actor_id),
            ("request_id", request_id),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        sql = "SELECT request_id, record FROM approvals"
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = await self._read(sql + " ORDER BY created_at, request_id", params)
        if on_corrupt is None:
            return [_approval(rid, blob) for rid, blob in rows]
        records = []
        for rid, blob in rows:
            try:
                records.append(_approval(rid, blob))
            except CorruptRecordError as exc:
                on_corrupt(rid, exc)
        return records

    async def update_approval(self, record: ApprovalRecord, expected_version: int) -> bool:
        async def swap(db: _Tx) -> bool:
            cur = await db.execute(
                "UPDATE approvals SET status = ?, version = ?, record = ? "
                "WHERE request_id = ? AND version = ?",
                (
                    record.status,
                    record.version,
                    _encode(record),
                    record.request_id,
                    expected_version,
                ),
            )
            swapped = cur.rowcount == 1
            if swapped and record.status != "pending":
                await _unpark(db, record.msg_id, record.decided_at or 0.0)
            return swapped

        return await self._transaction(swap)

    async def purge_receipts(self, before: float) -> int:
        counts = await self._write(
            [
                (
                    "DELETE FROM effects WHERE status IN ('done', 'failed', 'aborted') "
                    "AND updated_at < ? AND NOT EXISTS "
                    "(SELECT 1 FROM mailbox WHERE mailbox.msg_id = effects.msg_id)",
                    (before,),
                )
            ]
        )
        return counts[0]


_EFFECT_COLUMNS = (
    "actor_id, msg_id, idx, key, tool, input_hash, args, status, attempts, result, error, "
    "reason, history, created_at, updated_at"
)
_UPSERT_EFFECT = (
    f"INSERT INTO effects ({_EFFECT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (msg_id, idx) DO UPDATE SET status = excluded.status, "
    "attempts = excluded.attempts, result = excluded.result, error = excluded.error, "
    "reason = excluded.reason, history = excluded.history, updated_at = excluded.updated_at "
    # msg ids are unique per store (a runtime's random prefix and a counter): this never
    # holds in practice, but if it did, one actor's row must not be rewritten as another's.
    "WHERE effects.actor_id = excluded.actor_id"
)


def _mailbox_row(m: NewMessage) -> tuple[Any, ...]:
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
    )


def _effect_row(e: EffectRecord) -> tuple[Any, ...]:
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
        _encode(e.history),
        e.created_at,
        e.updated_at,
    )


def _effect(row: Sequence[Any]) -> EffectRecord:
    _check_row("effects", _effect_key(row), row, _EFFECT_TYPES)
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
        history=_decode_errors(history, f"effect {key}"),
        created_at=created_at,
        updated_at=updated_at,
    )


_approval_decoder = msgspec.msgpack.Decoder(ApprovalRecord)


def _approval(request_id: str, blob: bytes) -> ApprovalRecord:
    try:
        return _approval_decoder.decode(blob)
    except msgspec.DecodeError as exc:
        raise CorruptRecordError(
            f"approval request {request_id!r} cannot be decoded: {exc}"
        ) from exc


async def _unpark(db: _Tx, msg_id: str, now: float) -> bool:
    """Re-store a parked message at the end of the mailbox, due now: a new seq, so that every
    runtime's watermark scan sees it, whoever parked it."""
    # The new seq is above every seq ever assigned (AUTOINCREMENT's high-water mark in
    # sqlite_sequence), not just above the rows still in the mailbox: a watermark may already
    # be past acked messages. An UPDATE does not move that mark, so move it by hand, or the
    # next INSERT would reuse this seq once the message is acked.
    cur = await db.execute(
        "UPDATE mailbox SET deliver_at = ?, "
        "seq = (SELECT seq + 1 FROM sqlite_sequence WHERE name = 'mailbox') "
        "WHERE msg_id = ? AND deliver_at > ?",
        (now, msg_id, now),
    )
    if cur.rowcount != 1:
        return False
    await db.execute("UPDATE sqlite_sequence SET seq = seq + 1 WHERE name = 'mailbox'")
    return True


# -- rows of the wrong type ----------------------------------------------------------------------
#
# SQLite columns have type affinity, not types: text written by hand (or a disk fault) into a
# REAL or INTEGER column stays text, and a TEXT column keeps a blob. tether never writes such a
# value, and msgspec does not check the fields of a record built from a row: every row read
# into a record is checked here, column by column (plain ``type(...)`` checks), and a wrong one
# raises CorruptRecordError naming the table, the row, the column and the value.

Kind = tuple[tuple[type, ...], str]  # the Python types a column's values may have; its name
_TEXT: Kind = ((str,), "text")
_TEXT_OR_NULL: Kind = ((str, type(None)), "text or NULL")
_BLOB: Kind = ((bytes,), "a blob")
_BLOB_OR_NULL: Kind = ((bytes, type(None)), "a blob or NULL")
_INT: Kind = ((int,), "an integer")
_REAL: Kind = ((float, int), "a number")
_WHAT = {str: "the text", bytes: "the blob", int: "the integer", float: "the number"}
Columns = tuple[tuple[str, tuple[type, ...], str], ...]


def _columns(names: str, *kinds: Kind) -> Columns:
    return tuple(
        (name.strip(), types, wanted)
        for name, (types, wanted) in zip(names.split(","), kinds, strict=True)
    )


def _check_row(table: str, key: Any, row: Sequence[Any], columns: Columns) -> None:
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


def _ignore_corrupt(key: str, error: CorruptRecordError) -> None:
    pass


def _checked(
    table: str,
    rows: Iterable[Sequence[Any]],
    columns: Columns,
    on_corrupt: Callable[[str, CorruptRecordError], None] | None,
    key: Callable[[Sequence[Any]], Any] = lambda row: row[0],
) -> Iterator[Sequence[Any]]:
    """The rows of the right types; a wrong one raises, or goes to ``on_corrupt(key, error)``."""
    for row in rows:
        try:
            _check_row(table, key(row), row, columns)
        except CorruptRecordError as exc:
            if on_corrupt is None:
                raise
            on_corrupt(str(key(row)), exc)
            continue
        yield row


_ACTOR_COLUMNS = "actor_id, class_path, init, parent_id, status, stop_reason, fence, lease_owner, lease_expires, created_at"
_ACTOR_TYPES = _columns(
    _ACTOR_COLUMNS,
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
)


def _actor(row: Sequence[Any]) -> ActorRecord:
    _check_row("actors", row[0], row, _ACTOR_TYPES)
    return ActorRecord(*row)


def _dead_letter(row: Sequence[Any]) -> DeadLetter:
    _check_row("dead_letters", row[0], row, _DEAD_TYPES)
    msg_id, actor_id, type_, payload, attempts, errors, reason, created_at = row
    return DeadLetter(
        msg_id=msg_id,
        actor_id=actor_id,
        type=type_,
        payload=payload,
        attempts=attempts,
        errors=_decode_errors(errors, msg_id),
        reason=reason,
        created_at=created_at,
    )


_MAILBOX_COLUMNS = "seq, msg_id, type, payload, deliver_at, attempts, errors, wants_reply, parks"
_MAILBOX_TYPES = _columns(
    _MAILBOX_COLUMNS, _INT, _TEXT, _TEXT, _BLOB, _REAL, _INT, _BLOB_OR_NULL, _INT, _INT
)


def _msg_key(row: Sequence[Any]) -> Any:
    return row[1]


def _all_typed(rows: Sequence[Sequence[Any]], columns: Columns) -> bool:
    """Whether every value of ``rows`` has its column's type (checked per column, fast)."""
    for i, (_, types, _) in enumerate(columns):
        for row in rows:
            if type(row[i]) not in types:
                return False
    return True


_DEAD_COLUMNS = "msg_id, actor_id, type, payload, attempts, errors, reason, created_at"
_DEAD_TYPES = _columns(_DEAD_COLUMNS, _TEXT, _TEXT, _TEXT, _BLOB, _INT, _BLOB_OR_NULL, _TEXT, _REAL)

_EFFECT_TYPES = _columns(
    _EFFECT_COLUMNS,
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


def _effect_key(row: Sequence[Any]) -> Any:
    return row[3]


_RUNTIME_COLUMNS = "runtime_id, host, pid, started_at"
_RUNTIME_TYPES = _columns(_RUNTIME_COLUMNS, _TEXT, _TEXT, _INT, _REAL)
