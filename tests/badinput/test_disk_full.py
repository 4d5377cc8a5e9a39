"""A full disk: writes fail with a clear StoreError (JournalWriteError for commits), no step is
half-applied, the runtime keeps serving what needs no new space, and once space is back it
carries on by itself with nothing acknowledged lost.

Two simulations:

* ``PRAGMA max_page_count`` on the store's writer connection (always available; it is per
  connection, so it is set on the one tether writes through): the file cannot grow, so a
  write that needs a new page fails with SQLITE_FULL while one that fits still succeeds;
* a real full disk: a small tmpfs filled up with a filler file (needs root and permission
  to mount; skipped otherwise). Every write fails there, the WAL included.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tests.badinput import actors as b
from tether.store.sqlite import SqliteStore

pytestmark = pytest.mark.anyio


def sql(db: Path, statement: str, *params: Any) -> list[Any]:
    con = sqlite3.connect(db)
    try:
        with con:
            return con.execute(statement, params).fetchall()
    finally:
        con.close()


async def set_max_pages(store: SqliteStore, pages: int | None) -> int:
    """Cap the file at ``pages`` (None: its current size); returns the cap in force."""
    writer = store._w()
    if pages is None:
        pages = (await writer.execute("PRAGMA page_count")).rows[0][0]
    return int((await writer.execute(f"PRAGMA max_page_count = {pages}")).rows[0][0])


async def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not await predicate():
            await anyio.sleep(0.05)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    b.FAILS.clear()


# -- the file cannot grow (max_page_count) --------------------------------------------------------


async def test_a_send_that_needs_a_new_page_fails_clearly_and_stores_nothing(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    store = SqliteStore(db)
    async with tether.Runtime(store=store, poll_interval=0.02, lease_ttl=2.0) as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        await ledger.ask(b.Add(amount=1), timeout=5)
        await set_max_pages(store, None)
        with pytest.raises(tether.JournalWriteError, match="full") as info:
            await ledger.tell(b.Blob(data=b"x" * 50_000))
        assert isinstance(info.value, tether.StoreError)
        with pytest.raises(tether.JournalWriteError, match="full"):
            await ledger.tell(b.Blob(data=b"x" * 50_000), dedup_key="big")
        # What fits still goes through: the runtime keeps serving.
        await ledger.tell(b.Add(amount=2))
        assert await ledger.ask(b.Log(), timeout=5) == [1, 2]
        assert await rt.dead_letters.list() == []
        await set_max_pages(store, 1 << 30)
        # The refused send took no dedup key: the same key is free.
        await ledger.tell(b.Blob(data=b"x" * 50_000), dedup_key="big")
        assert await ledger.ask(b.Log(), timeout=5) == [1, 2, 50_000]
    assert sql(db, "SELECT COUNT(*) FROM mailbox") == [(0,)]


async def test_a_step_whose_commit_finds_the_disk_full_is_not_half_applied(
    tmp_path: Path,
) -> None:
    """The step's event needs new pages: the commit fails, the state is rebuilt from what is
    committed (the event is not in it), the actor keeps answering, and once there is room
    again the message is still there to run (from the mailbox or the dead letters)."""
    db = tmp_path / "a.db"
    store = SqliteStore(db)
    async with tether.Runtime(store=store, poll_interval=0.02, lease_ttl=2.0, max_attempts=3) as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        await ledger.ask(b.Add(amount=1), timeout=5)
        await set_max_pages(store, None)
        await ledger.tell(b.Grow(size=50_000))  # stored: the message itself is small
        await ledger.tell(b.Add(amount=2))
        await wait_for(lambda: _log_is(ledger, [1, 2]))
        assert sql(db, "SELECT COUNT(*) FROM journal WHERE actor_id = 'l'") == [(2,)]
        await set_max_pages(store, 1 << 30)
        letters = await rt.dead_letters.list()
        for letter in letters:
            await rt.dead_letters.retry(letter.msg_id)
        await wait_for(lambda: _log_is(ledger, [1, 2, 50_000]))
    assert sql(db, "SELECT COUNT(*) FROM mailbox") == [(0,)]


async def _log_is(ledger: tether.ActorRef, log: list[int]) -> bool:
    return bool(await ledger.ask(b.Log(), timeout=5) == log)


async def test_a_commit_failure_is_named_in_the_history_of_a_dead_lettered_message(
    tmp_path: Path,
) -> None:
    """When a message whose steps could not be committed ends in dead letters, its history
    says why (the store was full), not that 'the process stopped during delivery'."""
    db = tmp_path / "a.db"
    store = SqliteStore(db)
    async with tether.Runtime(store=store, poll_interval=0.02, lease_ttl=2.0, max_attempts=3) as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        await ledger.ask(b.Add(amount=1), timeout=5)
        await set_max_pages(store, None)
        await ledger.tell(b.Grow(size=50_000))
        await wait_for(rt.dead_letters.list)
        [letter] = await rt.dead_letters.list()
    assert not any("the process stopped" in e for e in letter.errors), letter.errors
    assert any("full" in e for e in letter.errors), letter.errors


# -- a real full disk (tmpfs) ------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs, mounted for this test only."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(disk: Path) -> Path:
    """Fill the disk with a filler file until the first ENOSPC; returns the file."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 4096)
    return filler


