"""``SqliteStore``: the embedded default, on the standard ``sqlite3`` module.

Layout of the work, and why:

* One writer connection, WAL, ``BEGIN IMMEDIATE`` per batch, each connection on a thread of
  its own and each transaction run there whole, in one thread hop (``conn.py``). A batch is a
  fixed handful of statements whatever its size (``writes.py``, one function per write kind).
* One reader connection for everything else; WAL lets it read while the writer writes.
* The schema carries a version; a store of another version is refused, an older one with the
  command that upgrades it (``schema.py``, ``migrations.py``).
* One writer at a time (SQLite's write lock, across processes too) makes the mailbox's
  sequence order its commit order: the message scan's cursor is that sequence
  (``scan_messages``), and the fence check at the top of a batch cannot be overtaken.
* Leases are judged on ``clock`` (the ``Runtime`` passes its own through ``open_store``).
"""

from __future__ import annotations

import functools
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import anyio

from tether.errors import CorruptRecordError, StoreError, StoreOpenError
from tether.store.admin import OnCorrupt
from tether.store.copy.tables import TableLoad, TablePage
from tether.store.reads import BatchedReads, GetActor, LoadJournal, LoadSnapshot, Pending, Read
from tether.store.records import (
    ActorRecord,
    AuditRecord,
    Batch,
    BatchResult,
    DeadLetter,
    JournalRow,
    MessageCursor,
    MessagePage,
    Reply,
    RuntimeRecord,
    ScannedMessage,
    Snapshot,
    StoredMessage,
)
from tether.store.sequence import cursor_at, seq_after
from tether.store.sqlite import audit as audit_log
from tether.store.sqlite import copy, migrations, reads, reuse, rows, writes
from tether.store.sqlite.audit import AuditLog
from tether.store.sqlite.conn import Connection, Database, Tx, chunks
from tether.store.sqlite.ledger import Ledger
from tether.store.sqlite.schema import ensure_schema

Durability = Literal["full", "normal"]

_ALL_DUE = 9.0e18  # a ``now`` later than every deliver_at: the whole mailbox
# True when the lease of mailbox row m's actor is held by a registered runtime other than the
# first parameter (the scanning runtime), unexpired at the second (the store's clock): the
# complement of ``orphaned``'s test, less the scanner's own leases.
_HELD_ELSEWHERE = (
    "EXISTS (SELECT 1 FROM actors a JOIN runtimes r ON r.runtime_id = a.lease_owner "
    "WHERE a.actor_id = m.actor_id AND a.lease_owner <> ? AND a.lease_expires >= ?)"
)


