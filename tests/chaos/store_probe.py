"""What the world's killer reads from the tether store while runtimes serve it: counts of
pending approvals, effects in flight and mailbox rows, on any backend.

The driver is synchronous (it sleeps, signals and reaps processes); the store is async. A
``StoreProbe`` keeps the store open in a blocking portal's event loop and reads it through
``StoreAdmin`` only, so the same probe reads an SQLite file or a PostgreSQL database: the
world runs on whatever URL it is given.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import msgspec
from anyio.from_thread import BlockingPortal, start_blocking_portal

import tether
from tether.store.records import PARKED

T = TypeVar("T")


class Mailbox(msgspec.Struct, frozen=True):
    """The mailbox of every actor at one moment."""

    messages: int
    parked: int  # waiting on an approval or a quarantined effect
    # changes whenever any message comes, goes, is retried or is parked: "nothing moved"
    fingerprint: str


class StoreProbe:
    """A read-only view of the store at ``url`` for the world driver (``StoreProbe.open``).
    Every read returns 0 / an empty mailbox while the store cannot be read (not created yet,
    or the server briefly unreachable): the figures it feeds are context, not verdicts."""

    def __init__(self, url: str, portal: BlockingPortal) -> None:
        self.url = url
        self._portal = portal
        self._store: tether.Store | None = None

    @classmethod
    @contextlib.contextmanager
    def open(cls, url: str) -> Iterator[StoreProbe]:
        """A probe of the store at ``url``, for the ``with`` block (its store closed after)."""
        with start_blocking_portal() as portal:
            probe = cls(url, portal)
            try:
                yield probe
            finally:
                if probe._store is not None:
                    with contextlib.suppress(Exception):
                        portal.call(probe._store.close)

    def _read(self, fn: Callable[[tether.Store], Awaitable[T]], empty: T) -> T:
        portal = self._portal
        try:
            if self._store is None:
                store = tether.open_store(self.url, create=False)
                portal.call(store.open)
                self._store = store
            found = self._store

            async def read() -> T:
                return await fn(found)

            return portal.call(read)
        except tether.TetherError:
            return empty

    def pending_approvals(self) -> int:
        async def read(store: tether.Store) -> int:
            return len(await store.find_approvals(status="pending", on_corrupt=_ignore))

        return self._read(read, 0)

    def effects_in_flight(self) -> int:
        """Ledger rows with an intent and no receipt."""

        async def read(store: tether.Store) -> int:
            return len(await store.find_effects(status="pending", on_corrupt=_ignore))

        return self._read(read, 0)

    def mailbox(self) -> Mailbox:
        async def read(store: tether.Store) -> Mailbox:
            seen = hashlib.sha256()
            count = parked = 0
            for actor in await store.list_actors(on_corrupt=_ignore):
                messages = await store.list_messages(actor.actor_id, 1_000_000, on_corrupt=_ignore)
                for m in messages:
                    count += 1
                    parked += m.deliver_at >= PARKED
                    seen.update(f"{m.msg_id}/{m.attempts}/{m.deliver_at}\n".encode())
            return Mailbox(count, parked, seen.hexdigest())

        return self._read(read, Mailbox(0, 0, ""))


def _ignore(key: str, error: tether.CorruptRecordError) -> None:
    """A damaged row is the checker's business, not the killer's."""