async def test_on_a_full_disk_sends_fail_clearly_and_reads_are_served(small_disk: Path) -> None:
    db = small_disk / "t.db"
    async with tether.Runtime(db, poll_interval=0.02, lease_ttl=2.0) as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        await ledger.ask(b.Add(amount=1), timeout=5)
        filler = fill(small_disk)
        try:
            with pytest.raises(tether.JournalWriteError, match="full"):
                await ledger.tell(b.Add(amount=2))
            with pytest.raises(tether.JournalWriteError, match="full"):
                await rt.spawn(b.Ledger, "new")
            assert [t.id for t in await rt.tree()] == ["l"]
            assert await rt.dead_letters.list() == []
        finally:
            filler.unlink()
        await ledger.tell(b.Add(amount=3))
        assert await ledger.ask(b.Log(), timeout=5) == [1, 3]


async def test_admin_writes_on_a_full_disk_raise_store_errors(small_disk: Path) -> None:
    db = small_disk / "t.db"
    async with tether.Runtime(db, poll_interval=0.02, lease_ttl=2.0, max_attempts=1) as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        with pytest.raises(tether.MessageDeadLettered):
            await ledger.ask(b.Boom(key="k", times=1), timeout=5)
        [letter] = await rt.dead_letters.list()
        filler = fill(small_disk)
        try:
            with pytest.raises(tether.StoreError, match="full"):
                await rt.dead_letters.retry(letter.msg_id)
            with pytest.raises(tether.StoreError, match="full"):
                await rt.dead_letters.discard(letter.msg_id)
        finally:
            filler.unlink()
        await rt.dead_letters.retry(letter.msg_id)
        await wait_for(lambda: _log_is(ledger, [1000]))


async def test_queued_messages_run_by_themselves_once_the_disk_has_room_again(
    small_disk: Path,
) -> None:
    """Messages acknowledged before the disk filled are not lost, and they run once there is
    room again, with no new message needed to wake their actor."""
    db = small_disk / "t.db"
    async with tether.Runtime(db, poll_interval=0.02, lease_ttl=1.0) as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        other = await rt.spawn(b.Ledger, "other")
        await ledger.ask(b.Add(amount=1), timeout=5)
        await ledger.tell(b.Nap(seconds=0.2))
        for n in (10, 20, 30):
            await ledger.tell(b.Add(amount=n))
        filler = fill(small_disk)
        await anyio.sleep(2.5)  # commits fail; leases lapse and are taken back meanwhile
        filler.unlink()
        await other.tell(b.Add(amount=5))  # the runtime serves others at once
        assert await other.ask(b.Log(), timeout=5) == [5]

        async def drained() -> bool:
            return sql(db, "SELECT COUNT(*) FROM mailbox WHERE actor_id = 'l'") == [(0,)]

        await wait_for(drained, timeout=8)
        assert await ledger.ask(b.Log(), timeout=5) == [1, 10, 20, 30]
        assert await rt.dead_letters.list() == []


async def test_closing_the_runtime_on_a_full_disk_does_not_hang_or_lose_mail(
    small_disk: Path,
) -> None:
    """Closing cannot record much on a full disk; it may say so with a StoreError, but it must
    not hang or raise a bare sqlite3 error, and the queued mail is there on the next open."""
    db = small_disk / "t.db"
    filler: Path | None = None
    try:
        with anyio.fail_after(15):
            try:
                async with tether.Runtime(db, poll_interval=0.02, lease_ttl=2.0) as rt:
                    ledger = await rt.spawn(b.Ledger, "l")
                    await ledger.ask(b.Add(amount=1), timeout=5)
                    await ledger.tell(b.Add(amount=2), delay=0.5)
                    filler = fill(small_disk)
            except tether.StoreError:
                pass
    finally:
        if filler is not None:
            filler.unlink()
    async with tether.Runtime(db, poll_interval=0.02, lease_ttl=2.0) as rt2:
        await wait_for(lambda: _log_is(rt2.ref("l"), [1, 2]))
