"""A journal damaged in the file is named, never folded into a state the actor never had.

An actor's record carries ``head_seq``, the seq of its last committed event, written with
every step. Recovery must read every event up to it, in order, with no gap: a damaged page
that hides events (cell pointers overwritten) or rows deleted behind tether's back make the
actor's recovery a ``CorruptRecordError`` naming it. It goes unserved, its mail waits, and
every other actor keeps serving. SQLite checks each cell it reads (``cell_size_check``) and
the whole file at open (``quick_check``, logged as ``store_damaged``).
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tests.badinput import actors as b
from tests.badinput.test_corrupt_store import fast, sql
from tests.badinput.test_corrupt_store import logs as logs  # the fixture, by its name
from tests.schema_v2 import as_schema_v3
from tether.store.sqlite import SqliteStore
from tether.store.sqlite.migrations import migrate
from tether.store.sqlite.schema import SCHEMA_VERSION

pytestmark = pytest.mark.anyio

DEPOSITS = 300


@pytest.fixture(scope="module")
def deposits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed store: 'acct' made 300 acknowledged deposits of 1, 'other' one of 5 (its
    journal row sorts after every one of 'acct', on another page)."""
    db = tmp_path_factory.mktemp("deposits") / "base.db"

    async def build() -> None:
        async with fast(db) as rt:
            acct = await rt.spawn(b.Ledger, "acct")
            other = await rt.spawn(b.Ledger, "other")
            for _ in range(DEPOSITS):
                await acct.ask(b.Add(amount=1), timeout=30)
            await other.ask(b.Add(amount=5), timeout=30)

    anyio.run(build)
    assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0
    return db


def copy_of(store: Path, tmp_path: Path) -> Path:
    db = tmp_path / "a.db"
    shutil.copy(store, db)
    return db


def journal_leaves(db: Path) -> list[int]:
    """The journal's leaf pages, in file order (``dbstat``)."""
    return [
        p
        for (p,) in sql(
            db,
            "SELECT pageno FROM dbstat WHERE name = 'journal' AND pagetype = 'leaf' "
            "ORDER BY pageno",
        )
    ]


def xor_cell_pointers(
    db: Path, page: int, cells: Callable[[int], range | list[int]], mask: int
) -> None:
    """XOR ``mask`` into the low byte of the cell pointers ``cells(count)`` of a b-tree leaf
    page (its header: 8 bytes, the cell count at offset 3; the pointer array follows)."""
    size = int(sql(db, "PRAGMA page_size")[0][0])
    data = bytearray(db.read_bytes())
    header = (page - 1) * size + (100 if page == 1 else 0)
    count = struct.unpack(">H", data[header + 3 : header + 5])[0]
    for i in cells(count):
        data[header + 8 + 2 * i + 1] ^= mask
    db.write_bytes(bytes(data))


def corrupt_errors(logs: list[MutableMapping[str, Any]], actor_id: str) -> list[str]:
    return [
        str(e["error"])
        for e in logs
        if e.get("actor_id") == actor_id and "CorruptRecordError" in str(e.get("error", ""))
    ]


async def unserved_and_named(
    db: Path, logs: list[MutableMapping[str, Any]], **kw: Any
) -> list[str]:
    """'acct' answers nothing (never a wrong balance) and its recovery names it; 'other'
    serves, and takes a new deposit. The errors logged for 'acct'."""
    async with fast(db, **kw) as rt:
        assert await rt.ref("other").ask(b.Log(), timeout=10) == [5]
        await rt.ref("other").tell(b.Add(amount=7))
        with anyio.fail_after(30):
            while await rt.ref("other").ask(b.Log(), timeout=10) != [5, 7]:
                await anyio.sleep(0.05)
        try:
            served = await rt.ref("acct").ask(b.Log(), timeout=1.0)
        except tether.AskTimeout:
            pass
        else:
            pytest.fail(f"a damaged journal was served: a balance of {sum(served)}")
        with anyio.fail_after(30):
            while not corrupt_errors(logs, "acct"):
                await anyio.sleep(0.05)
    errors = corrupt_errors(logs, "acct")
    assert all("'acct'" in e for e in errors), errors
    return errors


