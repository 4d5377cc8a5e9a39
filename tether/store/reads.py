"""Reads of many actors in one store call: a store's optional ``batched_reads``.

When thousands of actors are activated at once (a runtime opening on a store whose sessions
hold mail, after a crash), each one reads its record, its snapshot, its journal and its mail:
four calls, each a thread hop on SQLite, queued behind everyone else's. A store that declares
``batched_reads`` (an object with ``read_many``) lets the runtime gather the reads of the same
moment into one call instead (``tether.runtime.reads``). A store without it is read one call
at a time, as before: it is an optional fast path, declared, never guessed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

from tether.errors import CorruptRecordError
from tether.store.admin import OnCorrupt

if TYPE_CHECKING:
    from tether.store.protocol import Store


class GetActor(NamedTuple):
    """``store.get_actor(actor_id)``."""

    actor_id: str


class LoadSnapshot(NamedTuple):
    """``store.load_snapshot(actor_id)``."""

    actor_id: str


class LoadJournal(NamedTuple):
    """``store.load_journal(actor_id, after_seq, limit)``."""

    actor_id: str
    after_seq: int
    limit: int


class Pending(NamedTuple):
    """``store.pending(actor_id, now, limit, on_corrupt=on_corrupt)``."""

    actor_id: str
    now: float
    limit: int
    on_corrupt: OnCorrupt | None = None


Read = GetActor | LoadSnapshot | LoadJournal | Pending


class BatchedReads(Protocol):
    """A store's way to make many reads in one call (SQLite: one hop to its reader thread)."""

    async def read_many(self, reads: Sequence[Read]) -> list[object]:
        """What each of ``reads`` returns when made alone, in order. Each read sees at least
        every write committed before ``read_many`` was called (as it would alone). Where one
        read alone would raise (a damaged row or page: ``CorruptRecordError``, naming its
        actor), its place holds that exception, and the other reads are answered all the
        same. A failure of the call as a
        whole (a closed store, an unreadable file) raises ``StoreError``."""
        ...


async def read_one_by_one(store: Store, reads: Sequence[Read]) -> list[object]:
    """``read_many`` by the single reads, one after the other: the reference it is held to
    (the conformance suite), and the batched reads of a store whose reads never wait."""
    out: list[object] = []
    for read in reads:
        try:
            match read:
                case GetActor(actor_id):
                    out.append(await store.get_actor(actor_id))
                case LoadSnapshot(actor_id):
                    out.append(await store.load_snapshot(actor_id))
                case LoadJournal(actor_id, after_seq, limit):
                    out.append(await store.load_journal(actor_id, after_seq, limit))
                case Pending(actor_id, now, limit, on_corrupt):
                    out.append(await store.pending(actor_id, now, limit, on_corrupt=on_corrupt))
        except CorruptRecordError as exc:
            out.append(exc)
    return out
