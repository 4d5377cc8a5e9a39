"""What only ``SqliteStore`` has: a file on disk, its schema version, and its durability setting.

The store semantics shared with ``MemoryStore`` live in ``test_store_conformance.py``.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import msgspec
import pytest

from tests.sqlite_files import dump
from tests.store.effect_slots import refuses_another_actors_slot
from tether.errors import SchemaVersionError, StoreOpenError
from tether.store.records import (
    AttemptFailed,
    Batch,
    EffectRecord,
    EffectWrite,
    JournalRow,
    LeaseAcquire,
    RuntimeRecord,
    Snapshot,
    Spawn,
    StepCommit,
)
from tether.store.sqlite import SqliteStore
from tether.store.sqlite.schema import SCHEMA_VERSION
from tether.testing.conformance.support import NOW, effect, msg, owned, record

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture
async def no_leaked_connections(anyio_backend: str) -> AsyncIterator[None]:
    """Fail the test if it leaves a connection (and its worker thread) open.

    A leaked worker thread is not a daemon: left alone, it blocks the interpreter's exit and the
    whole pytest run hangs after the summary. So leaked connections are closed here, then reported.
    """
    before = set(threading.enumerate())
    yield
    workers = [
        t
        for t in set(threading.enumerate()) - before
        if t.name.startswith("tether-sqlite-") and t.is_alive()
    ]
    for t in workers:  # a connection being stopped finishes promptly
        await anyio.to_thread.run_sync(t.join, 2.0)
    alive = {t for t in workers if t.is_alive()}
    if alive:
        pytest.fail(f"{len(alive)} store connection thread(s) left running: {alive!r}")


async def make_store(path: Path) -> None:
    """Create a tether store at ``path`` and close it."""
    s = SqliteStore(path)
    await s.open()
    await s.close()


# -- opening ------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leaked_connections")
async def test_opening_a_file_in_a_missing_folder_names_the_folder(tmp_path: Path) -> None:
    """A path whose folder does not exist raises StoreOpenError naming that folder; nothing is created."""
    folder = tmp_path / "no-such-folder"
    with pytest.raises(StoreOpenError, match="no-such-folder"):
        await SqliteStore(folder / "t.db").open()
    assert not folder.exists()


@pytest.mark.anyio
@pytest.mark.skipif(IS_ROOT, reason="root writes through chmod 0o400; see the directory case")
@pytest.mark.usefixtures("no_leaked_connections")
async def test_opening_a_read_only_file_raises_store_open_error(tmp_path: Path) -> None:
    """An existing store file without write permission raises StoreOpenError."""
    path = tmp_path / "t.db"
    await make_store(path)
    path.chmod(0o400)
    try:
        with pytest.raises(StoreOpenError, match="not writable"):
            await SqliteStore(path).open()
    finally:
        path.chmod(0o600)


@pytest.mark.anyio
@pytest.mark.skipif(IS_ROOT, reason="root writes through chmod 0o500 on the folder")
@pytest.mark.usefixtures("no_leaked_connections")
async def test_creating_a_store_in_a_read_only_folder_raises_store_open_error(
    tmp_path: Path,
) -> None:
    """A new store in a folder without write permission raises StoreOpenError naming the folder."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(StoreOpenError, match="not writable"):
            await SqliteStore(folder / "t.db").open()
    finally:
        folder.chmod(0o700)


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leaked_connections")
async def test_opening_a_path_that_is_a_directory_raises_store_open_error(tmp_path: Path) -> None:
    """A path that cannot be opened as a file (a directory, unwritable even for root) raises StoreOpenError."""
    path = tmp_path / "actually-a-folder"
    path.mkdir()
    with pytest.raises(StoreOpenError, match="actually-a-folder"):
        await SqliteStore(path).open()
    assert list(path.iterdir()) == []


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leaked_connections")
async def test_opening_a_file_that_is_not_sqlite_raises_store_open_error(tmp_path: Path) -> None:
    """A file of random bytes raises StoreOpenError and is left as it was."""
    path = tmp_path / "t.db"
    junk = os.urandom(4096)
    path.write_bytes(junk)
    with pytest.raises(StoreOpenError):
        await SqliteStore(path).open()
    assert path.read_bytes() == junk


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leaked_connections")
async def test_opening_an_sqlite_file_of_another_program_raises_schema_version_error(
    tmp_path: Path,
) -> None:
    """An SQLite file with tables but no meta table is refused with SchemaVersionError, unmodified."""
    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("INSERT INTO customers (name) VALUES ('ada')")
    con.commit()
    con.close()
    before = dump(path)
    with pytest.raises(SchemaVersionError, match="not a tether store"):
        await SqliteStore(path).open()
    assert dump(path) == before


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leaked_connections")
async def test_opening_a_store_of_an_unknown_schema_version_is_refused_untouched(
    tmp_path: Path,
) -> None:
    """A tether store whose meta schema_version is '999' raises SchemaVersionError and is not modified."""
    path = tmp_path / "t.db"
    await make_store(path)
    con = sqlite3.connect(path)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
        str(SCHEMA_VERSION),
    )
    con.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    before = dump(path)
    with pytest.raises(SchemaVersionError, match="999"):
        await SqliteStore(path).open()
    assert dump(path) == before


