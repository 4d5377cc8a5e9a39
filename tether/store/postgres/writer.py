"""The writer: one connection on one thread, each write a transaction applied exactly once.

A write is a function of a cursor, run in one transaction on the writer's thread (one thread
hop, as in the SQLite store). What can go wrong between the store and the server, and what
the writer does:

* The transaction fails before it commits (a deadlock the server broke, a serialization
  failure): nothing of it stayed; it is run again.
* The connection breaks (the backend was terminated, the server restarted, the network was
  cut) before the outcome is known: the commit may or may not have happened. Each
  transaction therefore first inserts its *batch id* into ``batches``, and at its end stores
  its result there. Run again on a new connection, under the same id, it either commits (the
  first attempt never did) or finds the id taken — its insert waits for the first attempt's
  transaction to end if that is still running on the old backend — and returns the stored
  result instead. So a write is applied once, never lost and never doubled. The retry first
  ends the old backend, when the server still runs it and the connection was direct
  (``_end_backend``): a transaction cut off by a silent network fault would otherwise hold
  the batch id, and its locks, until the server's timeouts ended it.
* The server stays unreachable past ``retry_for`` seconds: ``StoreError``, saying whether
  the outcome is known. An unknown outcome stays unknown to the caller; it is never guessed.

A batch of the group committer runs in *pipeline mode*: its statements are sent without
waiting for each one's answer, the transaction costing two round trips instead of one per
statement — one to read the fences (``writes.check_fences``: the statements after it depend
on it), one for the rest and the commit. A statement whose answer the batch needs (a spawn's
record, a lease won) waits for it, an extra round trip for those batches only. On a machine
whose cores the server shares, each round trip waits for both processes to be scheduled:
they, not the server's work, were most of a batch's time. After the commit, in the same
pipeline, goes the store's notice when one is due (``then``): outside the write transaction,
without a round trip of its own.

Old rows of ``batches`` are deleted now and then (a retry comes seconds after its attempt).

A store has ``writers`` such connections (``Writers``), each its own ``Writer``: the group
committer's lanes commit batches on them at once (``tether.runtime.lanes``: one actor's
writes always on one lane, so in order). The exactly-once retry above is per connection and
per batch id: a fault on one connection is retried on that one, the others go on. A write
outside the batches (lease renewal, a runtime's registration, a person's decision) runs
alone: it waits until no batch is in flight and holds every writer meanwhile, as with one
writer. Two batches of one runtime never share an actor (the lanes), so they lock disjoint
``actors`` rows; lease renewal, which locks every row this runtime owns, would otherwise run
beside them, and a claim of one of those rows (``FOR UPDATE SKIP LOCKED``) would skip it as
held by someone else.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import msgspec
import psycopg
from psycopg import errors

from tether.errors import StoreError
from tether.store.postgres.conn import Conn, PgConnection, Settings, broken
from tether.store.postgres.writes import refusal

T = TypeVar("T")
Cursor = psycopg.Cursor[tuple[Any, ...]]

#: Errors after which the transaction rolled back on its own and may simply run again.
_TRANSIENT = (errors.DeadlockDetected, errors.SerializationFailure, errors.LockNotAvailable)
_KEEP_BATCHES = "10 minutes"  # a retry of a batch comes seconds after its first attempt
_PURGE_EVERY = 1000  # transactions between purges of old batch ids


class Writer:
    """The store's writer connection (``PgConnection``) and its exactly-once transactions."""

    def __init__(
        self, settings: Settings, where: str, *, retry_for: float, name: str = "writer"
    ) -> None:
        self.where = where
        self.retry_for = retry_for
        self.conn = PgConnection(settings, name, where)
        self._since_purge = 0

    async def open(self) -> None:
        await self.conn.open()

    async def close(self) -> None:
        await self.conn.close()

    async def run(
        self,
        fn: Callable[[Cursor], T],
        result_type: type[T] | None = None,
        *,
        pipelined: bool = False,
        then: Callable[[Conn], None] | None = None,
    ) -> T:
        """Run ``fn(cursor)`` in one transaction on the writer's thread, exactly once (module
        docstring). ``result_type``: how the stored result decodes when a retry finds the
        first attempt committed (None: ``fn`` returns nothing worth keeping, or a plain
        value msgpack keeps as is). ``pipelined``: in pipeline mode, for an ``fn`` that reads
        no statement's outcome but through ``fetch*`` (``rowcount`` is not known there).
        ``then(conn)``: called after the commit of a pipelined transaction, its statements
        sent in the same pipeline (the store's notice)."""
        job = Job(fn, uuid.uuid4(), result_type, pipelined, then)
        return await self.conn.call_raw(self._run, job)

    def _run(self, job: Job[T]) -> T:
        deadline = time.monotonic() + self.retry_for
        pause = 0.05
        unknown = False  # an attempt's commit may have happened
        lost: tuple[int, Any] | None = None  # the backend of the connection that broke
        while True:
            conn: Conn | None = None
            try:
                conn = self.conn.connection()
                if lost is not None:
                    _end_backend(conn, lost)
                    lost = None
                return self._attempt(conn, job)
            except _TRANSIENT as exc:
                if time.monotonic() > deadline:
                    raise StoreError(f"write to {self.where} failed: {exc}") from exc
            except psycopg.Error as exc:
                if not broken(exc, conn):
                    why = refusal(exc) or exc
                    raise StoreError(f"write to {self.where} failed: {why}") from exc
                lost = lost or self.conn.backend
                self.conn.drop()
                unknown = unknown or conn is not None
                if time.monotonic() > deadline:
                    outcome = (
                        "it may or may not have been applied" if unknown else "it was not applied"
                    )
                    raise StoreError(
                        f"write to {self.where} failed: the server was unreachable for "
                        f"{self.retry_for:g} s ({exc}); {outcome}"
                    ) from exc
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def _attempt(self, conn: Conn, job: Job[T]) -> T:
        try:
            if job.pipelined:
                with conn.pipeline():
                    result = self._transaction(conn, job)
                    if job.then is not None:
                        job.then(conn)
            else:
                result = self._transaction(conn, job)
        except errors.UniqueViolation as exc:
            if exc.diag.constraint_name != "batches_pkey":
                raise
            return self._committed_before(conn, job)
        self._since_purge += 1
        if self._since_purge >= _PURGE_EVERY:
            self._since_purge = 0
            conn.execute(
                f"DELETE FROM batches WHERE created_at < clock_timestamp() - interval "
                f"'{_KEEP_BATCHES}'"
            )
        return result

    @staticmethod
    def _transaction(conn: Conn, job: Job[T]) -> T:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("INSERT INTO batches (batch_id) VALUES (%s)", (job.batch_id,))
            result = job.fn(cur)
            cur.execute(
                "UPDATE batches SET result = %s WHERE batch_id = %s",
                (msgspec.msgpack.encode(result), job.batch_id),
            )
        return result

    def _committed_before(self, conn: Conn, job: Job[T]) -> T:
        """The result an earlier attempt of this batch committed (its outcome was unknown)."""
        found = conn.execute("SELECT result FROM batches WHERE batch_id = %s", (job.batch_id,))
        row = found.fetchone()
        if row is None or row[0] is None:
            raise StoreError(
                f"write to {self.where}: batch {job.batch_id} committed without a result"
            )
        if job.result_type is None:
            return msgspec.msgpack.decode(row[0])  # type: ignore[no-any-return]
        return msgspec.msgpack.decode(row[0], type=job.result_type)


