"""The PostgreSQL store's side of ``tether copy`` (``tether.store.copy.tables``).

Out: every column of a copied table but the store's own bookkeeping (``mailbox.xid``, the
transaction that made a message ready: the destination's load stamps its own), in key order.
In: one transaction per page, ``ON CONFLICT DO NOTHING`` keeping a row already there; ints
become booleans where the column is one (SQLite keeps them as 0 and 1); a sequence-numbered
column (``mailbox.seq``, the audit log's identity ``seq``) takes the copied numbers and its
sequence is moved past them, so new rows number on after the copied ones; an actor whose page
has no ``head_seq`` (a store without one) gets it from its journal and snapshot, copied
before it.

``PostgresTables(store)`` is this side for a ``PostgresStore``: the copy adapts a store of the
``postgresql`` scheme that does not implement ``CopyableStore`` itself with it. It reads
through the store's readers and writes through its writer, so a copy gets the store's own
connection settings, schema and exactly-once transactions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import sql

from tether.errors import StoreError
from tether.store.copy.tables import TableLoad, TablePage, key_of
from tether.store.postgres.store import PostgresStore

Cursor = psycopg.Cursor[tuple[Any, ...]]

#: Columns that are the store's bookkeeping, never copied out (the load stamps its own).
PRIVATE = {"mailbox": ("xid",)}

_COLUMNS = """
SELECT column_name, data_type, pg_get_serial_sequence(%(table)s, column_name) IS NOT NULL
       OR is_identity = 'YES'
FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = %(table)s
ORDER BY ordinal_position
"""


class Column:
    __slots__ = ("boolean", "name", "numbered")

    def __init__(self, name: str, data_type: str, numbered: bool) -> None:
        self.name, self.boolean, self.numbered = name, data_type == "boolean", numbered


def _columns(cur: Cursor, table: str) -> list[Column]:
    found = [Column(str(n), str(t), bool(s)) for n, t, s in cur.execute(_COLUMNS, {"table": table})]
    if not found:
        raise StoreError(f"the store has no table {table!r} in its schema: it is damaged")
    return found


def _ident(*names: str) -> sql.Composed:
    return sql.SQL(", ").join(map(sql.Identifier, names))


def dump(cur: Cursor, table: str, after: Sequence[Any] | None, limit: int) -> TablePage:
    key = key_of(table)
    private = PRIVATE.get(table, ())
    columns = tuple(c.name for c in _columns(cur, table) if c.name not in private)
    total = None
    if after is None:
        row = cur.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))
        total = int(row.fetchone()[0])  # type: ignore[index]
    if limit == 0:
        return TablePage(table, columns, [], None, total)
    where: sql.Composable = sql.SQL("")
    params: list[Any] = []
    if after is not None:
        if len(after) != len(key):
            raise ValueError(f"the key of {table} has {len(key)} column(s), not {len(after)}")
        where = sql.SQL(" WHERE ({}) > ({})").format(
            _ident(*key), sql.SQL(", ").join(sql.Placeholder() * len(key))
        )
        params += list(after)
    query = sql.SQL("SELECT {} FROM {}{} ORDER BY {} LIMIT %s").format(
        _ident(*columns), sql.Identifier(table), where, _ident(*key)
    )
    rows = [tuple(r) for r in cur.execute(query, [*params, limit]).fetchall()]
    at = [columns.index(k) for k in key]
    last = tuple(rows[-1][i] for i in at) if rows else None
    return TablePage(table, columns, rows, last, total)


def load(cur: Cursor, page: TablePage) -> TableLoad:
    key_of(page.table)
    have = {c.name: c for c in _columns(cur, page.table)}
    keep = [i for i, name in enumerate(page.columns) if name in have]
    ignored = tuple(c for c in page.columns if c not in have)
    if not page.rows:
        return TableLoad(0, ignored)
    names = [page.columns[i] for i in keep]
    booleans = [have[n].boolean for n in names]
    rows = [
        tuple(bool(v) if b and v is not None else v for v, b in zip(values, booleans, strict=True))
        for values in ([row[i] for i in keep] for row in page.rows)
    ]
    overriding = sql.SQL(" OVERRIDING SYSTEM VALUE") if page.table == "audit" else sql.SQL("")
    query = sql.SQL("INSERT INTO {} ({}){} VALUES ({}) ON CONFLICT DO NOTHING").format(
        sql.Identifier(page.table),
        _ident(*names),
        overriding,
        sql.SQL(", ").join(sql.Placeholder() * len(names)),
    )
    cur.executemany(query, rows)
    inserted = max(cur.rowcount, 0)
    for name in names:
        if have[name].numbered:
            cur.execute(
                sql.SQL(
                    "SELECT setval(pg_get_serial_sequence(%s, %s), max({})) FROM {} HAVING "
                    "max({}) IS NOT NULL"
                ).format(sql.Identifier(name), sql.Identifier(page.table), sql.Identifier(name)),
                (page.table, name),
            )
    if page.table == "actors" and "head_seq" in have and "head_seq" not in page.columns:
        ids = [row[page.columns.index("actor_id")] for row in page.rows]
        cur.execute(
            "UPDATE actors SET head_seq = GREATEST("
            " COALESCE((SELECT max(seq) FROM journal j WHERE j.actor_id = actors.actor_id), 0),"
            " COALESCE((SELECT seq FROM snapshots s WHERE s.actor_id = actors.actor_id), 0))"
            " WHERE actor_id = ANY(%s)",
            (ids,),
        )
    return TableLoad(inserted, ignored)


class PostgresTables:
    """``CopyableStore`` for a ``PostgresStore`` (module docstring)."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    async def dump_table(self, table: str, after: Sequence[Any] | None, limit: int) -> TablePage:
        def read(conn: psycopg.Connection[tuple[Any, ...]]) -> TablePage:
            with conn.cursor() as cur:
                return dump(cur, table, after, limit)

        return await self.store._readers.read(read)

    async def load_table(self, page: TablePage) -> TableLoad:
        write: Callable[[Cursor], TableLoad] = lambda cur: load(cur, page)  # noqa: E731
        return await self.store._writers.alone(write, TableLoad)