@pytest.mark.anyio
async def test_a_new_store_is_in_wal_mode_with_the_current_schema_version(tmp_path: Path) -> None:
    """A fresh store file is in WAL mode and records SCHEMA_VERSION in meta."""
    path = tmp_path / "t.db"
    await make_store(path)
    con = sqlite3.connect(path)
    try:
        assert con.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
            str(SCHEMA_VERSION),
        )
    finally:
        con.close()


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, under which SQLite creates files 0644 (readable by every user)."""
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.anyio
@pytest.mark.usefixtures("umask_022")
async def test_a_new_store_and_its_wal_and_shm_files_are_readable_by_their_owner_only(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"
    store = SqliteStore(path)
    await store.open()
    try:
        files = [path, tmp_path / "t.db-wal", tmp_path / "t.db-shm"]
        assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}
    finally:
        await store.close()
    assert mode(path) == 0o600


@pytest.mark.anyio
@pytest.mark.usefixtures("umask_022")
async def test_an_existing_store_files_mode_is_left_as_its_owner_set_it(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    await make_store(path)
    path.chmod(0o640)  # shared with a backup group on purpose
    store = SqliteStore(path)
    await store.open()
    await store.close()
    assert mode(path) == 0o640
    empty = tmp_path / "empty.db"  # created by someone else, empty: tether writes the schema
    empty.touch(mode=0o644)
    await make_store(empty)
    assert mode(empty) == 0o644


# -- durability ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_everything_committed_survives_close_and_reopen(tmp_path: Path) -> None:
    """Actors, leases, messages, dedup keys, journal, snapshot, replies, dead letters and runtimes are on disk."""
    path = tmp_path / "t.db"
    s = SqliteStore(path)
    await s.open()
    try:
        await s.register_runtime("rt-1", "host", 42, NOW)
        await s.apply(Batch(spawns=[Spawn(record("a")), Spawn(record("b", parent_id="a"))]))
        fence = (await s.apply(Batch(acquires=[LeaseAcquire("a", "rt-1", 30.0)]))).leases["a"]
        assert fence is not None
        await s.apply(
            Batch(
                messages=[
                    msg("ask", wants_reply=True),
                    msg("poison"),
                    msg("kept", dedup_key="k"),
                    msg("later", "b", deliver_at=NOW + 60),
                ]
            )
        )
        await s.apply(
            Batch(
                steps=[
                    StepCommit(
                        actor_id="a",
                        fence=fence,
                        msg_id="ask",
                        events=[JournalRow(1, b"e1"), JournalRow(2, b"e2")],
                        outbox=[],
                        reply=b"yes",
                        snapshot=Snapshot(2, b"state"),
                    )
                ],
                failures=[
                    AttemptFailed("a", fence, "poison", ["boom"], dead_letter_reason="bad", now=NOW)
                ],
            )
        )
        before_actors = await s.list_actors()
    finally:
        await s.close()

    s = SqliteStore(path)
    await s.open()
    try:
        assert await s.list_actors() == before_actors
        rec = await s.get_actor("a")
        assert rec is not None
        assert (rec.fence, rec.lease_owner) == (fence, "rt-1")
        assert await s.list_runtimes() == [RuntimeRecord("rt-1", "host", 42, NOW)]
        assert [m.msg_id for m in await s.pending("a", NOW, 10)] == ["kept"]
        assert [m.msg_id for m in await s.pending("b", NOW + 60, 10)] == ["later"]
        assert await s.find_dedup("a", "k") == "kept"
        assert await s.load_journal("a", 0, 10) == [JournalRow(1, b"e1"), JournalRow(2, b"e2")]
        assert await s.load_snapshot("a") == Snapshot(2, b"state")
        [reply] = await s.get_replies(["ask"])
        assert (reply.ok, reply.payload) == (True, b"yes")
        [letter] = await s.dead_letters()
        assert (letter.msg_id, letter.errors, letter.reason) == ("poison", ["boom"], "bad")
        dup = await s.apply(Batch(messages=[msg("again", dedup_key="k")]))
        assert dup.duplicates == {"again": "kept"}
    finally:
        await s.close()


@pytest.mark.anyio
@pytest.mark.parametrize(("durability", "level"), [("full", 2), ("normal", 1)])
async def test_durability_sets_pragma_synchronous_on_every_connection(
    tmp_path: Path, durability: str, level: int
) -> None:
    """durability='full' gives synchronous=FULL (2) and 'normal' gives NORMAL (1), on writer and reader."""
    s = SqliteStore(tmp_path / "t.db", durability=durability)  # type: ignore[arg-type]
    await s.open()
    try:
        for con in (s._db.writer, s._db.reader):
            assert con is not None
            assert await (await con.execute("PRAGMA synchronous")).fetchone() == (level,)
    finally:
        await s.close()


def test_the_default_durability_is_full(tmp_path: Path) -> None:
    """Without a durability argument a store syncs fully (I1, I2 survive power loss)."""
    assert SqliteStore(tmp_path / "t.db").durability == "full"


@pytest.mark.parametrize("durability", ["off", "FULL", "", None])
def test_an_invalid_durability_is_refused(tmp_path: Path, durability: object) -> None:
    """Any durability other than 'full' or 'normal' raises StoreOpenError naming the setting."""
    with pytest.raises(StoreOpenError, match="durability"):
        SqliteStore(tmp_path / "t.db", durability=durability)  # type: ignore[arg-type]
    assert not (tmp_path / "t.db").exists()


# -- the effects ledger, keyed by message -------------------------------------------------------


@pytest.mark.anyio
async def test_an_effect_row_never_overwrites_another_actors_row_under_the_same_message_id(
    tmp_path: Path,
) -> None:
    """The ledger is keyed by (msg_id, idx), unique per store. Were two actors' effects ever to
    share one, the second write is refused with the whole batch, never recorded over the
    first actor's row."""
    store = SqliteStore(tmp_path / "t.db")
    await store.open()
    try:
        await refuses_another_actors_slot(store)
    finally:
        await store.close()


