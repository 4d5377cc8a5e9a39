"""Wakeups between processes sharing a PostgreSQL store: LISTEN/NOTIFY, batched, as a hint.

A runtime finds work stored by other processes by scanning the store every ``poll_interval``;
that stays the correctness path. This makes it prompt: after its writes commit, a store sends
one ``NOTIFY`` on the store's channel (never inside a write transaction: a NOTIFY-ing commit
takes a lock that serialises every commit of the server), at most one every ``_EVERY``
seconds however many batches committed meanwhile; and a dedicated connection ``LISTEN``s to
the channel, waking the runtime's scheduler at once (``ChangeFeed``). A store ignores its
own notices (their payload is its id). A lost listening connection is made again after a
pause, and the runtime is woken once then, in case notices were missed.

A batch that concerns no other runtime (``Batch.local``: every message for an actor active in
the writing runtime, every reply for an ask waiting there) sends none: the others' scans leave
the mail of actors another live runtime holds out, so a notice would only wake them to find
nothing. A batch's notice, when one is due, rides its pipeline after the commit (``inline``):
no round trip of the writer's own. A commit that found none due (one was sent less than
``_EVERY`` ago) has its notice sent by a task of this store ``_EVERY`` later, covering every
commit since.

LISTEN needs a session of its own: it works behind PgBouncer in session mode, not in
transaction mode (where the scan's polling alone carries the work).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
import zlib
from collections.abc import Callable

import psycopg
from psycopg import sql

from tether.errors import StoreError
from tether.store.postgres.conn import Conn, PgConnection, Settings

_EVERY = 0.01  # seconds between two notices of one store, at least
_RETRY = 1.0  # seconds before a lost listening connection is made again


def channel_of(schema: str) -> str:
    """The store's channel: one per schema (notices are per database already)."""
    return f"tether_{zlib.crc32(schema.encode()):08x}"


class Notices:
    """The LISTEN/NOTIFY of one ``PostgresStore``: its ``ChangeFeed`` (``listen``), and the
    notices it sends after its writes (``committed``)."""

    def __init__(self, settings: Settings, writer: PgConnection) -> None:
        self.settings = settings
        self.writer = writer
        self.channel: str | None = None  # set once the store knows its schema
        self.me = uuid.uuid4().hex  # this store's notices carry it: its own are ignored
        self._wakes: list[Callable[[], None]] = []
        self._pending: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._last = 0.0  # time.monotonic() of the last notice sent (either thread sets it)

    def listen(self, wake: Callable[[], None]) -> None:
        """``ChangeFeed.listen``: the first caller starts the listening connection."""
        self._wakes.append(wake)
        if len(self._wakes) == 1 and self.channel is not None:
            self._tasks.append(asyncio.get_running_loop().create_task(self._listen()))

    def inline(self, conn: Conn) -> bool:
        """On the writer's thread, in the pipeline of a batch that just committed: queue the
        notice there if one is due (``_EVERY`` since the last one); whether it did."""
        now = time.monotonic()
        if self.channel is None or now - self._last < _EVERY:
            return False
        self._last = now
        self._send(conn)
        return True

    def committed(self) -> None:
        """A write of this store committed and no notice followed it: tell the others (soon,
        batched)."""
        if self.channel is None:
            return
        if self._pending is None:
            self._pending = asyncio.Event()
            self._tasks.append(asyncio.get_running_loop().create_task(self._notify()))
        self._pending.set()

    async def close(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._pending = None
        self._wakes.clear()

    def _wake(self) -> None:
        for wake in list(self._wakes):
            wake()

    async def _notify(self) -> None:
        pending = self._pending
        while pending is not None:
            await pending.wait()
            pending.clear()
            # A notice that cannot be sent is a hint lost: the others poll all the same.
            with contextlib.suppress(psycopg.Error, StoreError):
                self._last = time.monotonic()
                await self.writer.call(self._send)
            await asyncio.sleep(_EVERY)

    def _send(self, conn: Conn) -> None:
        conn.execute("SELECT pg_notify(%s, %s)", (self.channel, self.me))

    async def _listen(self) -> None:
        first = True
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.settings.conninfo(), autocommit=True
                )
                async with conn:
                    await conn.execute(
                        sql.SQL("LISTEN {}").format(sql.Identifier(self.channel or ""))
                    )
                    if not first:
                        self._wake()  # notices may have been lost while it was down
                    first = False
                    async for notice in conn.notifies():
                        if notice.payload != self.me:
                            self._wake()
            except psycopg.Error:  # the server went away: polling carries the work meanwhile
                first = False
            await asyncio.sleep(_RETRY)