class SqliteStore(Ledger, AuditLog):
    """A store in one SQLite file (``":memory:"``: a private in-memory database).

    Args:
        path: the file; created if missing (unless ``create`` is False).
        durability: ``"full"`` (an acknowledged write survives power loss:
            ``synchronous=FULL``) or ``"normal"`` (survives a process crash).
        clock: the lease clock (seconds since the epoch); default: the system's.
        create: False refuses to open a file that does not hold a store yet (a tool that
            only administers stores).
        quick_check: run SQLite's ``PRAGMA quick_check`` over the whole file when it is
            opened (about 0.2 s per 100 MB; ``docs/operations.md``), and keep what it finds
            in ``damage_at_open`` (the runtime logs it). False skips it: a very large store
            whose opening must be fast, checked with ``tether check`` instead.
    """

    immediate: None = None  # every write waits for the writer thread
    changes: None = None  # no feed of other processes' writes: the runtime polls the file

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Durability = "full",
        clock: Callable[[], float] | None = None,
        create: bool = True,
        quick_check: bool = True,
    ) -> None:
        if durability not in ("full", "normal"):
            raise StoreOpenError(f"durability must be 'full' or 'normal', not {durability!r}")
        self.path = os.fspath(path)
        self.durability = durability
        self.clock = clock if clock is not None else time.time
        self._db = Database(self.path, synchronous=durability.upper(), create=create)
        self.quick_check = quick_check
        self._damage_at_open: list[str] = []

    # -- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        await self._db.open(self._ensure_schema)
        self._damage_at_open = (
            await self.storage_problems(quick=True)
            if self.quick_check and self.path != ":memory:"
            else []
        )

    @property
    def damage_at_open(self) -> list[str]:
        return list(self._damage_at_open)

    async def storage_problems(self, *, quick: bool = False) -> list[str]:
        """SQLite's own check of every page, on the reader (WAL: writers go on meanwhile):
        at most 100 problems, each as SQLite words it."""
        pragma = "quick_check" if quick else "integrity_check"
        try:
            found = await self._read(f"PRAGMA {pragma}(100)")
        except CorruptRecordError as exc:  # so damaged that the check itself cannot run
            return [str(exc)]
        problems = [str(row[0]) for row in found]
        return [] if problems == ["ok"] else problems

    async def _ensure_schema(self, tx: Tx) -> None:
        await ensure_schema(
            tx, self.path, create=self._db.create, can_migrate=migrations.can_migrate
        )

    async def close(self) -> None:
        await self._db.close()

    async def migrate(self, *, force: bool = False) -> tuple[int, int]:
        if self._db.writer is not None:
            raise StoreError(f"store {self.path!r} is open: migrate it before opening it")
        return await anyio.to_thread.run_sync(
            functools.partial(migrations.migrate, self.path, force=force)
        )

    def _w(self) -> Connection:
        """The writer connection (tests set pragmas on it)."""
        return self._db.w()

    async def _read(self, sql: str, params: Sequence[Any] = (), *, of: str = "") -> list[Any]:
        return await self._db.read(sql, params, of=of)

    async def _write(self, sql_params: list[tuple[str, Sequence[Any]]]) -> list[int]:
        """A small write outside the group committer: each statement's changed-row count."""

        async def statements(db: Tx) -> list[int]:
            return [(await db.execute(sql, params)).rowcount for sql, params in sql_params]

        return await self._db.transaction(statements)

    # -- the batch ----------------------------------------------------------------------------

    async def apply(self, batch: Batch) -> BatchResult:
        db = self._db.w()
        try:
            # One thread hop: BEGIN, every write, COMMIT (or ROLLBACK) run on the writer thread.
            return await db.transaction(lambda tx: writes.apply(tx, batch, self.clock))
        except sqlite3.Error as exc:
            raise StoreError(f"batch not applied to {self.path!r}: {exc}") from exc

    # -- tether copy (tether.store.copy.CopyableStore) ---------------------------------------

    async def dump_table(self, table: str, after: Sequence[Any] | None, limit: int) -> TablePage:
        return await copy.dump_table(self._db, table, after, limit)

    async def load_table(self, page: TablePage) -> TableLoad:
        return await copy.load_table(self._db, page)

    # -- reads --------------------------------------------------------------------------------

    async def store_time(self) -> float:
        return self.clock()

    async def get_actor(self, actor_id: str) -> ActorRecord | None:
        found = await self._read(reads.GET_ACTOR, (actor_id,), of=reads.of(GetActor(actor_id)))
        return reads.actor(found)

    async def list_actors(
        self, *, parent_id: str | None = None, on_corrupt: OnCorrupt | None = None
    ) -> list[ActorRecord]:
        sql = f"SELECT {rows.ACTOR_COLUMNS} FROM actors"
        if parent_id is None:
            found = await self._read(sql + " ORDER BY created_at, actor_id")
        else:
            found = await self._read(
                sql + " WHERE parent_id = ? ORDER BY created_at, actor_id", (parent_id,)
            )
        checked = rows.checked("actors", found, rows.ACTOR_TYPES, on_corrupt)
        return [ActorRecord(*r) for r in checked]

    async def load_snapshot(self, actor_id: str) -> Snapshot | None:
        found = await self._read(
            reads.LOAD_SNAPSHOT, (actor_id,), of=reads.of(LoadSnapshot(actor_id))
        )
        return reads.snapshot(found)

    async def load_journal(self, actor_id: str, after_seq: int, limit: int) -> list[JournalRow]:
        found = await self._read(
            reads.LOAD_JOURNAL,
            (actor_id, after_seq, limit),
            of=reads.of(LoadJournal(actor_id, after_seq, limit)),
        )
        return reads.journal(found)

    async def pending(
        self, actor_id: str, now: float, limit: int, *, on_corrupt: OnCorrupt | None = None
    ) -> list[StoredMessage]:
        found = await self._read(
            reads.PENDING, (actor_id, now, limit), of=reads.of(Pending(actor_id, now, limit))
        )
        return reads.pending(found, actor_id, on_corrupt)

    @property
    def batched_reads(self) -> BatchedReads:
        return self

    async def read_many(self, batch: Sequence[Read]) -> list[object]:
        """``tether.store.reads.BatchedReads``: every read's statement in one hop to the
        reader thread, each on its own snapshot (as the single reads are)."""
        found = await self._db.read_each([reads.query(r) for r in batch])
        return [reads.shape(r, f, self.path) for r, f in zip(batch, found, strict=True)]

    async def list_messages(
        self, actor_id: str, limit: int, *, on_corrupt: OnCorrupt | None = None
    ) -> list[StoredMessage]:
        return await self.pending(actor_id, _ALL_DUE, limit, on_corrupt=on_corrupt)

    async def scan_messages(
        self,
        cursor: MessageCursor | None,
        now: float,
        limit: int,
        *,
        skip_prefix: str | None = None,
        runtime_id: str | None = None,
    ) -> MessagePage:
        # The cursor is the last mailbox seq returned: with one writer at a time, seq order
        # is commit order, so no message can commit below it later. A message made ready
        # again gets a seq above every one ever assigned (writes.unpark).
        after = seq_after(cursor, "an SQLite store")
        skip = "AND NOT (m.parks = 0 AND substr(m.msg_id, 1, ?) = ?) " if skip_prefix else ""
        held = f"AND NOT {_HELD_ELSEWHERE} " if runtime_id is not None else ""
        found = await self._read(
            "SELECT m.seq, m.actor_id, m.msg_id, m.parks > 0 FROM mailbox m WHERE m.seq > ? "
            f"AND (m.deliver_at <= ? OR m.deliver_at = m.created_at) {skip}{held}"
            "ORDER BY m.seq LIMIT ?",
            (
                after,
                now,
                *((len(skip_prefix), skip_prefix) if skip_prefix else ()),
                *((runtime_id, self.clock()) if runtime_id is not None else ()),
                limit,
            ),
        )
        last = found[-1][0] if found else after
        return MessagePage(
            messages=[ScannedMessage(a, m, bool(r)) for _, a, m, r in found],
            cursor=cursor_at(last),
            more=len(found) >= limit,
        )

    async def orphaned(self, now: float, limit: int) -> list[str]:
        found = await self._read(
            "SELECT DISTINCT m.actor_id FROM mailbox m JOIN actors a ON a.actor_id = m.actor_id "
            "WHERE (m.deliver_at <= ? OR m.deliver_at = m.created_at) AND (a.lease_owner IS NULL OR a.lease_expires < ? "
            "OR a.lease_owner NOT IN (SELECT runtime_id FROM runtimes)) LIMIT ?",
            (now, self.clock(), limit),
        )
        return [r[0] for r in found]

    async def due_between(
        self, after: float, upto: float, *, runtime_id: str | None = None
    ) -> list[str]:
        held = f" AND NOT {_HELD_ELSEWHERE}" if runtime_id is not None else ""
        found = await self._read(
            "SELECT DISTINCT m.actor_id FROM mailbox m WHERE m.deliver_at > ? "
            f"AND m.deliver_at <= ? AND m.deliver_at > m.created_at{held}",
            (after, upto, *((runtime_id, self.clock()) if runtime_id is not None else ())),
        )
        return [r[0] for r in found]

    async def get_replies(self, msg_ids: list[str]) -> list[Reply]:
        out: list[Reply] = []
        for chunk in chunks(msg_ids):
            marks = ",".join("?" * len(chunk))
            found = await self._read(
                f"SELECT msg_id, ok, payload FROM replies WHERE msg_id IN ({marks})", chunk
            )
            out.extend(Reply(msg_id=m, ok=bool(ok), payload=p) for m, ok, p in found)
        return out

    async def find_dedup(self, actor_id: str, dedup_key: str) -> str | None:
        found = await self._read(
            "SELECT msg_id FROM dedup WHERE actor_id = ? AND dedup_key = ?", (actor_id, dedup_key)
        )
        return str(found[0][0]) if found else None

    async def watchers(self, actor_id: str) -> list[str]:
        found = await self._read(
            "SELECT watcher FROM watches WHERE watched = ? ORDER BY watcher", (actor_id,)
        )
        return [r[0] for r in found]

    async def dead_letter(self, msg_id: str) -> DeadLetter | None:
        found = await self._read(
            f"SELECT {rows.DEAD_COLUMNS} FROM dead_letters WHERE msg_id = ?", (msg_id,)
        )
        return rows.dead_letter(found[0]) if found else None

    async def dead_letters(
        self, actor_id: str | None = None, *, on_corrupt: OnCorrupt | None = None
    ) -> list[DeadLetter]:
        sql = f"SELECT {rows.DEAD_COLUMNS} FROM dead_letters"
        found = await (
            self._read(sql + " WHERE actor_id = ? ORDER BY created_at", (actor_id,))
            if actor_id is not None
            else self._read(sql + " ORDER BY created_at")
        )
        if on_corrupt is None:
            return [rows.dead_letter(r) for r in found]
        checked = rows.checked("dead_letters", found, rows.DEAD_TYPES, on_corrupt)
        return [rows.dead_letter(r) for r in checked]

    async def list_runtimes(self, *, on_corrupt: OnCorrupt | None = None) -> list[RuntimeRecord]:
        found = await self._read(f"SELECT {rows.RUNTIME_COLUMNS} FROM runtimes ORDER BY runtime_id")
        return [
            rows.runtime(r) for r in rows.checked("runtimes", found, rows.RUNTIME_TYPES, on_corrupt)
        ]

    # -- leases and runtimes ------------------------------------------------------------------

    async def renew_leases(self, owner: str, ttl: float) -> None:
        async def renew(db: Tx) -> None:
            await db.execute(
                "UPDATE actors SET lease_expires = ? WHERE lease_owner = ?",
                (self.clock() + ttl, owner),
            )

        await self._db.transaction(renew)

    async def register_runtime(self, runtime_id: str, host: str, pid: int, started: float) -> None:
        await self._write(
            [
                (
                    "INSERT OR REPLACE INTO runtimes VALUES (?, ?, ?, ?)",
                    (runtime_id, host, pid, started),
                )
            ]
        )

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

    # -- dead letters and retention -----------------------------------------------------------

    async def reuse_id(self, record: ActorRecord, *, dependents: Sequence[str] = ()) -> list[str]:
        return await self._db.transaction(
            lambda tx: reuse.reuse_id(tx, record, dependents=dependents)
        )

    async def retry_dead_letter(
        self, msg_id: str, now: float, *, audit: AuditRecord | None = None
    ) -> DeadLetter | None:
        letter = await self.dead_letter(msg_id)
        if letter is None:
            return None

        async def move(db: Tx) -> bool:
            cur = await db.execute(
                # parks = 1: the message has a past (ledger rows, approvals) that its next
                # delivery must read, though its attempts start again from 0. A new seq
                # (AUTOINCREMENT): ready again for every runtime's scan.
                "INSERT INTO mailbox (msg_id, actor_id, type, payload, deliver_at, attempts, errors, wants_reply, created_at, parks) "
                "SELECT msg_id, actor_id, type, payload, ?, 0, NULL, 0, ?, 1 FROM dead_letters WHERE msg_id = ?",
                (now, now, msg_id),
            )
            if cur.rowcount != 1:
                return False
            await db.execute("DELETE FROM dead_letters WHERE msg_id = ?", (msg_id,))
            await db.execute("DELETE FROM replies WHERE msg_id = ?", (msg_id,))
            await audit_log.append(db, audit)
            return True

        return letter if await self._db.transaction(move) else None

    async def discard_dead_letter(self, msg_id: str, *, audit: AuditRecord | None = None) -> bool:
        async def delete(db: Tx) -> bool:
            cur = await db.execute("DELETE FROM dead_letters WHERE msg_id = ?", (msg_id,))
            if cur.rowcount != 1:
                return False
            await audit_log.append(db, audit)
            return True

        return await self._db.transaction(delete)

    async def purge(self, before: float) -> int:
        counts = await self._write(
            [
                ("DELETE FROM dedup WHERE created_at < ?", (before,)),
                ("DELETE FROM replies WHERE created_at < ?", (before,)),
            ]
        )
        return sum(counts)