def _end_backend(conn: Conn, backend: tuple[int, Any]) -> None:
    """End ``backend`` (pid, start) if the server still runs it: the backend of a connection
    that broke in the middle of a write. Its transaction may still hold the write's locks and
    batch id with nothing to end it but the server's timeouts (none runs while a pipeline
    waits for its Sync, and a network cut is heard of only by keepalives). Ended, it rolls
    back unless it had committed, and the retry finds the batch committed or free at once,
    instead of waiting for it. A role that may not end it leaves it to the timeouts."""
    with contextlib.suppress(errors.InsufficientPrivilege):
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE pid = %s AND backend_start = %s",
            backend,
        )


@dataclasses.dataclass(frozen=True)
class Job(Generic[T]):
    """One write: its function, its batch id (the same in every attempt), how a stored result
    decodes, whether it runs in pipeline mode, and what follows its commit there."""

    fn: Callable[[Cursor], T]
    batch_id: uuid.UUID
    result_type: type[T] | None
    pipelined: bool
    then: Callable[[Conn], None] | None


class Writers:
    """The store's writer connections (module docstring): a batch takes one that is free, the
    first free one (so a process that writes one thing at a time uses, and connects, only the
    first); a write ``alone`` waits for every one of them. Only the first connects at
    ``open``; the others on their first write."""

    def __init__(self, settings: Settings, where: str, *, count: int, retry_for: float) -> None:
        self.all = [
            Writer(settings, where, retry_for=retry_for, name=f"writer{i}" if i else "writer")
            for i in range(count)
        ]
        self._free = list(self.all)  # in the order of ``all``
        self._alone = 0  # writes waiting to run alone, or running: no batch takes a writer
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def first(self) -> Writer:
        return self.all[0]

    async def open(self) -> None:
        for w in self.all[1:]:
            w.conn.start()
        await self.first.open()

    async def close(self) -> None:
        for w in self.all:
            await w.close()

    async def run(
        self,
        fn: Callable[[Cursor], T],
        result_type: type[T] | None = None,
        *,
        pipelined: bool = False,
        then: Callable[[Conn], None] | None = None,
    ) -> T:
        """``Writer.run`` on the first free writer."""
        while not self._free or self._alone:
            await self._changed()
        writer = self._free.pop(0)
        try:
            return await writer.run(fn, result_type, pipelined=pipelined, then=then)
        finally:
            self._give([writer])

    async def alone(self, fn: Callable[[Cursor], T], result_type: type[T] | None = None) -> T:
        """``Writer.run`` with no batch in flight on any writer, meanwhile or before."""
        self._alone += 1
        try:
            while len(self._free) < len(self.all):
                await self._changed()
            taken, self._free = self._free, []
            try:
                return await taken[0].run(fn, result_type)
            finally:
                self._give(taken)
        finally:
            self._alone -= 1
            self._wake()

    async def _changed(self) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)

    def _give(self, writers: list[Writer]) -> None:
        self._free.extend(writers)
        if len(self._free) > 1:
            self._free.sort(key=self.all.index)
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