# Cell pointers of the journal's leaf pages XOR-ed: before head_seq and cell_size_check,
# each of these served a balance below 300 (0, 48, 95, 143, 189, 299) with no error.
@pytest.mark.parametrize(
    ("leaf", "cells", "mask"),
    [
        (0, lambda n: range(n), 2),
        (0, lambda n: [n - 1], 8),
        (0, lambda n: range(n // 2, n), 32),
        (1, lambda n: range(n // 2, n), 8),
        (1, lambda n: [n - 1], 32),
        (0, lambda n: [0], 32),
    ],
    ids=[
        "all-of-first",
        "last-of-first",
        "half-of-first",
        "half-of-second",
        "last-of-second",
        "first-of-first",
    ],
)
async def test_xored_cell_pointers_in_journal_leaves_are_named_never_a_wrong_balance(
    deposits: Path,
    tmp_path: Path,
    logs: list[MutableMapping[str, Any]],
    leaf: int,
    cells: Callable[[int], range | list[int]],
    mask: int,
) -> None:
    db = copy_of(deposits, tmp_path)
    leaves = journal_leaves(db)
    assert len(leaves) >= 3  # 'acct' spans the first two; 'other' is on the last
    xor_cell_pointers(db, leaves[leaf], cells, mask)
    await unserved_and_named(db, logs)
    # Nothing acknowledged is lost: the ask waits in the mailbox until the store is repaired.
    assert sql(db, "SELECT COUNT(*) FROM mailbox WHERE actor_id = 'acct'") == [(1,)]


async def test_a_store_opened_with_damaged_pages_is_logged_as_damaged_and_serves_on(
    deposits: Path, tmp_path: Path, logs: list[MutableMapping[str, Any]]
) -> None:
    db = copy_of(deposits, tmp_path)
    xor_cell_pointers(db, journal_leaves(db)[1], lambda n: range(n // 2, n), 8)
    await unserved_and_named(db, logs)
    [damaged] = [e for e in logs if e.get("event") == "store_damaged"]
    assert damaged["log_level"] == "error"
    assert damaged["problems"]
    assert "tether check" in damaged["advice"]


async def test_quick_check_false_skips_the_check_at_open_and_the_fold_still_names_the_actor(
    deposits: Path, tmp_path: Path, logs: list[MutableMapping[str, Any]]
) -> None:
    db = copy_of(deposits, tmp_path)
    xor_cell_pointers(db, journal_leaves(db)[1], lambda n: range(n // 2, n), 8)
    store = SqliteStore(db, quick_check=False)
    await unserved_and_named(db, logs, store=store)
    assert store.damage_at_open == []
    assert not [e for e in logs if e.get("event") == "store_damaged"]


async def test_every_connection_checks_cell_sizes(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "a.db")
    await store.open()
    try:
        assert await store._w().execute_fetchall("PRAGMA cell_size_check") == [(1,)]
        assert await store._read("PRAGMA cell_size_check") == [(1,)]
        assert store.damage_at_open == []
        assert await store.storage_problems() == []
    finally:
        await store.close()


# -- rows removed or moved behind tether's back (no page damage: SQLite sees nothing) ----------


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        ("DELETE FROM journal WHERE actor_id = 'acct' AND seq = 150", "skips from seq 149 to"),
        ("DELETE FROM journal WHERE actor_id = 'acct' AND seq > 290", "events 291..300 are"),
        ("DELETE FROM journal WHERE actor_id = 'acct'", "events 1..300 are missing"),
        ("UPDATE journal SET seq = seq + 1000 WHERE actor_id = 'acct' AND seq = 7", "to seq 8"),
    ],
    ids=["a-gap", "the-tail", "all-of-it", "a-moved-row"],
)
async def test_a_journal_missing_events_below_the_head_is_named_by_the_fold(
    deposits: Path,
    tmp_path: Path,
    logs: list[MutableMapping[str, Any]],
    damage: str,
    named: str,
) -> None:
    db = copy_of(deposits, tmp_path)
    sql(db, damage)
    errors = await unserved_and_named(db, logs)
    assert any(named in e for e in errors), errors


async def test_a_snapshot_past_the_head_is_named_by_the_fold(
    tmp_path: Path, logs: list[MutableMapping[str, Any]]
) -> None:
    db = tmp_path / "a.db"
    async with fast(db, snapshot_every=10) as rt:
        acct = await rt.spawn(b.Ledger, "acct")
        await rt.spawn(b.Ledger, "other")
        for _ in range(25):
            await acct.ask(b.Add(amount=1), timeout=10)
        await rt.ref("other").ask(b.Add(amount=5), timeout=10)
    assert sql(db, "SELECT seq FROM snapshots WHERE actor_id = 'acct'") == [(20,)]
    sql(db, "UPDATE actors SET head_seq = 15 WHERE actor_id = 'acct'")
    errors = await unserved_and_named(db, logs, snapshot_every=10)
    assert any("snapshot of 'acct' is at seq 20" in e and "head_seq 15" in e for e in errors)


# -- the upgrade that adds head_seq ------------------------------------------------------------


async def test_migrating_a_version_3_store_fills_each_head_from_its_journal(
    deposits: Path, tmp_path: Path
) -> None:
    db = copy_of(deposits, tmp_path)
    async with fast(db) as rt:  # a third actor that never persisted anything
        await rt.spawn(b.Ledger, "empty")
    as_schema_v3(db)
    with pytest.raises(tether.SchemaVersionError, match="schema version '3'"):
        async with fast(db):
            pass
    assert migrate(db) == (3, SCHEMA_VERSION)
    heads = dict(sql(db, "SELECT actor_id, head_seq FROM actors"))
    assert heads == {"acct": DEPOSITS, "other": 1, "empty": 0}
    async with fast(db) as rt:
        assert sum(await rt.ref("acct").ask(b.Log(), timeout=10)) == DEPOSITS
        await rt.ref("acct").ask(b.Add(amount=1), timeout=10)
    assert sql(db, "SELECT head_seq FROM actors WHERE actor_id = 'acct'") == [(DEPOSITS + 1,)]
