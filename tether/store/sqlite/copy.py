"""The SQLite store's side of ``tether copy`` (``tether.store.copy.tables``): a page of a
table out, in key order, and a page in, in one transaction, keeping rows already there.

Every column of a copied table is portable here (SQLite keeps no bookkeeping of its own in
them), so a page carries all of them. ``INSERT OR IGNORE`` keeps a row whose key, or other
unique column (``mailbox.msg_id``), is there already: a copy run again writes only what the
last run did not. An ``AUTOINCREMENT`` key given explicitly moves its counter past it, so a
copied mailbox and audit log go on numbering after their copied rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tether.errors import StoreError
from tether.store.copy.tables import TableLoad, TablePage, key_of
from tether.store.sqlite.conn import Database, Tx


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def _columns(db: Database, table: str) -> tuple[str, ...]:
    found = tuple(str(r[1]) for r in await db.read(f"PRAGMA table_info({_quoted(table)})"))
    if not found:
        raise StoreError(f"store {db.path!r} has no table {table!r}: it is damaged")
    return found


async def dump_table(
    db: Database, table: str, after: Sequence[Any] | None, limit: int
) -> TablePage:
    key = key_of(table)
    columns = await _columns(db, table)
    total = None
    if after is None:
        total = int((await db.read(f"SELECT COUNT(*) FROM {_quoted(table)}"))[0][0])
    if limit == 0:
        return TablePage(table, columns, [], None, total)
    keys = ", ".join(map(_quoted, key))
    where = ""
    params: list[Any] = []
    if after is not None:
        if len(after) != len(key):
            raise ValueError(f"the key of {table} has {len(key)} column(s), not {len(after)}")
        where = f" WHERE ({keys}) > ({', '.join('?' * len(key))})"
        params += list(after)
    sql = (
        f"SELECT {', '.join(map(_quoted, columns))} FROM {_quoted(table)}{where} "
        f"ORDER BY {keys} LIMIT ?"
    )
    rows = [tuple(r) for r in await db.read(sql, [*params, limit])]
    at = [columns.index(k) for k in key]
    last = tuple(rows[-1][i] for i in at) if rows else None
    return TablePage(table, columns, rows, last, total)


async def load_table(db: Database, page: TablePage) -> TableLoad:
    key_of(page.table)
    have = await _columns(db, page.table)
    keep = [i for i, c in enumerate(page.columns) if c in have]
    ignored = tuple(c for c in page.columns if c not in have)
    if not page.rows:
        return TableLoad(0, ignored)
    names = ", ".join(_quoted(page.columns[i]) for i in keep)
    sql = (
        f"INSERT OR IGNORE INTO {_quoted(page.table)} ({names}) "
        f"VALUES ({', '.join('?' * len(keep))})"
    )
    rows = [tuple(_portable(row[i]) for i in keep) for row in page.rows]

    async def write(tx: Tx) -> int:
        return await tx.executemany(sql, rows)

    return TableLoad(await db.transaction(write), ignored)


def _portable(value: Any) -> Any:
    # A backend with booleans hands them out as they are: SQLite keeps them as 0 and 1.
    return int(value) if isinstance(value, bool) else value
