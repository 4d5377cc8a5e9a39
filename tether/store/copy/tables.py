"""What ``tether copy`` moves between backends, and the two methods each backend implements.

A store's durable contents are its tables, and every backend keeps the same ones with the
same columns (SQLite's schema is the reference; PostgreSQL's mirrors it with its own types),
so a copy is rows, table by table, page by page, in key order. The values that cross are
portable: ``None``, ``int``, ``float``, ``str``, ``bytes`` (a backend with booleans hands
them out as they are and takes ints back for them).

Not copied: ``runtimes`` (the registry of processes serving a store: a stopped store has no
live one, and a copied row would make the destination look served) and each backend's own
bookkeeping (schema version, PostgreSQL's transaction ids and applied-batch ids): the
destination writes its own when it is created, and its defaults fill them as rows arrive.

A backend that can be copied from and to implements ``CopyableStore``: ``dump_table`` reads
a page, ``load_table`` writes one, in one transaction, keeping a row whose key is there
already. Loading is therefore idempotent: a copy cut short leaves whole pages behind, and the
same copy run again (``resume``) skips what it finds and writes the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import msgspec

#: Every table a copy moves, in the order it moves them, with the columns of its key (pages
#: are read in key order, each after the last key of the one before). Journals and snapshots
#: come before the actors, so that a destination deriving an actor's column from its journal
#: (``head_seq``, where the source has none) finds the journal already there.
COPY_TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("journal", ("actor_id", "seq")),
    ("snapshots", ("actor_id",)),
    ("actors", ("actor_id",)),
    ("mailbox", ("msg_id",)),
    ("dedup", ("actor_id", "dedup_key")),
    ("replies", ("msg_id",)),
    ("dead_letters", ("msg_id",)),
    ("watches", ("watched", "watcher")),
    ("effects", ("msg_id", "idx")),
    ("approvals", ("request_id",)),
    ("audit", ("seq",)),
)

KEYS: dict[str, tuple[str, ...]] = dict(COPY_TABLES)


class TablePage(msgspec.Struct, frozen=True):
    """Rows of one table, in key order."""

    table: str
    columns: tuple[str, ...]  # every column the source keeps for this table, its own aside
    rows: list[tuple[Any, ...]]
    # the key of the last row (pass it as ``after`` for the next page); None: no rows
    last: tuple[Any, ...] | None
    total: int | None = None  # rows in the whole table: given with the first page only


class TableLoad(msgspec.Struct, frozen=True):
    """What loading one page did."""

    inserted: int  # rows written (the others' keys were there already)
    ignored: tuple[str, ...] = ()  # columns of the page the destination has no place for


@runtime_checkable
class CopyableStore(Protocol):
    """The two methods a backend implements to be copied from and to (``tether copy``)."""

    async def dump_table(self, table: str, after: Sequence[Any] | None, limit: int) -> TablePage:
        """Up to ``limit`` rows of ``table`` (a name of ``COPY_TABLES``) whose key is after
        ``after`` (None: from the first), in key order, with every column the store keeps
        for it except its own bookkeeping; ``total`` (the table's row count) when ``after``
        is None. ``limit`` 0 reads only the count."""
        ...

    async def load_table(self, page: TablePage) -> TableLoad:
        """Write the rows of ``page`` in one transaction, keeping any row whose key (or other
        unique column) is there already. Columns the store does not have are left out and
        named in ``ignored``; columns it has that the page lacks get their defaults, or are
        derived (an actor's ``head_seq`` from its journal, loaded before it)."""
        ...


def key_of(table: str) -> tuple[str, ...]:
    """The key columns of a copied table; ``ValueError`` for another name (table names are
    never taken from input, but a backend builds SQL from them: refuse anything else)."""
    try:
        return KEYS[table]
    except KeyError:
        raise ValueError(f"{table!r} is not a table tether copies") from None