# -- large ledger blobs -------------------------------------------------------------------------

# A model request: the same context, a little longer at every step (about 9 kB).
_REQUEST = msgspec.msgpack.encode(
    {"messages": [{"role": "user", "content": f"refund order o-{i} for ada"} for i in range(300)]}
)


async def _ledger_with(path: Path, *records: EffectRecord) -> SqliteStore:
    store = SqliteStore(path)
    await store.open()
    fence = await owned(store, "a")
    await store.apply(Batch(effects=[EffectWrite(fence, r) for r in records]))
    return store


def _stored(path: Path, msg_id: str) -> tuple[bytes, bytes | None]:
    con = sqlite3.connect(path)
    try:
        row = con.execute("SELECT args, result FROM effects WHERE msg_id = ?", (msg_id,)).fetchone()
        return row[0], row[1]
    finally:
        con.close()


@pytest.mark.anyio
async def test_a_large_ledger_blob_is_stored_deflated_and_read_back_as_written(
    tmp_path: Path,
) -> None:
    big = msgspec.structs.replace(
        effect("m1", 0),
        args=_REQUEST,
        status="done",
        result=msgspec.msgpack.encode(["refunded"] * 300),
    )
    small = effect("m2", 0)
    store = await _ledger_with(tmp_path / "t.db", big, small)
    try:
        args, result = _stored(tmp_path / "t.db", "m1")
        assert args.startswith(b"\xc1")  # packed, and under a third of its size
        assert len(args) * 3 < len(_REQUEST)
        assert result is not None
        assert result.startswith(b"\xc1")
        assert _stored(tmp_path / "t.db", "m2")[0] == small.args  # small: stored as it is
        assert await store.effects_of("a", "m1") == [big]
        assert await store.effects_of("a", "m2") == [small]
    finally:
        await store.close()


