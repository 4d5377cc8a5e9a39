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
  result instead. So a write is applied once, never lost and never doubled.
* The server stays unreachable past ``retry_for`` seconds: ``StoreError``, saying whether
  the outcome is known. An unknown outcome stays unknown to the caller; it is never guessed.

Old rows of ``batches`` are deleted now and then (a retry comes seconds after its attempt).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
import psycopg
from psycopg import errors

from tether.errors import StoreError
from tether.store.postgres.conn import Conn, PgConnection, Settings, broken

T = TypeVar("T")
Cursor = psycopg.Cursor[tuple[Any, ...]]

#: Errors after which the transaction rolled back on its own and may simply run again.
_TRANSIENT = (errors.DeadlockDetected, errors.SerializationFailure, errors.LockNotAvailable)
_KEEP_BATCHES = "10 minutes"  # a retry of a batch comes seconds after its first attempt
_PURGE_EVERY = 1000  # transactions between purges of old batch ids


class Writer:
    """The store's writer connection (``PgConnection``) and its exactly-once transactions."""

    def __init__(self, settings: Settings, where: str, *, retry_for: float) -> None:
        self.where = where
        self.retry_for = retry_for
        self.conn = PgConnection(settings, "writer", where)
        self._since_purge = 0

    async def open(self) -> None:
        await self.conn.open()

    async def close(self) -> None:
        await self.conn.close()

    async def run(self, fn: Callable[[Cursor], T], result_type: type[T] | None = None) -> T:
        """Run ``fn(cursor)`` in one transaction on the writer's thread, exactly once (module
        docstring). ``result_type``: how the stored result decodes when a retry finds the
        first attempt committed (None: ``fn`` returns nothing worth keeping, or a plain
        value msgpack keeps as is)."""
        batch_id = uuid.uuid4()
        return await self.conn.call_raw(self._run, fn, batch_id, result_type)

    def _run(
        self, fn: Callable[[Cursor], T], batch_id: uuid.UUID, result_type: type[T] | None
    ) -> T:
        deadline = time.monotonic() + self.retry_for
        pause = 0.05
        unknown = False  # an attempt's commit may have happened
        while True:
            conn: Conn | None = None
            try:
                conn = self.conn.connection()
                return self._attempt(conn, fn, batch_id, result_type)
            except _TRANSIENT as exc:
                if time.monotonic() > deadline:
                    raise StoreError(f"write to {self.where} failed: {exc}") from exc
            except psycopg.Error as exc:
                if not broken(exc, conn):
                    raise StoreError(f"write to {self.where} failed: {exc}") from exc
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

    def _attempt(
        self,
        conn: Conn,
        fn: Callable[[Cursor], T],
        batch_id: uuid.UUID,
        result_type: type[T] | None,
    ) -> T:
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("INSERT INTO batches (batch_id) VALUES (%s)", (batch_id,))
                result = fn(cur)
                cur.execute(
                    "UPDATE batches SET result = %s WHERE batch_id = %s",
                    (msgspec.msgpack.encode(result), batch_id),
                )
        except errors.UniqueViolation as exc:
            if exc.diag.constraint_name != "batches_pkey":
                raise
            return self._committed_before(conn, batch_id, result_type)
        self._since_purge += 1
        if self._since_purge >= _PURGE_EVERY:
            self._since_purge = 0
            conn.execute(
                f"DELETE FROM batches WHERE created_at < clock_timestamp() - interval "
                f"'{_KEEP_BATCHES}'"
            )
        return result

    def _committed_before(self, conn: Conn, batch_id: uuid.UUID, result_type: type[T] | None) -> T:
        """The result an earlier attempt of this batch committed (its outcome was unknown)."""
        row = conn.execute("SELECT result FROM batches WHERE batch_id = %s", (batch_id,)).fetchone()
        if row is None or row[0] is None:
            raise StoreError(f"write to {self.where}: batch {batch_id} committed without a result")
        if result_type is None:
            return msgspec.msgpack.decode(row[0])  # type: ignore[no-any-return]
        return msgspec.msgpack.decode(row[0], type=result_type)
