"""The PostgreSQL store's schema: numbered migrations recorded in a version table, applied by
``migrate`` (``tether migrate``) under an advisory lock, never by opening a store.

An upgrade is shown with a migration of this tether's next version, added for the test: a
store of the version before is refused on open (``SchemaVersionError`` saying to run
``tether migrate``), ``migrate`` refuses while a runtime may be using it, and then applies
the upgrade once, recording it."""

from __future__ import annotations

import anyio
import psycopg
import pytest

import tether
from tether.store.postgres import PostgresStore, schema
from tether.store.postgres.dsn import split_schema

pytestmark = pytest.mark.anyio

NEXT = schema.SCHEMA_VERSION + 1


def versions(url: str) -> list[tuple[int, str]]:
    dsn, name = split_schema(url, None)
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            f"SELECT version, name FROM {name}.{schema.VERSION_TABLE} ORDER BY version"
        ).fetchall()
    return [(int(v), str(n)) for v, n in rows]


async def test_concurrent_first_opens_create_the_schema_once(pg_url: str) -> None:
    """Runtimes starting together on a new store: the advisory lock lets one create the
    schema, the others find it made."""
    stores = [PostgresStore(pg_url) for _ in range(4)]
    try:
        async with anyio.create_task_group() as tg:
            for s in stores:
                tg.start_soon(s.open)
    finally:
        for s in stores:
            await s.close()
    assert versions(pg_url) == [(1, schema.MIGRATIONS[1][0])]


async def test_an_older_store_is_refused_on_open_and_upgraded_by_migrate(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStore(pg_url)
    await store.open()
    await store.register_runtime("rt-elsewhere", "another-host boot=x pidns=1:2", 7, 0.0)
    await store.close()
    step = ("a column for the test", "ALTER TABLE actors ADD COLUMN probe TEXT")
    monkeypatch.setitem(schema.MIGRATIONS, NEXT, step)
    monkeypatch.setattr(schema, "SCHEMA_VERSION", NEXT)

    with pytest.raises(tether.SchemaVersionError, match=r"version 1; .*tether migrate"):
        await PostgresStore(pg_url).open()
    with pytest.raises(tether.StoreError, match=r"may be in use by runtime.*rt-elsewhere"):
        await PostgresStore(pg_url).migrate()
    assert versions(pg_url) == [(1, schema.MIGRATIONS[1][0])]  # nothing changed
    assert await PostgresStore(pg_url).migrate(force=True) == (1, NEXT)
    assert await PostgresStore(pg_url).migrate() == (NEXT, NEXT)
    assert versions(pg_url)[-1] == (NEXT, "a column for the test")
    upgraded = PostgresStore(pg_url)
    await upgraded.open()
    await upgraded.close()


async def test_a_failed_migration_leaves_the_store_at_its_version(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migrations run in one transaction: one that fails changes nothing."""
    await PostgresStore(pg_url).migrate()
    broken = ("a step that fails halfway", "ALTER TABLE actors ADD COLUMN ok TEXT; SELECT 1/0")
    monkeypatch.setitem(schema.MIGRATIONS, NEXT, broken)
    monkeypatch.setattr(schema, "SCHEMA_VERSION", NEXT)
    with pytest.raises(tether.StoreError, match="division by zero"):
        await PostgresStore(pg_url).migrate(force=True)
    assert [v for v, _ in versions(pg_url)] == [1]
    dsn, name = split_schema(pg_url, None)
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT count(*) FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'actors' AND column_name = 'ok'",
            (name,),
        ).fetchone()
    assert found == (0,)


async def test_a_schema_holding_other_tables_is_not_taken_for_a_store(pg_url: str) -> None:
    dsn, name = split_schema(pg_url, None)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name}.customers (id INT)")
    with pytest.raises(tether.SchemaVersionError, match="not a tether store"):
        await PostgresStore(pg_url).open()
    with pytest.raises(tether.SchemaVersionError, match="not a tether store"):
        await PostgresStore(pg_url).migrate()