@pytest.mark.anyio
async def test_a_large_blob_written_unpacked_reads_as_it_is(tmp_path: Path) -> None:
    """Rows written before blobs were packed (or by a migration) are read unchanged."""
    store = await _ledger_with(tmp_path / "t.db", effect("m1", 0))
    try:
        con = sqlite3.connect(tmp_path / "t.db")
        con.execute("UPDATE effects SET args = ? WHERE msg_id = 'm1'", (_REQUEST,))
        con.commit()
        con.close()
        [rec] = await store.effects_of("a", "m1")
        assert rec.args == _REQUEST
    finally:
        await store.close()


@pytest.mark.anyio
async def test_a_packed_blob_that_does_not_inflate_is_handed_on_as_stored(tmp_path: Path) -> None:
    """Damage on disk: the blob is not msgpack either, so the layer that decodes it reports it
    (tests/badinput: shown as undecodable, a replay that fails naming the key); the store
    neither raises nor hides it, and the other rows read as ever."""
    store = await _ledger_with(tmp_path / "t.db", effect("m1", 0), effect("m1", 1))
    try:
        con = sqlite3.connect(tmp_path / "t.db")
        con.execute("UPDATE effects SET args = ? WHERE msg_id = 'm1' AND idx = 0", (b"\xc1oops",))
        con.commit()
        con.close()
        damaged, intact = await store.effects_of("a", "m1")
        assert damaged.args == b"\xc1oops"
        assert intact == effect("m1", 1)
    finally:
        await store.close()


# -- schema upgrades ----------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leaked_connections")
async def test_a_version_5_store_is_upgraded_with_its_waiting_messages_and_then_keeps_traces(
    tmp_path: Path,
) -> None:
    """5 → 6 adds the mailbox's traceparent: messages stored before read back without one, and
    are otherwise unchanged; a message stored after keeps its own. The upgraded store has the
    very mailbox table a new store has."""
    from tests.schema_v2 import as_schema_v5

    path, fresh = tmp_path / "t.db", tmp_path / "fresh.db"
    await make_store(fresh)
    s = SqliteStore(path)
    await s.open()
    try:
        await s.apply(Batch(spawns=[Spawn(record("a"))]))
        await s.apply(Batch(messages=[msg("old-1"), msg("old-2", wants_reply=True)]))
    finally:
        await s.close()
    as_schema_v5(path)
    with pytest.raises(SchemaVersionError, match=r"version '5'.*tether --db .* migrate"):
        await SqliteStore(path).open()

    assert await SqliteStore(path).migrate() == (5, SCHEMA_VERSION)
    s = SqliteStore(path)
    await s.open()
    try:
        traced = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        new = msgspec.structs.replace(msg("new"), traceparent=traced)
        await s.apply(Batch(messages=[new]))
        got = await s.pending("a", NOW, 10)
    finally:
        await s.close()
    assert [(m.msg_id, m.wants_reply, m.payload, m.traceparent) for m in got] == [
        ("old-1", False, b"old-1", None),
        ("old-2", True, b"old-2", None),
        ("new", False, b"new", traced),
    ]

    def columns(db: Path) -> list[tuple[object, ...]]:
        con = sqlite3.connect(db)
        try:
            return con.execute("PRAGMA table_info(mailbox)").fetchall()
        finally:
            con.close()

    assert columns(path) == columns(fresh)
